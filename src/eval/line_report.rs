//! Reports of line-completion run directories: one run's groups, several runs side by side on
//! the cursors they all finished, and the shards of one run (`eval --shard`) merged into one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::batch::{load_run_dir, read_json, tasks_sha256, Sitting};
use super::line_metrics::LineScores;
use super::line_metrics::RecallShares;
use super::lines::{
    summarize_lines, LineGroup, LineRecord, LineRunInfo, LineRunSummary, PromptRunSummary,
};
use super::report::ran_and_busy;
use super::tasks::load_line_tasks;
use super::EvalError;

#[derive(Debug, Clone, Serialize)]
pub struct LineRunReport {
    pub dir: PathBuf,
    #[serde(flatten)]
    pub summary: LineRunSummary,
    /// For a merged report: the shard directories it combines (`dir` is the first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<PathBuf>,
    /// For a merged report: cursors of the task file that no shard has finished, when the task
    /// file is readable here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<String>>,
    #[serde(skip)]
    pub records: Vec<LineRecord>,
}

/// Whether `dir` holds a line-completion run (its `run.json` names a model and a budget).
pub fn is_line_run(dir: &Path) -> bool {
    read_json::<LineRunInfo>(&dir.join("run.json")).is_some()
}

/// The settings and finished records of a line run directory (also of a stopped run).
pub fn load_line_records(dir: &Path) -> Result<(LineRunInfo, Vec<LineRecord>), EvalError> {
    load_run_dir(dir, "of `repohop eval` on line tasks")
}

/// The invocations that scored cursors in the directory (its `summary.json`), oldest first.
fn sittings(dir: &Path) -> Vec<Sitting> {
    read_json::<LineRunSummary>(&dir.join("summary.json"))
        .map(|s| s.all_sittings())
        .unwrap_or_default()
}

/// The summary of `records` over `sittings`: the cursors they ran, in the seconds some of them
/// was running (sittings one after another add up, side by side they overlap).
fn over_sittings(method: &str, records: &[LineRecord], sittings: Vec<Sitting>) -> LineRunSummary {
    let (ran, wall) = ran_and_busy(&sittings);
    LineRunSummary {
        sittings,
        ..summarize_lines(method, records, ran, wall)
    }
}

/// The report of one line run directory.
pub fn load_line_run(dir: &Path) -> Result<LineRunReport, EvalError> {
    let (info, records) = load_line_records(dir)?;
    Ok(LineRunReport {
        dir: dir.to_path_buf(),
        summary: over_sittings(&info.method, &records, sittings(dir)),
        shards: Vec::new(),
        missing: None,
        records,
    })
}

/// Combines the shards of one line run into one report. Refuses shards of other settings
/// (method, model, task file contents, budget) and a cursor finished in two of them. The wall
/// time is the time some shard was running, as for function runs.
pub fn merge_line_runs(dirs: &[PathBuf]) -> Result<LineRunReport, EvalError> {
    let mut first: Option<(PathBuf, LineRunInfo)> = None;
    let mut owner: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut records = Vec::new();
    let mut all_sittings = Vec::new();
    for dir in dirs {
        let (info, shard) = load_line_records(dir)?;
        match &first {
            Some((d0, i0)) => {
                let same = LineRunInfo {
                    tasks_file: i0.tasks_file.clone(),
                    ..info.clone()
                } == *i0;
                if !same {
                    return Err(EvalError::Invalid(format!(
                        "cannot merge {} ({}, model {}, budget {}) and {} ({}, model {}, budget {}){}",
                        d0.display(),
                        i0.method,
                        i0.model,
                        i0.budget,
                        dir.display(),
                        info.method,
                        info.model,
                        info.budget,
                        if i0.tasks_sha256 != info.tasks_sha256 {
                            ": their task files differ"
                        } else {
                            ""
                        }
                    )));
                }
            }
            None => first = Some((dir.clone(), info.clone())),
        }
        for r in shard {
            if let Some(other) = owner.insert(r.id.clone(), dir.clone()) {
                return Err(EvalError::Invalid(format!(
                    "cannot merge: cursor {} is finished in both {} and {}; shards must not overlap",
                    r.id,
                    other.display(),
                    dir.display()
                )));
            }
            records.push(r);
        }
        all_sittings.extend(sittings(dir));
    }
    let Some((dir, info)) = first else {
        return Err(EvalError::Invalid(
            "--merge needs at least one run directory".into(),
        ));
    };
    let missing = (tasks_sha256(&info.tasks_file).ok().as_ref() == Some(&info.tasks_sha256))
        .then(|| load_line_tasks(&info.tasks_file).ok())
        .flatten()
        .map(|tasks| {
            tasks
                .into_iter()
                .map(|t| t.id)
                .filter(|id| !owner.contains_key(id))
                .collect()
        });
    Ok(LineRunReport {
        dir,
        summary: over_sittings(&info.method, &records, all_sittings),
        shards: dirs.to_vec(),
        missing,
        records,
    })
}

/// The runs cut to the cursors every one of them finished, so their rows compare the same
/// lines; the count of cursors left out comes with them. One run is kept whole.
pub fn on_common_cursors(runs: &[LineRunReport]) -> (Vec<LineRunReport>, usize) {
    if runs.len() < 2 {
        return (runs.to_vec(), 0);
    }
    let ids = |r: &LineRunReport| -> BTreeSet<String> {
        r.records.iter().map(|x| x.id.clone()).collect()
    };
    let common = runs
        .iter()
        .skip(1)
        .fold(ids(&runs[0]), |acc, r| &acc & &ids(r));
    let all: BTreeSet<String> = runs.iter().flat_map(ids).collect();
    let cut = runs
        .iter()
        .map(|r| {
            let records: Vec<LineRecord> = r
                .records
                .iter()
                .filter(|x| common.contains(&x.id))
                .cloned()
                .collect();
            LineRunReport {
                summary: LineRunSummary {
                    sittings: r.summary.sittings.clone(),
                    ..summarize_lines(&r.summary.method, &records, 0, r.summary.wall_seconds)
                },
                records,
                ..r.clone()
            }
        })
        .collect();
    (cut, all.len() - common.len())
}

fn pct4(m: &LineScores) -> String {
    format!(
        "{:.1} | {:.1} | {:.1} | {:.1}",
        100.0 * m.em,
        100.0 * m.es,
        100.0 * m.id_em,
        100.0 * m.id_f1
    )
}

/// A table's rows: all, then each split, then each repository.
fn named_groups<'a, G>(
    all: &'a G,
    by_split: &'a BTreeMap<String, G>,
    by_repo: &'a BTreeMap<String, G>,
) -> impl Iterator<Item = (String, &'a G)> {
    std::iter::once(("all".to_string(), all))
        .chain(by_split.iter().map(|(k, g)| (format!("split {k}"), g)))
        .chain(by_repo.iter().map(|(k, g)| (format!("repo {k}"), g)))
}

/// One run's scores per group (all, each split, each repository) in both definitions.
pub fn group_table(s: &LineRunSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| group | tasks | EM % | ES % | ID-EM % | ID-F1 % | GC EM % | GC ES % | GC ID-EM % | GC ID-F1 % |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let groups = named_groups(&s.all, &s.by_split, &s.by_repo);
    for (name, g) in groups {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} |",
            g.tasks,
            pct4(&g.cceval),
            pct4(&g.graphcoder)
        );
    }
    out
}

/// `context | retrieved | prompt | added` shares as percentages, or dashes.
fn recall4(r: Option<&RecallShares>) -> String {
    match r {
        Some(r) => format!(
            "{} | {:.1} | {:.1} | {:.1} | {:.1}",
            r.identifiers,
            100.0 * r.context,
            100.0 * r.retrieved,
            100.0 * r.prompt,
            100.0 * r.added
        ),
        None => "– | – | – | – | –".into(),
    }
}

/// A method's prompts per group (all, each split, each repository): their size and where the
/// ground truths' identifiers are in them.
pub fn prompt_table(s: &PromptRunSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| group | tasks | prompt tokens | snippets | truth identifiers | in unfinished code % | in retrieved % | in prompt % | added by retrieval % |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let groups = named_groups(&s.all, &s.by_split, &s.by_repo);
    for (name, g) in groups {
        let _ = writeln!(
            out,
            "| {name} | {} | {:.0} | {:.1} | {} |",
            g.tasks,
            g.prompt_tokens_mean,
            g.snippets_mean,
            recall4(g.recall.as_ref())
        );
    }
    out
}

/// Runs side by side, a row each: CrossCodeEval's scores over all cursors, ES per split, and
/// the cost per cursor.
pub fn compare_table(runs: &[LineRunReport]) -> String {
    let splits: BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.summary.by_split.keys())
        .collect();
    let mut out = String::new();
    let split_head: String = splits.iter().map(|s| format!(" ES {s} % |")).collect();
    let _ = writeln!(
        out,
        "| run | method | tasks | EM % | ES % | ID-EM % | ID-F1 % |{split_head} retrieval ms | generation s | prompt tokens |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|{}---:|---:|---:|",
        "---:|".repeat(splits.len())
    );
    for r in runs {
        let s = &r.summary;
        let by_split: String = splits
            .iter()
            .map(|k| match s.by_split.get(*k) {
                Some(LineGroup { tasks, cceval, .. }) if *tasks > 0 => {
                    format!(" {:.1} ({tasks}) |", 100.0 * cceval.es)
                }
                _ => " – |".into(),
            })
            .collect();
        let run = r.dir.file_name().unwrap_or(r.dir.as_os_str());
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |{by_split} {:.1} | {:.1} | {:.0} |",
            run.to_string_lossy(),
            s.method,
            s.total,
            pct4(&s.all.cceval),
            s.retrieve_ms_median,
            s.generate_ms_median / 1e3,
            s.prompt_tokens_mean
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, es: f64) -> LineRecord {
        let scores = LineScores {
            em: 0.0,
            es,
            id_em: 0.0,
            id_f1: 0.0,
        };
        LineRecord {
            id: id.into(),
            repo: "r".into(),
            file: "a.py".into(),
            line: 1,
            split: Some("in_file".into()),
            ground_truth: "x = 1".into(),
            completion: "x = 2".into(),
            cceval: scores,
            graphcoder: scores,
            codebase_ms: 0.0,
            retrieve_ms: 1.0,
            generate_ms: 1000.0,
            prompt_tokens: 10,
            generated_tokens: 3,
            snippets_shown: 0,
            recall: None,
            error: None,
        }
    }

    fn report(method: &str, records: Vec<LineRecord>) -> LineRunReport {
        LineRunReport {
            dir: PathBuf::from(method),
            summary: summarize_lines(method, &records, 0, 0.0),
            shards: Vec::new(),
            missing: None,
            records,
        }
    }

    #[test]
    fn runs_compare_on_the_cursors_they_all_finished() {
        let a = report("none", vec![record("1", 0.5), record("2", 1.0)]);
        let b = report("saracoder", vec![record("2", 0.0), record("3", 1.0)]);
        let (cut, left_out) = on_common_cursors(&[a.clone(), b]);
        assert_eq!(left_out, 2);
        assert_eq!(cut[0].summary.total, 1);
        assert_eq!(cut[0].summary.all.cceval.es, 1.0);
        assert_eq!(cut[1].summary.all.cceval.es, 0.0);
        // One run stays whole.
        let (one, none_out) = on_common_cursors(&[a]);
        assert_eq!((one[0].summary.total, none_out), (2, 0));
        let table = compare_table(&cut);
        assert!(
            table.contains("| none | none | 1 | 0.0 | 100.0 |"),
            "{table}"
        );
        assert!(table.contains("ES in_file %"), "{table}");
    }
}
