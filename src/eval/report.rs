//! Side-by-side comparison of run directories: markdown tables, JSON, and an SVG chart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::batch::{
    load_records, per_minute, read_json, summarize, tasks_sha256, RunInfo, Sitting, Summary,
    TaskRecord,
};
use super::metrics::failure;
use super::tasks::{load_function_tasks, DepKind};
use super::EvalError;

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub dir: PathBuf,
    #[serde(flatten)]
    pub summary: Summary,
    /// For a merged report: the shard directories it combines (`dir` is the first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<PathBuf>,
    /// For a merged report: tasks of the task file that no shard has finished, when the task
    /// file is readable here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<String>>,
}

impl RunReport {
    /// The report of one run directory.
    pub fn new(dir: &Path, summary: Summary) -> Self {
        RunReport {
            dir: dir.to_path_buf(),
            summary,
            shards: Vec::new(),
            missing: None,
        }
    }
}

/// Summarises every finished task of a run directory (also of an interrupted run); the wall
/// time and throughput are those of its finished invocations together (`summary.json`), so a
/// resumed run counts every sitting.
pub fn load_run(dir: &Path) -> Result<RunReport, EvalError> {
    let (info, records) = load_records(dir)?;
    let mut summary = summarize(&info.method, &records);
    if let Some(last) = last_summary(dir) {
        summary = over_sittings(summary, last.all_sittings(), records.len());
        summary.started_at = last.started_at;
    }
    Ok(RunReport::new(dir, summary))
}

/// `summary` with the throughput of `sittings`: the tasks they ran (the rest of `finished`
/// resumed) over the seconds some of them was running.
fn over_sittings(summary: Summary, sittings: Vec<Sitting>, finished: usize) -> Summary {
    let (ran, wall) = ran_and_busy(&sittings);
    Summary {
        ran,
        resumed: finished.saturating_sub(ran),
        wall_seconds: wall,
        tasks_per_minute: per_minute(ran, wall),
        sittings,
        ..summary
    }
}

/// The `summary.json` of a run directory's last finished invocation.
fn last_summary(dir: &Path) -> Option<Summary> {
    read_json(&dir.join("summary.json"))
}

/// Combines the run directories of one run split with `eval --shard` (possibly made on other
/// machines) into one report. Refuses runs of different methods, task files (by content) or
/// test timeouts, and a task finished in two of them. The wall time is the time any shard was
/// running (shards run one after another add up, side by side they overlap), or the longest
/// shard's when a shard's start was not recorded.
pub fn merge_runs(dirs: &[PathBuf]) -> Result<RunReport, EvalError> {
    let shards = shard_records(dirs)?;
    let (dir, info, hash, records) = (shards.dir, shards.info, shards.hash, shards.records);
    let finished: BTreeSet<&str> = records
        .iter()
        .map(|r| r.result.namespace.as_str())
        .collect();
    let sittings: Vec<Sitting> = dirs
        .iter()
        .filter_map(|d| last_summary(d))
        .flat_map(|last| last.all_sittings())
        .collect();

    let missing = (tasks_sha256(&info.tasks_file).ok() == Some(hash))
        .then(|| load_function_tasks(&info.tasks_file).ok())
        .flatten()
        .map(|tasks| {
            tasks
                .into_iter()
                .map(|t| t.namespace)
                .filter(|n| !finished.contains(n.as_str()))
                .collect()
        });
    let started_at = sittings
        .iter()
        .filter_map(|s| s.started_at)
        .reduce(f64::min);
    let summary = Summary {
        started_at,
        ..over_sittings(summarize(&info.method, &records), sittings, records.len())
    };
    Ok(RunReport {
        dir,
        summary,
        shards: dirs.to_vec(),
        missing,
    })
}

/// What [`shard_records`] reads from a run's shards.
pub(super) struct Shards {
    pub dir: PathBuf,
    pub info: RunInfo,
    pub hash: String,
    pub records: Vec<TaskRecord>,
}

/// The finished tasks of one run's shard directories, with the first directory, the run's
/// settings and its task file's hash. Refuses runs of different methods, task files (by
/// content) or test timeouts, and a task finished in two of them.
pub(super) fn shard_records(dirs: &[PathBuf]) -> Result<Shards, EvalError> {
    let mut first: Option<(PathBuf, RunInfo, String)> = None;
    let mut owner: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut records: Vec<TaskRecord> = Vec::new();
    for dir in dirs {
        let (info, shard) = load_records(dir)?;
        let hash = match &info.tasks_sha256 {
            Some(h) => h.clone(),
            None => tasks_sha256(&info.tasks_file).map_err(|e| {
                EvalError::Invalid(format!(
                    "{}: run.json names no task file hash and its task file is unreadable \
                     here ({e}); cannot tell which tasks it ran",
                    dir.display()
                ))
            })?,
        };
        if let Some((d0, i0, h0)) = &first {
            let differs = if i0.method != info.method {
                Some(format!("method `{}` vs `{}`", i0.method, info.method))
            } else if *h0 != hash {
                Some("task files with different contents".to_string())
            } else if i0.timeout_s != info.timeout_s {
                Some(format!(
                    "test timeouts {} s vs {} s",
                    i0.timeout_s, info.timeout_s
                ))
            } else {
                None
            };
            if let Some(what) = differs {
                return Err(EvalError::Invalid(format!(
                    "cannot merge {} and {}: {what}",
                    d0.display(),
                    dir.display()
                )));
            }
        } else {
            first = Some((dir.clone(), info.clone(), hash));
        }
        for r in shard {
            if let Some(other) = owner.insert(r.result.namespace.clone(), dir.clone()) {
                return Err(EvalError::Invalid(format!(
                    "cannot merge: task {} is finished in both {} and {}; shards must not overlap",
                    r.result.namespace,
                    other.display(),
                    dir.display()
                )));
            }
            records.push(r);
        }
    }
    let Some((dir, info, hash)) = first else {
        return Err(EvalError::Invalid(
            "--merge needs at least one run directory".into(),
        ));
    };
    Ok(Shards {
        dir,
        info,
        hash,
        records,
    })
}

/// One run's settings and finished tasks: a run directory, or the shard directories of one run
/// (checked as `--merge` checks them; a single directory needs no task file hash).
pub(super) fn run_records(dirs: &[PathBuf]) -> Result<(RunInfo, Vec<TaskRecord>), EvalError> {
    match dirs {
        [dir] => load_records(dir),
        _ => shard_records(dirs).map(|s| (s.info, s.records)),
    }
}

/// The tasks `sittings` ran, and the seconds during which some of them was running.
pub(super) fn ran_and_busy(sittings: &[Sitting]) -> (usize, f64) {
    let spans: Vec<_> = sittings
        .iter()
        .map(|s| (s.started_at, s.wall_seconds))
        .collect();
    (sittings.iter().map(|s| s.ran).sum(), busy_seconds(&spans))
}

/// Seconds during which at least one of the (start, wall seconds) spans ran; the longest span
/// when some start is unknown.
fn busy_seconds(spans: &[(Option<f64>, f64)]) -> f64 {
    let longest = spans.iter().map(|s| s.1).fold(0.0, f64::max);
    let Some(mut known) = spans
        .iter()
        .map(|&(start, wall)| start.map(|s| (s, s + wall)))
        .collect::<Option<Vec<_>>>()
    else {
        return longest;
    };
    known.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut busy, mut reach) = (0.0, f64::NEG_INFINITY);
    for (start, end) in known {
        busy += (end - start.max(reach)).max(0.0);
        reach = reach.max(end);
    }
    busy
}

/// One task that did not pass, for `report --failures`.
#[derive(Debug, Clone, Serialize)]
pub struct FailedTask {
    pub run: PathBuf,
    pub method: String,
    pub namespace: String,
    pub kinds: Vec<String>,
    pub cause: String,
    pub detail: String,
}

/// Every task of the run directories that did not pass, by run, then cause, then name.
pub fn failed_tasks(dirs: &[PathBuf]) -> Result<Vec<FailedTask>, EvalError> {
    let mut out = Vec::new();
    for dir in dirs {
        let (info, records) = load_records(dir)?;
        let mut rows: Vec<FailedTask> = records
            .iter()
            .filter_map(|r| {
                let f = failure(&r.result)?;
                Some(FailedTask {
                    run: dir.clone(),
                    method: info.method.clone(),
                    namespace: r.result.namespace.clone(),
                    kinds: r.result.kinds.iter().map(|k| k.as_str().into()).collect(),
                    cause: f.cause,
                    detail: f.detail,
                })
            })
            .collect();
        rows.sort_by(|a, b| (&a.cause, &a.namespace).cmp(&(&b.cause, &b.namespace)));
        out.extend(rows);
    }
    Ok(out)
}

/// [`failed_tasks`] as a markdown table.
pub fn failures_markdown(rows: &[FailedTask]) -> String {
    let mut s = String::from("| run | task | kinds | cause | detail |\n|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.run.display(),
            r.namespace,
            r.kinds.join(", "),
            r.cause,
            r.detail.replace('|', "\\|")
        );
    }
    s
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// Phase names over all runs, first-seen order, `test` last.
fn phase_names(runs: &[RunReport]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in runs.iter().flat_map(|r| &r.summary.phases) {
        if p.name != "test" && !names.contains(&p.name) {
            names.push(p.name.clone());
        }
    }
    names.push("test".into());
    names
}

/// Two markdown tables: Pass@1 (overall, by dependency kind, recall) and cost per phase
/// (mean seconds per task; tokens per task in/out where a method counted any), with the wall
/// time per task run: with `--concurrency` the phases of several tasks overlap, so their sum
/// overstates what a task costs.
pub fn markdown(runs: &[RunReport]) -> String {
    let mut s = String::new();
    let kinds: Vec<&str> = DepKind::ALL.iter().map(|k| k.as_str()).collect();
    let _ = writeln!(
        s,
        "| method | tasks | passed | Pass@1 % | {} | recall % | recall (definitions) % |",
        kinds.join(" % | ") + " %"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|{}---:|---:|",
        "---:|".repeat(kinds.len())
    );
    for r in runs {
        let m = &r.summary;
        let by_kind: Vec<String> = kinds
            .iter()
            .map(|k| match m.by_kind.get(*k) {
                Some(sc) if sc.total > 0 => format!("{} ({})", pct(sc.pass_at_1), sc.total),
                _ => "–".into(),
            })
            .collect();
        let recall = m.recall.map_or("–".into(), pct);
        let strict = m.recall_definitions.map_or("–".into(), pct);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            m.method,
            m.total,
            m.passed,
            pct(m.pass_at_1),
            by_kind.join(" | "),
            recall,
            strict
        );
    }
    let names = phase_names(runs);
    let generation = &names[..names.len() - 1];
    let _ = writeln!(s);
    let mut header = String::from("| method |");
    for n in generation {
        let _ = write!(header, " {n} s/task | {n} tokens in/out |");
    }
    let _ = writeln!(s, "{header} test s/task | total s/task | wall s/task |");
    let _ = writeln!(
        s,
        "|---|{}---:|---:|---:|",
        "---:|---:|".repeat(generation.len())
    );
    for r in runs {
        let m = &r.summary;
        let n = m.total.max(1) as f64;
        let mut cells = Vec::new();
        for name in generation {
            match m.phases.iter().find(|p| &p.name == name) {
                Some(p) => {
                    cells.push(format!("{:.3}", p.seconds_mean));
                    cells.push(if p.tokens_in + p.tokens_out > 0 {
                        format!(
                            "{:.0}/{:.0}",
                            p.tokens_in as f64 / n,
                            p.tokens_out as f64 / n
                        )
                    } else {
                        "–".into()
                    });
                }
                None => cells.extend(["–".to_string(), "–".to_string()]),
            }
        }
        let test = m
            .phases
            .iter()
            .find(|p| p.name == "test")
            .map_or(0.0, |p| p.seconds_mean);
        let total: f64 = m.phases.iter().map(|p| p.seconds_mean).sum();
        let wall = if m.ran > 0 {
            format!("{:.3}", m.wall_seconds / m.ran as f64)
        } else {
            "–".into()
        };
        let _ = writeln!(
            s,
            "| {} | {}{:.3} | {:.3} | {wall} |",
            m.method,
            cells.iter().map(|c| format!("{c} | ")).collect::<String>(),
            test,
            total
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "| method | not passed | causes |");
    let _ = writeln!(s, "|---|---:|---|");
    for r in runs {
        let m = &r.summary;
        let mut causes: Vec<(&String, &usize)> = m.causes.iter().collect();
        causes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let listed: Vec<String> = causes.iter().map(|(c, k)| format!("{c} {k}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            m.method,
            m.total - m.passed,
            if listed.is_empty() {
                "–".to_string()
            } else {
                listed.join(", ")
            }
        );
    }
    s
}

const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Two panels: Pass@1 per method (bars, 0–100 %), and mean seconds per task per method
/// stacked by phase, with a legend.
pub fn svg_chart(runs: &[RunReport]) -> String {
    let names = phase_names(runs);
    let row = 28.0;
    let label_w = 170.0;
    let panel_w = 300.0;
    let top = 40.0;
    let height = top + row * runs.len().max(1) as f64 + 60.0 + 18.0 * names.len() as f64;
    let width = label_w + panel_w + 40.0 + label_w + panel_w + 40.0;
    let max_s = runs
        .iter()
        .map(|r| r.summary.phases.iter().map(|p| p.seconds_mean).sum::<f64>())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let x2 = label_w + panel_w + 40.0;
    let _ = writeln!(
        s,
        r#"<text x="{label_w}" y="20" font-weight="bold">Pass@1 (%)</text>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.0}" y="20" font-weight="bold">Mean seconds per task, by phase (max {max_s:.2} s)</text>"#,
        x2 + label_w
    );
    for (i, r) in runs.iter().enumerate() {
        let y = top + row * i as f64;
        let m = &r.summary;
        let name = esc(&m.method);
        let w = panel_w * m.pass_at_1;
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="end">{name}</text>"#,
            label_w - 6.0,
            y + 15.0
        );
        let _ = writeln!(
            s,
            r##"<rect x="{label_w}" y="{y:.0}" width="{w:.1}" height="20" fill="#4e79a7"/><text x="{:.1}" y="{:.0}">{} ({}/{})</text>"##,
            label_w + w + 4.0,
            y + 15.0,
            pct(m.pass_at_1),
            m.passed,
            m.total
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="end">{name}</text>"#,
            x2 + label_w - 6.0,
            y + 15.0
        );
        let mut x = x2 + label_w;
        for (k, phase) in names.iter().enumerate() {
            let Some(p) = m.phases.iter().find(|p| &p.name == phase) else {
                continue;
            };
            let w = panel_w * p.seconds_mean / max_s;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{y:.0}" width="{w:.1}" height="20" fill="{}"><title>{}: {:.3} s</title></rect>"#,
                PALETTE[k % PALETTE.len()],
                esc(phase),
                p.seconds_mean
            );
            x += w;
        }
        let total: f64 = m.phases.iter().map(|p| p.seconds_mean).sum();
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.0}">{total:.2} s</text>"#,
            x + 4.0,
            y + 15.0
        );
    }
    let legend_y = top + row * runs.len().max(1) as f64 + 30.0;
    for (k, phase) in names.iter().enumerate() {
        let y = legend_y + 18.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{:.0}" y="{y:.0}" width="12" height="12" fill="{}"/><text x="{:.0}" y="{:.0}">{}</text>"#,
            x2 + label_w,
            PALETTE[k % PALETTE.len()],
            x2 + label_w + 18.0,
            y + 11.0,
            esc(phase)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::busy_seconds;

    #[test]
    fn shards_one_after_another_add_up_and_side_by_side_overlap() {
        let after = [(Some(100.0), 50.0), (Some(160.0), 40.0)];
        assert_eq!(busy_seconds(&after), 90.0);
        let beside = [
            (Some(100.0), 50.0),
            (Some(120.0), 60.0),
            (Some(110.0), 10.0),
        ];
        assert_eq!(busy_seconds(&beside), 80.0);
        // A shard from before starts were recorded: the longest shard, as before.
        assert_eq!(busy_seconds(&[(None, 50.0), (Some(0.0), 70.0)]), 70.0);
        assert_eq!(busy_seconds(&[]), 0.0);
    }
}
