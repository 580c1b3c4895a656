//! Function runs compared task by task (`report --by-task`): the tasks each run passes that
//! another fails, and how many pass in every run or in some run — what separates two methods
//! beyond their Pass@1, and what choosing between their answers could gain at most.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::metrics::verdict;
use super::report::run_records;
use super::EvalError;

/// One compared run: a run directory, or the shard directories of one run.
#[derive(Debug, Clone, Serialize)]
pub struct ComparedRun {
    pub method: String,
    pub dirs: Vec<PathBuf>,
    /// Of the compared tasks: how many pass, and how many pass here and in no other run.
    pub passed: usize,
    pub only_here: usize,
}

/// A task the runs disagree on.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    pub namespace: String,
    pub kinds: Vec<String>,
    /// Per run, in the runs' order: `pass`, or why not (the exception its test ended with,
    /// `timeout`, ...).
    pub outcomes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TaskComparison {
    pub runs: Vec<ComparedRun>,
    /// Tasks every run finished: the ones compared.
    pub compared: usize,
    /// Tasks only some of the runs finished, left out.
    pub left_out: usize,
    pub pass_in_every_run: usize,
    pub pass_in_some_run: usize,
    /// The tasks that pass in some runs and fail in others, by name.
    pub differing: Vec<TaskRow>,
}

/// Compares `runs` (each one directory, or the shard directories of one run, checked as
/// `report --merge` checks them) on the tasks they all finished.
pub fn compare_by_task(runs: &[Vec<PathBuf>]) -> Result<TaskComparison, EvalError> {
    if runs.len() < 2 {
        return Err(EvalError::Invalid(
            "--by-task compares two runs or more".into(),
        ));
    }
    // Per run: task -> (kinds, outcome).
    let mut outcomes: Vec<BTreeMap<String, (Vec<String>, String)>> = Vec::new();
    let mut methods = Vec::new();
    for dirs in runs {
        let (info, records) = run_records(dirs)?;
        let method = info.method;
        let mut tasks = BTreeMap::new();
        for r in records {
            let outcome = verdict(&r.result);
            let kinds = r.result.kinds.iter().map(|k| k.as_str().into()).collect();
            tasks.insert(r.result.namespace, (kinds, outcome));
        }
        methods.push(method);
        outcomes.push(tasks);
    }
    let all: BTreeSet<&String> = outcomes.iter().flat_map(|t| t.keys()).collect();
    let common: Vec<&String> = all
        .iter()
        .copied()
        .filter(|n| outcomes.iter().all(|t| t.contains_key(*n)))
        .collect();
    let mut out = TaskComparison {
        runs: runs
            .iter()
            .zip(methods)
            .map(|(dirs, method)| ComparedRun {
                method,
                dirs: dirs.clone(),
                passed: 0,
                only_here: 0,
            })
            .collect(),
        compared: common.len(),
        left_out: all.len() - common.len(),
        pass_in_every_run: 0,
        pass_in_some_run: 0,
        differing: Vec::new(),
    };
    for name in common {
        let row: Vec<&(Vec<String>, String)> = outcomes.iter().map(|t| &t[name]).collect();
        let passing: Vec<usize> = (0..row.len()).filter(|&i| row[i].1 == "pass").collect();
        for &i in &passing {
            out.runs[i].passed += 1;
        }
        if let [only] = passing[..] {
            out.runs[only].only_here += 1;
        }
        if !passing.is_empty() {
            out.pass_in_some_run += 1;
        }
        if passing.len() == row.len() {
            out.pass_in_every_run += 1;
        } else if !passing.is_empty() {
            out.differing.push(TaskRow {
                namespace: name.clone(),
                kinds: row[0].0.clone(),
                outcomes: row.iter().map(|(_, o)| o.clone()).collect(),
            });
        }
    }
    Ok(out)
}

/// [`compare_by_task`] as markdown: the runs with their passes, then the tasks they disagree on.
pub fn by_task_markdown(c: &TaskComparison) -> String {
    let mut s = format!("on the {} tasks every run finished", c.compared);
    if c.left_out > 0 {
        let _ = write!(s, " ({} finished by only some are left out)", c.left_out);
    }
    s.push_str("\n\n| # | method | run | passed | passed only here |\n|---|---|---|---:|---:|\n");
    for (i, r) in c.runs.iter().enumerate() {
        let dirs: Vec<String> = r.dirs.iter().map(|d| d.display().to_string()).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            i + 1,
            r.method,
            dirs.join(" + "),
            r.passed,
            r.only_here
        );
    }
    let _ = writeln!(
        s,
        "\npass in every run: {} · in some run: {} · in none: {}",
        c.pass_in_every_run,
        c.pass_in_some_run,
        c.compared - c.pass_in_some_run
    );
    if c.differing.is_empty() {
        return s;
    }
    s.push_str("\n| task | kinds |");
    for i in 1..=c.runs.len() {
        let _ = write!(s, " #{i} |");
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---|".repeat(c.runs.len()));
    s.push('\n');
    for row in &c.differing {
        let _ = write!(s, "| {} | {} |", row.namespace, row.kinds.join(", "));
        for o in &row.outcomes {
            let _ = write!(s, " {o} |");
        }
        s.push('\n');
    }
    s
}
