//! Batch runs over a task file: generate (or read) completions, score them in parallel, and
//! keep everything in a run directory that an interrupted run resumes from.
//!
//! RUN_DIR layout (every file written atomically: temp file + rename):
//! - `run.json`: method, task file, source root, Python, limits;
//! - `tasks/<namespace>/completion.json`: `{namespace, completion}` (+ context for recall);
//! - `tasks/<namespace>/trace.json`: the method's trace;
//! - `tasks/<namespace>/result.json`: the verdict, recall, per-phase times and tokens;
//! - `completions.jsonl`: all completions in DevEval's `{namespace, completion}` format;
//! - `summary.json`: the summary of the last finished run.
//!
//! A task is finished when its `result.json` exists; a resumed run skips it. A completion
//! without a result is scored again without generating again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::method::{Generated, Method, MethodInput, Phase};
use super::metrics::{dependency_recall, pass_summary, Score, GENERATION_FAILED};
use super::runner::{run_task, Outcome, RunnerConfig, TaskResult};
use super::tasks::{load_function_tasks, FunctionTask};
use super::EvalError;

/// Where completions come from.
pub enum Source {
    /// Generate with a pipeline.
    Method(Box<dyn Method>),
    /// Score an existing DevEval-format completions file.
    Completions(PathBuf),
}

pub struct BatchConfig<'a> {
    pub tasks_file: PathBuf,
    pub source_root: PathBuf,
    pub out: PathBuf,
    pub runner: RunnerConfig,
    pub jobs: usize,
    /// Tasks generated at the same time (their LLM calls decoded together by a shared
    /// engine); 1: one after another, in task order.
    pub concurrency: usize,
    pub limit: Option<usize>,
    /// `(i, n)`, 1-based: this run takes tasks whose 0-based index `k` has `k % n == i - 1`.
    pub shard: Option<(usize, usize)>,
    /// Set from a signal handler: stop scheduling, kill running tests, keep RUN_DIR resumable.
    pub cancel: &'a AtomicBool,
    /// Print one progress line per finished task, with an ETA, on stderr.
    pub progress: bool,
}

/// What `run.json` records; a resumed run must agree on the method and the task file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub method: String,
    pub tasks_file: PathBuf,
    /// sha256 of the task file's bytes: shards run on other machines (other paths) are merged
    /// only when this agrees. Absent in run directories of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_sha256: Option<String>,
    pub source_root: PathBuf,
    #[serde(default)]
    pub completions_file: Option<PathBuf>,
    pub python: PathBuf,
    pub timeout_s: f64,
}

/// `result.json`: the verdict plus what generation cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    #[serde(flatten)]
    pub result: TaskResult,
    /// Dependency recall of the final context; `None` without context or dependencies.
    pub recall: Option<f64>,
    /// The stricter recall: dependencies whose definition was retrieved.
    #[serde(default)]
    pub recall_definitions: Option<f64>,
    pub phases: Vec<Phase>,
}

/// Totals and means of one phase over the summarised tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    pub name: String,
    pub seconds_total: f64,
    pub seconds_mean: f64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// The summary `eval --json` prints and `summary.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub method: String,
    pub pass_at_1: f64,
    pub passed: usize,
    pub total: usize,
    pub by_kind: BTreeMap<String, Score>,
    pub by_project: BTreeMap<String, Score>,
    /// Counts of `pass`, `fail`, `timeout`, `error`.
    pub outcomes: BTreeMap<String, usize>,
    /// Tasks that did not pass, by cause (see [`super::metrics::Failure`]).
    #[serde(default)]
    pub causes: BTreeMap<String, usize>,
    /// Mean dependency recall over tasks that have one; `None` when none has.
    pub recall: Option<f64>,
    /// Mean definitions-only recall over the same tasks.
    #[serde(default)]
    pub recall_definitions: Option<f64>,
    pub recall_tasks: usize,
    /// Generation phases in first-seen order, then `test` (running the tests).
    pub phases: Vec<PhaseStats>,
    /// Tasks scored by this invocation (the rest were finished before and skipped).
    pub ran: usize,
    pub resumed: usize,
    /// Wall time of this invocation and its throughput in scored tasks per minute.
    pub wall_seconds: f64,
    pub tasks_per_minute: f64,
    /// When this invocation started, in seconds since the Unix epoch: merged shards that ran
    /// one after another add up their wall times, shards that ran side by side do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<f64>,
    /// Every invocation that scored tasks in this run directory, oldest first: a run resumed
    /// after an interruption keeps the wall time of its earlier sittings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sittings: Vec<Sitting>,
}

/// One invocation of `eval` on a run directory: when it started, how long it ran, how many
/// tasks it scored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sitting {
    pub started_at: Option<f64>,
    pub wall_seconds: f64,
    pub ran: usize,
}

impl Sitting {
    /// The sittings a summary recorded; one written before sittings were recorded counts as
    /// the invocation it describes (started then, ran that long, scored `ran`), when that
    /// scored tasks.
    pub(crate) fn recorded(
        sittings: &[Sitting],
        started_at: Option<f64>,
        wall_seconds: f64,
        ran: usize,
    ) -> Vec<Sitting> {
        if !sittings.is_empty() {
            sittings.to_vec()
        } else if ran > 0 {
            vec![Sitting {
                started_at,
                wall_seconds,
                ran,
            }]
        } else {
            Vec::new()
        }
    }

    /// The earlier summary's sittings (as [`Sitting::recorded`]) followed by this one, when it
    /// scored tasks: what a run directory's new `summary.json` records.
    pub(crate) fn after(earlier: Vec<Sitting>, this: Sitting) -> Vec<Sitting> {
        let mut all = earlier;
        if this.ran > 0 {
            all.push(this);
        }
        all
    }
}

impl Summary {
    /// The invocations that scored tasks, oldest first.
    pub fn all_sittings(&self) -> Vec<Sitting> {
        Sitting::recorded(&self.sittings, self.started_at, self.wall_seconds, self.ran)
    }
}

/// Tasks per minute of wall time.
pub(crate) fn per_minute(tasks: usize, seconds: f64) -> f64 {
    tasks as f64 / (seconds / 60.0).max(1e-9)
}

/// Summarises records (of one method).
pub fn summarize(method: &str, records: &[TaskRecord]) -> Summary {
    let pass = pass_summary(records.iter().map(|r| &r.result));
    let recalls: Vec<f64> = records.iter().filter_map(|r| r.recall).collect();
    let strict: Vec<f64> = records
        .iter()
        .filter_map(|r| r.recall_definitions)
        .collect();
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let mut phases: Vec<PhaseStats> = Vec::new();
    for p in records.iter().flat_map(|r| &r.phases) {
        let at = match phases.iter().position(|s| s.name == p.name) {
            Some(i) => i,
            None => {
                phases.push(PhaseStats {
                    name: p.name.clone(),
                    ..PhaseStats::default()
                });
                phases.len() - 1
            }
        };
        let s = &mut phases[at];
        s.seconds_total += p.seconds;
        s.tokens_in += p.tokens_in;
        s.tokens_out += p.tokens_out;
    }
    phases.push(PhaseStats {
        name: "test".into(),
        seconds_total: records.iter().map(|r| r.result.test_seconds).sum(),
        ..PhaseStats::default()
    });
    let n = records.len().max(1) as f64;
    for s in &mut phases {
        s.seconds_mean = s.seconds_total / n;
    }
    Summary {
        method: method.to_string(),
        pass_at_1: pass.overall.pass_at_1,
        passed: pass.overall.passed,
        total: pass.overall.total,
        by_kind: pass.by_kind,
        by_project: pass.by_project,
        outcomes: pass.outcomes,
        causes: pass.causes,
        recall: mean(&recalls),
        recall_definitions: mean(&strict),
        recall_tasks: recalls.len(),
        phases,
        ..Summary::default()
    }
}

/// Tasks this run covers: the shard, then the first `limit` of it.
pub fn select<T>(tasks: Vec<T>, shard: Option<(usize, usize)>, limit: Option<usize>) -> Vec<T> {
    tasks
        .into_iter()
        .enumerate()
        .filter(|(k, _)| shard.is_none_or(|(i, n)| k % n == i - 1))
        .map(|(_, t)| t)
        .take(limit.unwrap_or(usize::MAX))
        .collect()
}

/// Reads DevEval's `{namespace, completion}` JSONL (`id` for line tasks); the first
/// completion of a namespace counts.
pub fn load_completions(path: &Path) -> Result<HashMap<String, String>, EvalError> {
    #[derive(Deserialize)]
    struct Line {
        #[serde(alias = "id")]
        namespace: String,
        completion: String,
    }
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let mut out = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(raw).map_err(|e| EvalError::Record {
            path: path.to_path_buf(),
            line: i + 1,
            msg: format!("expected {{\"namespace\": ..., \"completion\": ...}}: {e}"),
        })?;
        out.entry(l.namespace).or_insert(l.completion);
    }
    Ok(out)
}

/// The per-task folder name: the namespace with anything unusual replaced.
pub fn task_dir(out: &Path, namespace: &str) -> PathBuf {
    let mut name: String = namespace
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with('.') {
        name.insert(0, '_');
    }
    out.join("tasks").join(name)
}

/// Writes `data` to `path` atomically ([`crate::fsutil::write_atomic`]).
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), EvalError> {
    crate::fsutil::write_atomic(path, data).map_err(|e| EvalError::io(path, e))
}

pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), EvalError> {
    let mut data = serde_json::to_vec_pretty(value)
        .map_err(|e| EvalError::Invalid(format!("{}: {e}", path.display())))?;
    data.push(b'\n');
    write_atomic(path, &data)
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

#[derive(Serialize, Deserialize)]
struct CompletionFile {
    namespace: String,
    completion: String,
    #[serde(default)]
    context: Option<Vec<String>>,
    #[serde(default)]
    definitions: Option<Vec<String>>,
    #[serde(default)]
    phases: Vec<Phase>,
}

/// Loads the records of a run directory (all tasks that have a result), in folder order.
pub fn load_records(out: &Path) -> Result<(RunInfo, Vec<TaskRecord>), EvalError> {
    load_run_dir(out, "written by `repohop eval`")
}

/// A run directory's `run.json` and the `tasks/*/result.json` that parse, in folder order;
/// `kind` says what directory was expected when `run.json` is missing or of another kind.
pub(crate) fn load_run_dir<I, R>(out: &Path, kind: &str) -> Result<(I, Vec<R>), EvalError>
where
    I: for<'de> Deserialize<'de>,
    R: for<'de> Deserialize<'de>,
{
    let info_path = out.join("run.json");
    let info: I = read_json(&info_path).ok_or_else(|| {
        EvalError::Invalid(format!(
            "{}: missing or unreadable; is {} a run directory {kind}?",
            info_path.display(),
            out.display()
        ))
    })?;
    let tasks = out.join("tasks");
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(&tasks) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    dirs.sort();
    let records = dirs
        .iter()
        .filter_map(|d| read_json::<R>(&d.join("result.json")))
        .collect();
    Ok((info, records))
}

/// Runs (or resumes) a batch and returns its summary; `Err` when cancelled (RUN_DIR stays
/// resumable) or when the inputs are unusable.
pub fn run_batch(cfg: &BatchConfig, source: Source) -> Result<Summary, EvalError> {
    let started = Instant::now();
    let started_at = unix_now();
    check_config(cfg)?;
    let tasks = select(load_function_tasks(&cfg.tasks_file)?, cfg.shard, cfg.limit);
    let Opened {
        name: method_name,
        completions,
        mut method,
    } = open_source(source)?;
    record_run(
        cfg,
        &RunInfo {
            method: method_name.clone(),
            tasks_file: cfg.tasks_file.clone(),
            tasks_sha256: Some(tasks_sha256(&cfg.tasks_file)?),
            source_root: cfg.source_root.clone(),
            completions_file: completions.as_ref().map(|(p, _)| p.clone()),
            python: cfg.runner.python.clone(),
            timeout_s: cfg.runner.timeout.as_secs_f64(),
        },
    )?;

    let finished: Vec<bool> = tasks
        .iter()
        .map(|t| {
            read_json::<TaskRecord>(&task_dir(&cfg.out, &t.namespace).join("result.json")).is_some()
        })
        .collect();
    let resumed = finished.iter().filter(|f| **f).count();
    let todo = tasks.len() - resumed;
    let progress = Progress::new(todo, cfg.progress, started);
    generate_and_score(
        cfg,
        &tasks,
        &finished,
        &mut method,
        completions.as_ref(),
        &progress,
    )?;
    if cfg.cancel.load(Ordering::SeqCst) {
        return Err(interrupted(cfg, &tasks));
    }

    let mut summary = write_completions_and_summarize(cfg, &tasks, &method_name)?;
    summary.ran = todo;
    summary.resumed = resumed;
    summary.wall_seconds = started.elapsed().as_secs_f64();
    summary.tasks_per_minute = per_minute(todo, summary.wall_seconds);
    summary.started_at = started_at;
    let earlier = read_json::<Summary>(&cfg.out.join("summary.json"))
        .map(|earlier| earlier.all_sittings())
        .unwrap_or_default();
    summary.sittings = Sitting::after(
        earlier,
        Sitting {
            started_at,
            wall_seconds: summary.wall_seconds,
            ran: todo,
        },
    );
    write_json(&cfg.out.join("summary.json"), &summary)?;
    Ok(summary)
}

/// Seconds since the Unix epoch: when a run started, to tell shards run one after another
/// from shards run side by side.
pub(super) fn unix_now() -> Option<f64> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

fn check_config(cfg: &BatchConfig) -> Result<(), EvalError> {
    if cfg.jobs == 0 {
        return Err(EvalError::Invalid("--jobs must be at least 1".into()));
    }
    if cfg.concurrency == 0 {
        return Err(EvalError::Invalid(
            "--concurrency must be at least 1".into(),
        ));
    }
    if let Some((i, n)) = cfg.shard {
        if n == 0 || i == 0 || i > n {
            return Err(EvalError::Invalid(format!(
                "--shard {i}/{n}: want i/n with 1 <= i <= n"
            )));
        }
    }
    super::runner::check_python(&cfg.runner.python)
}

/// A completions file: its path, and the completion of each namespace.
type Completions = (PathBuf, HashMap<String, String>);

/// A [`Source`] opened: the run's name, and its completions file or its method.
struct Opened {
    name: String,
    completions: Option<Completions>,
    method: Option<Box<dyn Method>>,
}

fn open_source(source: Source) -> Result<Opened, EvalError> {
    Ok(match source {
        Source::Method(m) => Opened {
            name: m.name().to_string(),
            completions: None,
            method: Some(m),
        },
        Source::Completions(path) => {
            let c = load_completions(&path)?;
            Opened {
                name: format!("completions:{}", file_stem(&path)),
                completions: Some((path, c)),
                method: None,
            }
        }
    })
}

/// Writes `run.json`; a run directory being resumed must hold a run of the same method.
fn record_run(cfg: &BatchConfig, info: &RunInfo) -> Result<(), EvalError> {
    let info_path = cfg.out.join("run.json");
    if let Some(old) = read_json::<RunInfo>(&info_path) {
        if old.method != info.method {
            return Err(EvalError::Invalid(format!(
                "{} holds a run of `{}`, not `{}`; choose another --out",
                cfg.out.display(),
                old.method,
                info.method
            )));
        }
        if old.tasks_sha256.is_some() && old.tasks_sha256 != info.tasks_sha256 {
            return Err(EvalError::Invalid(format!(
                "{} holds a run over another version of the task file ({} has changed since); \
                 choose another --out",
                cfg.out.display(),
                info.tasks_file.display()
            )));
        }
    }
    write_json(&info_path, info)
}

/// sha256 (hex) of a task file's bytes.
pub fn tasks_sha256(path: &Path) -> Result<String, EvalError> {
    let bytes = std::fs::read(path).map_err(|e| EvalError::io(path, e))?;
    Ok(crate::repo::cache::content_hash(&bytes))
}

/// Generates (or reads) the completions of the unfinished tasks while `cfg.jobs` threads run
/// their tests, each task's result written as it finishes. With `cfg.concurrency` above 1 the
/// method's forks generate that many tasks at once (tasks are taken in order); otherwise this
/// thread generates them one after another. Stops scheduling when cancelled; the first error
/// cancels the run and is returned.
fn generate_and_score(
    cfg: &BatchConfig,
    tasks: &[FunctionTask],
    finished: &[bool],
    method: &mut Option<Box<dyn Method>>,
    completions: Option<&Completions>,
    progress: &Progress,
) -> Result<(), EvalError> {
    let own = method.take();
    let mut forks: Vec<Box<dyn Method>> = Vec::new();
    if let Some(first) = own.as_ref() {
        for _ in 1..cfg.concurrency {
            match first.fork() {
                Some(m) => forks.push(m),
                None => {
                    return Err(EvalError::Invalid(format!(
                        "method `{}` can't generate several tasks at once (--concurrency)",
                        first.name()
                    )))
                }
            }
        }
    }
    let (tx, rx) = mpsc::sync_channel::<(usize, Prepared)>(cfg.jobs);
    let rx = Mutex::new(rx);
    let failure: Mutex<Option<EvalError>> = Mutex::new(None);
    let fail = |e: EvalError| {
        if let Ok(mut f) = failure.lock() {
            f.get_or_insert(e);
        }
        cfg.cancel.store(true, Ordering::SeqCst);
    };
    let todo: Vec<usize> = (0..tasks.len()).filter(|&k| !finished[k]).collect();
    let next = AtomicUsize::new(0);
    let generate = |mut worker: Option<Box<dyn Method>>,
                    tx: mpsc::SyncSender<(usize, Prepared)>| {
        while let Some(&k) = todo.get(next.fetch_add(1, Ordering::SeqCst)) {
            if cfg.cancel.load(Ordering::SeqCst) {
                break;
            }
            let prepared =
                progress.generating(|| prepare(cfg, &tasks[k], worker.as_mut(), completions));
            let item = match prepared {
                Ok(Some(prepared)) => (k, prepared),
                Ok(None) => continue,
                Err(e) => {
                    fail(e);
                    break;
                }
            };
            if tx.send(item).is_err() {
                break;
            }
        }
        worker
    };
    let returned = std::thread::scope(|scope| {
        for _ in 0..cfg.jobs {
            scope.spawn(|| score_queued(cfg, tasks, &rx, &fail, progress));
        }
        let others: Vec<_> = forks
            .into_iter()
            .map(|w| {
                let tx = tx.clone();
                scope.spawn(|| generate(Some(w), tx))
            })
            .collect();
        let own = generate(own, tx);
        for h in others {
            let _ = h.join();
        }
        own
    });
    *method = returned;
    match failure.into_inner().ok().flatten() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A test thread: runs the tests of each queued completion and writes the task's result, until
/// the queue closes. Once cancelled, it drains the queue without running anything.
fn score_queued(
    cfg: &BatchConfig,
    tasks: &[FunctionTask],
    queue: &Mutex<mpsc::Receiver<(usize, Prepared)>>,
    fail: &(dyn Fn(EvalError) + Sync),
    progress: &Progress,
) {
    loop {
        let next = queue.lock().ok().and_then(|r| r.recv().ok());
        let Some((k, (completion, shown, phases))) = next else {
            break;
        };
        if cfg.cancel.load(Ordering::SeqCst) {
            continue;
        }
        let task = &tasks[k];
        let result = run_task(task, &completion, &cfg.source_root, &cfg.runner, cfg.cancel);
        if cfg.cancel.load(Ordering::SeqCst) {
            continue;
        }
        let record = TaskRecord {
            recall: shown
                .context
                .and_then(|c| dependency_recall(&c, &task.dependency)),
            recall_definitions: shown
                .definitions
                .and_then(|c| dependency_recall(&c, &task.dependency)),
            result,
            phases,
        };
        let path = task_dir(&cfg.out, &task.namespace).join("result.json");
        if let Err(e) = write_json(&path, &record) {
            fail(e);
            continue;
        }
        progress.finished(&record.result);
    }
}

/// The error of a cancelled run: how many tasks are finished, and how to resume.
fn interrupted(cfg: &BatchConfig, tasks: &[FunctionTask]) -> EvalError {
    let done = tasks
        .iter()
        .filter(|t| {
            task_dir(&cfg.out, &t.namespace)
                .join("result.json")
                .is_file()
        })
        .count();
    EvalError::Invalid(format!(
        "interrupted with {done} of {} tasks finished; rerun the same command to resume from {}",
        tasks.len(),
        cfg.out.display()
    ))
}

/// Writes `completions.jsonl` (every task's completion, DevEval's format) and summarises every
/// task's result.
fn write_completions_and_summarize(
    cfg: &BatchConfig,
    tasks: &[FunctionTask],
    method_name: &str,
) -> Result<Summary, EvalError> {
    let mut records = Vec::with_capacity(tasks.len());
    let mut lines = String::new();
    for t in tasks {
        let dir = task_dir(&cfg.out, &t.namespace);
        if let Some(r) = read_json::<TaskRecord>(&dir.join("result.json")) {
            records.push(r);
        }
        if let Some(c) = read_json::<CompletionFile>(&dir.join("completion.json")) {
            let line = serde_json::json!({"namespace": c.namespace, "completion": c.completion});
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
    }
    write_atomic(&cfg.out.join("completions.jsonl"), lines.as_bytes())?;
    Ok(summarize(method_name, &records))
}

type Prepared = (String, Shown, Vec<Phase>);

/// What a method's context showed, for the two recall readings.
#[derive(Debug, Default)]
struct Shown {
    context: Option<Vec<String>>,
    definitions: Option<Vec<String>>,
}

/// The completion for one task: from an earlier run, from the completions file, or generated
/// now (then saved with its trace before any test runs). `Ok(None)`: recorded as an error.
fn prepare(
    cfg: &BatchConfig,
    task: &FunctionTask,
    method: Option<&mut Box<dyn Method>>,
    completions: Option<&Completions>,
) -> Result<Option<Prepared>, EvalError> {
    let dir = task_dir(&cfg.out, &task.namespace);
    if let Some(c) = read_json::<CompletionFile>(&dir.join("completion.json")) {
        let shown = Shown {
            context: c.context,
            definitions: c.definitions,
        };
        return Ok(Some((c.completion, shown, c.phases)));
    }
    let generated = match (method, completions) {
        (_, Some((path, map))) => match map.get(&task.namespace) {
            Some(c) => Generated {
                completion: c.clone(),
                ..Generated::default()
            },
            None => {
                let msg = format!("no completion for this namespace in {}", path.display());
                return record_error(cfg, task, msg).map(|_| None);
            }
        },
        (Some(m), None) => {
            let input = MethodInput {
                task,
                source_root: &cfg.source_root,
                cancel: cfg.cancel,
                runner: &cfg.runner,
            };
            match m.generate(&input) {
                Ok(g) => g,
                Err(_) if cfg.cancel.load(Ordering::SeqCst) => return Ok(None),
                Err(e) => {
                    let msg = format!("{GENERATION_FAILED} {e}");
                    return record_error(cfg, task, msg).map(|_| None);
                }
            }
        }
        (None, None) => return Err(EvalError::Invalid("no method and no completions".into())),
    };
    write_json(&dir.join("trace.json"), &generated.trace)?;
    let file = CompletionFile {
        namespace: task.namespace.clone(),
        completion: generated.completion,
        context: generated.context,
        definitions: generated.definitions,
        phases: generated.phases,
    };
    write_json(&dir.join("completion.json"), &file)?;
    let shown = Shown {
        context: file.context,
        definitions: file.definitions,
    };
    Ok(Some((file.completion, shown, file.phases)))
}

fn record_error(cfg: &BatchConfig, task: &FunctionTask, msg: String) -> Result<(), EvalError> {
    let record = TaskRecord {
        result: TaskResult::new(task, Outcome::Error, Some(msg)),
        recall: None,
        recall_definitions: None,
        phases: Vec::new(),
    };
    write_json(
        &task_dir(&cfg.out, &task.namespace).join("result.json"),
        &record,
    )
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "completions".into())
}

/// One stderr line per finished task: count, verdict, ETA from the mean time so far.
struct Progress {
    todo: usize,
    enabled: bool,
    started: Instant,
    done: Mutex<(usize, usize)>,
    /// Tasks being generated now (shown when several are).
    generating: AtomicUsize,
}

impl Progress {
    fn new(todo: usize, enabled: bool, started: Instant) -> Self {
        Progress {
            todo,
            enabled,
            started,
            done: Mutex::new((0, 0)),
            generating: AtomicUsize::new(0),
        }
    }

    /// Counts a task's generation while `f` runs.
    fn generating<T>(&self, f: impl FnOnce() -> T) -> T {
        self.generating.fetch_add(1, Ordering::SeqCst);
        let out = f();
        self.generating.fetch_sub(1, Ordering::SeqCst);
        out
    }

    fn finished(&self, r: &TaskResult) {
        let Ok(mut done) = self.done.lock() else {
            return;
        };
        done.0 += 1;
        done.1 += (r.outcome == Outcome::Pass) as usize;
        if !self.enabled {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = elapsed / done.0 as f64 * (self.todo - done.0) as f64;
        let verdict = r.outcome.as_str();
        let in_flight = match self.generating.load(Ordering::SeqCst) {
            n if n > 1 => format!(" · {n} generating"),
            _ => String::new(),
        };
        eprintln!(
            "[{}/{}] {verdict:<7} {} ({:.1} s) passed {} · elapsed {:.0} s · ETA {:.0} s{in_flight}",
            done.0, self.todo, r.namespace, r.test_seconds, done.1, elapsed, eta
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::runner::TaskResult;
    use crate::eval::tasks::Dependency;

    fn task(ns: &str) -> FunctionTask {
        FunctionTask {
            namespace: ns.into(),
            kind: None,
            project_path: "p".into(),
            completion_path: "p/m.py".into(),
            signature_position: None,
            body_position: None,
            dependency: Dependency::default(),
            requirement: None,
            tests: vec!["t".into()],
            indent: None,
        }
    }

    #[test]
    fn shards_partition_and_limit_applies_within_a_shard() {
        let tasks: Vec<FunctionTask> = (0..7).map(|i| task(&format!("m.f{i}"))).collect();
        let names = |v: Vec<FunctionTask>| v.into_iter().map(|t| t.namespace).collect::<Vec<_>>();
        assert_eq!(
            names(select(tasks.clone(), Some((1, 3)), None)),
            ["m.f0", "m.f3", "m.f6"]
        );
        assert_eq!(
            names(select(tasks.clone(), Some((3, 3)), None)),
            ["m.f2", "m.f5"]
        );
        assert_eq!(
            names(select(tasks.clone(), Some((2, 3)), Some(1))),
            ["m.f1"]
        );
        assert_eq!(select(tasks, None, Some(4)).len(), 4);
    }

    #[test]
    fn task_dirs_stay_inside_the_run() {
        let out = Path::new("/r");
        assert_eq!(
            task_dir(out, "a.b.C.__init__"),
            Path::new("/r/tasks/a.b.C.__init__")
        );
        assert_eq!(task_dir(out, "../x/y"), Path::new("/r/tasks/_.._x_y"));
        assert_eq!(task_dir(out, ""), Path::new("/r/tasks/_"));
    }

    #[test]
    fn summary_adds_phases_and_recall() {
        let rec = |outcome, secs: f64, recall, tokens| TaskRecord {
            result: TaskResult {
                test_seconds: secs,
                ..TaskResult::new(&task("m.f"), outcome, None)
            },
            recall,
            recall_definitions: recall.map(|r| r / 2.0),
            phases: vec![Phase {
                name: "generation".into(),
                seconds: 2.0,
                tokens_in: tokens,
                tokens_out: 10,
            }],
        };
        let s = summarize(
            "m",
            &[
                rec(Outcome::Pass, 1.0, Some(0.5), 100),
                rec(Outcome::Fail, 3.0, None, 300),
            ],
        );
        assert_eq!((s.passed, s.total, s.pass_at_1), (1, 2, 0.5));
        assert_eq!((s.recall, s.recall_tasks), (Some(0.5), 1));
        assert_eq!(s.recall_definitions, Some(0.25));
        assert_eq!(s.phases[0].name, "generation");
        assert_eq!(
            (s.phases[0].seconds_total, s.phases[0].seconds_mean),
            (4.0, 2.0)
        );
        assert_eq!((s.phases[0].tokens_in, s.phases[0].tokens_out), (400, 20));
        assert_eq!(
            (s.phases[1].name.as_str(), s.phases[1].seconds_mean),
            ("test", 2.0)
        );
    }
}
