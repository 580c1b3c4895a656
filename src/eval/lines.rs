//! Line-completion runs: each line task's completion generated with one method, scored at once
//! (EM, ES, identifier EM and F1 in both definitions) and written to the run directory, so a
//! stopped run resumes where it stopped; `--shard` splits a task file across machines.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::batch::{read_json, select, task_dir, tasks_sha256, unix_now, write_json, Sitting};
use super::line_metrics::{cceval, graphcoder, lang_of, LineScores, PromptRecall, RecallShares};
use super::locate::open;
use super::tasks::{load_line_tasks, LineTask};
use super::EvalError;
use crate::embed::Embedder;
use crate::generate::complete::{CompleteOptions, Completer};
use crate::llm::Llm;

pub struct LineRunConfig<'a> {
    pub tasks_file: PathBuf,
    /// Folder the tasks' `repo` paths are relative to.
    pub source_root: PathBuf,
    pub out: PathBuf,
    pub options: CompleteOptions,
    pub limit: Option<usize>,
    pub shard: Option<(usize, usize)>,
    pub cancel: &'a AtomicBool,
    pub progress: bool,
}

/// What a run directory was made with: resuming with anything else is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineRunInfo {
    pub method: String,
    pub model: String,
    pub tasks_file: PathBuf,
    pub tasks_sha256: String,
    pub budget: usize,
}

/// One task's completion and scores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LineRecord {
    pub id: String,
    pub repo: String,
    pub file: String,
    pub line: usize,
    #[serde(default)]
    pub split: Option<String>,
    pub ground_truth: String,
    pub completion: String,
    pub cceval: LineScores,
    pub graphcoder: LineScores,
    pub codebase_ms: f64,
    pub retrieve_ms: f64,
    pub generate_ms: f64,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub snippets_shown: usize,
    /// Where the ground truth's identifiers are in the prompt (runs before it was recorded
    /// have none).
    #[serde(default)]
    pub recall: Option<PromptRecall>,
    /// Why no completion was made (scored as an empty one).
    #[serde(default)]
    pub error: Option<String>,
}

/// Mean scores of a group of tasks, in both definitions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LineGroup {
    pub tasks: usize,
    pub cceval: LineScores,
    pub graphcoder: LineScores,
    /// The ground truths' identifiers found in the prompts, of the tasks that recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<RecallShares>,
}

impl LineGroup {
    fn of<'a>(records: impl Iterator<Item = &'a LineRecord> + Clone) -> Self {
        let (c, g): (Vec<LineScores>, Vec<LineScores>) =
            records.clone().map(|r| (r.cceval, r.graphcoder)).unzip();
        LineGroup {
            tasks: c.len(),
            cceval: LineScores::mean(&c),
            graphcoder: LineScores::mean(&g),
            recall: RecallShares::of(records.filter_map(|r| r.recall.as_ref())),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LineRunSummary {
    pub method: String,
    pub total: usize,
    pub ran: usize,
    pub resumed: usize,
    pub errors: usize,
    pub all: LineGroup,
    pub by_split: BTreeMap<String, LineGroup>,
    pub by_repo: BTreeMap<String, LineGroup>,
    /// Per cursor, excluding the LLM (and the one-off codebase build).
    pub retrieve_ms_median: f64,
    /// The slowest codebase build of the run (once per repository and process).
    pub codebase_ms_max: f64,
    pub generate_ms_median: f64,
    pub prompt_tokens_mean: f64,
    pub wall_seconds: f64,
    /// When this invocation started (seconds since the Unix epoch), for merging shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<f64>,
    /// Every invocation that scored cursors in this run directory, oldest first (as function
    /// runs keep them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sittings: Vec<Sitting>,
}

impl LineRunSummary {
    /// The invocations that scored cursors, oldest first.
    pub fn all_sittings(&self) -> Vec<Sitting> {
        Sitting::recorded(&self.sittings, self.started_at, self.wall_seconds, self.ran)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarises the records of a run.
pub fn summarize_lines(
    method: &str,
    records: &[LineRecord],
    ran: usize,
    wall_seconds: f64,
) -> LineRunSummary {
    let mut by_split: BTreeMap<String, Vec<&LineRecord>> = BTreeMap::new();
    let mut by_repo: BTreeMap<String, Vec<&LineRecord>> = BTreeMap::new();
    for r in records {
        let split = r.split.clone().unwrap_or_else(|| "all".into());
        by_split.entry(split).or_default().push(r);
        by_repo.entry(r.repo.clone()).or_default().push(r);
    }
    let group = |m: BTreeMap<String, Vec<&LineRecord>>| {
        m.into_iter()
            .map(|(k, v)| (k, LineGroup::of(v.into_iter())))
            .collect()
    };
    let prompt: Vec<f64> = records.iter().map(|r| r.prompt_tokens as f64).collect();
    LineRunSummary {
        method: method.to_string(),
        total: records.len(),
        ran,
        resumed: records.len() - ran.min(records.len()),
        errors: records.iter().filter(|r| r.error.is_some()).count(),
        all: LineGroup::of(records.iter()),
        by_split: group(by_split),
        by_repo: group(by_repo),
        retrieve_ms_median: median(records.iter().map(|r| r.retrieve_ms).collect()),
        codebase_ms_max: records.iter().map(|r| r.codebase_ms).fold(0.0, f64::max),
        generate_ms_median: median(records.iter().map(|r| r.generate_ms).collect()),
        prompt_tokens_mean: prompt.iter().sum::<f64>() / prompt.len().max(1) as f64,
        wall_seconds,
        started_at: None,
        sittings: Vec::new(),
    }
}

/// Generates and scores the unfinished tasks of the run, then summarises all of it. `Err` when
/// cancelled (the run directory stays resumable) or when the inputs are unusable.
pub fn run_lines(
    cfg: &LineRunConfig,
    llm: &mut dyn Llm,
    embedder: Option<&dyn Embedder>,
) -> Result<LineRunSummary, EvalError> {
    let started = Instant::now();
    let started_at = unix_now();
    let tasks = select(load_line_tasks(&cfg.tasks_file)?, cfg.shard, cfg.limit);
    let method = cfg.options.variant_name();
    let info = LineRunInfo {
        method: method.clone(),
        model: llm.name().to_string(),
        tasks_file: cfg.tasks_file.clone(),
        tasks_sha256: tasks_sha256(&cfg.tasks_file)?,
        budget: cfg.options.budget,
    };
    let info_path = cfg.out.join("run.json");
    std::fs::create_dir_all(cfg.out.join("tasks")).map_err(|e| EvalError::io(&cfg.out, e))?;
    // The task file is compared by content: its path may differ between machines.
    let same = |old: &LineRunInfo| {
        LineRunInfo {
            tasks_file: info.tasks_file.clone(),
            ..old.clone()
        } == info
    };
    match read_json::<LineRunInfo>(&info_path) {
        Some(old) if !same(&old) => {
            return Err(EvalError::Invalid(format!(
                "{} was made with {} ({} tasks file {}, model {}, budget {}); give another --out or the same settings",
                cfg.out.display(),
                old.method,
                old.tasks_file.display(),
                &old.tasks_sha256[..12.min(old.tasks_sha256.len())],
                old.model,
                old.budget
            )))
        }
        Some(_) => {}
        None => write_json(&info_path, &info)?,
    }

    let mut records = Vec::with_capacity(tasks.len());
    let mut ran = 0;
    // One completer (and its codebases) per repository.
    let mut completers: HashMap<String, Completer> = HashMap::new();
    for (k, task) in tasks.iter().enumerate() {
        let path = task_dir(&cfg.out, &task.id).join("result.json");
        if let Some(r) = read_json::<LineRecord>(&path) {
            records.push(r);
            continue;
        }
        if cfg.cancel.load(Ordering::SeqCst) {
            return Err(EvalError::Invalid(format!(
                "stopped after {} of {} tasks; run the same command to resume",
                records.len(),
                tasks.len()
            )));
        }
        let completer = completer_for(&mut completers, cfg, &task.repo)?;
        let record = complete_task(completer, llm, embedder, task, &cfg.options);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| EvalError::io(dir, e))?;
        }
        write_json(&path, &record)?;
        ran += 1;
        if cfg.progress {
            eprintln!(
                "[{}/{}] {} ES {:.2} EM {:.0} · retrieval {:.0} ms, generation {:.1} s{}",
                k + 1,
                tasks.len(),
                task.id,
                record.cceval.es,
                record.cceval.em,
                record.retrieve_ms,
                record.generate_ms / 1e3,
                record
                    .error
                    .as_deref()
                    .map(|e| format!(" · error: {e}"))
                    .unwrap_or_default()
            );
        }
        records.push(record);
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    let earlier = read_json::<LineRunSummary>(&cfg.out.join("summary.json"))
        .map(|earlier| earlier.all_sittings())
        .unwrap_or_default();
    let summary = LineRunSummary {
        started_at,
        sittings: Sitting::after(
            earlier,
            Sitting {
                started_at,
                wall_seconds,
                ran,
            },
        ),
        ..summarize_lines(&method, &records, ran, wall_seconds)
    };
    write_json(&cfg.out.join("summary.json"), &summary)?;
    Ok(summary)
}

/// The completer of `repo` (and its codebases), opened on first use.
fn completer_for<'m>(
    completers: &'m mut HashMap<String, Completer>,
    cfg: &LineRunConfig,
    repo: &str,
) -> Result<&'m mut Completer, EvalError> {
    Ok(match completers.entry(repo.to_string()) {
        Entry::Occupied(o) => o.into_mut(),
        Entry::Vacant(v) => v.insert(Completer::new(open(&cfg.source_root.join(repo))?)),
    })
}

fn complete_task(
    completer: &mut Completer,
    llm: &mut dyn Llm,
    embedder: Option<&dyn Embedder>,
    task: &LineTask,
    opts: &CompleteOptions,
) -> LineRecord {
    let lang = lang_of(&task.file);
    let done = completer.complete_line(llm, embedder, &task.file, task.line, opts);
    let (completion, error) = match &done {
        Ok(d) => (d.completion.clone(), None),
        Err(e) => (String::new(), Some(e.to_string())),
    };
    let ms =
        |f: fn(&crate::generate::complete::LineCompletion) -> f64| done.as_ref().map_or(0.0, f);
    LineRecord {
        id: task.id.clone(),
        repo: task.repo.clone(),
        file: task.file.clone(),
        line: task.line,
        split: task.split.clone(),
        ground_truth: task.ground_truth.clone(),
        cceval: cceval(&completion, &task.ground_truth, lang),
        graphcoder: graphcoder(&completion, &task.ground_truth, lang),
        completion,
        codebase_ms: ms(|d| d.codebase_ms),
        retrieve_ms: ms(|d| d.retrieve_ms),
        generate_ms: ms(|d| d.generate_ms),
        prompt_tokens: done.as_ref().map_or(0, |d| d.prompt_tokens),
        generated_tokens: done.as_ref().map_or(0, |d| d.generated_tokens),
        snippets_shown: done.as_ref().map_or(0, |d| d.prompt.snippets_shown),
        recall: done.as_ref().ok().map(|d| {
            PromptRecall::of(
                &task.ground_truth,
                &d.prompt.text,
                d.prompt.context_offset,
                lang,
            )
        }),
        error,
    }
}

/// One cursor's prompt, the model not run.
#[derive(Debug, Clone, Serialize)]
pub struct PromptRecord {
    pub id: String,
    pub repo: String,
    pub split: Option<String>,
    pub prompt_tokens: usize,
    pub snippets_shown: usize,
    pub external_shown: bool,
    pub retrieve_ms: f64,
    pub recall: Option<PromptRecall>,
    pub error: Option<String>,
}

/// Means of a group of prompts.
#[derive(Debug, Clone, Serialize)]
pub struct PromptGroup {
    pub tasks: usize,
    pub prompt_tokens_mean: f64,
    pub snippets_mean: f64,
    pub recall: Option<RecallShares>,
}

impl PromptGroup {
    fn of<'a>(records: impl Iterator<Item = &'a PromptRecord> + Clone) -> Self {
        let n = records.clone().count();
        let mean = |f: fn(&PromptRecord) -> usize| {
            records.clone().map(f).sum::<usize>() as f64 / n.max(1) as f64
        };
        PromptGroup {
            tasks: n,
            prompt_tokens_mean: mean(|r| r.prompt_tokens),
            snippets_mean: mean(|r| r.snippets_shown),
            recall: RecallShares::of(records.filter_map(|r| r.recall.as_ref())),
        }
    }
}

/// What a method's prompts hold over a task file, without generating.
#[derive(Debug, Clone, Serialize)]
pub struct PromptRunSummary {
    pub method: String,
    pub total: usize,
    pub errors: usize,
    pub all: PromptGroup,
    pub by_split: BTreeMap<String, PromptGroup>,
    pub by_repo: BTreeMap<String, PromptGroup>,
    pub retrieve_ms_median: f64,
    pub wall_seconds: f64,
    pub records: Vec<PromptRecord>,
}

/// Builds every task's prompt as a run of the method would (RepoCoder: its first round) and
/// measures it against the ground truth; nothing is generated or written. `Err` when cancelled
/// or when the inputs are unusable.
pub fn prompt_lines(
    cfg: &LineRunConfig,
    llm: &dyn Llm,
    embedder: Option<&dyn Embedder>,
) -> Result<PromptRunSummary, EvalError> {
    let started = Instant::now();
    let tasks = select(load_line_tasks(&cfg.tasks_file)?, cfg.shard, cfg.limit);
    let mut completers: HashMap<String, Completer> = HashMap::new();
    let mut records = Vec::with_capacity(tasks.len());
    for (k, task) in tasks.iter().enumerate() {
        if cfg.cancel.load(Ordering::SeqCst) {
            return Err(EvalError::Invalid(format!(
                "stopped after {} of {} tasks",
                records.len(),
                tasks.len()
            )));
        }
        let completer = completer_for(&mut completers, cfg, &task.repo)?;
        let done = completer.prompt_line(llm, embedder, &task.file, task.line, &cfg.options);
        let record = PromptRecord {
            id: task.id.clone(),
            repo: task.repo.clone(),
            split: task.split.clone(),
            prompt_tokens: done.as_ref().map_or(0, |c| c.prompt_tokens),
            snippets_shown: done.as_ref().map_or(0, |c| c.prompt.snippets_shown),
            external_shown: done.as_ref().is_ok_and(|c| c.prompt.external_shown),
            retrieve_ms: done.as_ref().map_or(0.0, |c| c.retrieve_ms),
            recall: done.as_ref().ok().map(|c| {
                PromptRecall::of(
                    &task.ground_truth,
                    &c.prompt.text,
                    c.prompt.context_offset,
                    lang_of(&task.file),
                )
            }),
            error: done.as_ref().err().map(|e| e.to_string()),
        };
        if cfg.progress && (k + 1) % 20 == 0 {
            eprintln!("[{}/{}] prompts built", k + 1, tasks.len());
        }
        records.push(record);
    }
    let group = |key: fn(&PromptRecord) -> String| -> BTreeMap<String, PromptGroup> {
        let mut by: BTreeMap<String, Vec<&PromptRecord>> = BTreeMap::new();
        for r in &records {
            by.entry(key(r)).or_default().push(r);
        }
        by.into_iter()
            .map(|(k, v)| (k, PromptGroup::of(v.into_iter())))
            .collect()
    };
    Ok(PromptRunSummary {
        method: cfg.options.variant_name(),
        total: records.len(),
        errors: records.iter().filter(|r| r.error.is_some()).count(),
        all: PromptGroup::of(records.iter()),
        by_split: group(|r| r.split.clone().unwrap_or_else(|| "all".into())),
        by_repo: group(|r| r.repo.clone()),
        retrieve_ms_median: median(records.iter().map(|r| r.retrieve_ms).collect()),
        wall_seconds: started.elapsed().as_secs_f64(),
        records,
    })
}
