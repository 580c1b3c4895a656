//! Every answer a run chose from, scored on its own (`eval --candidates-of RUN`): how often each
//! kind of answer passes, how often some answer passes, and what the selections `central`,
//! `review` and `likely` keep when replayed on the run's own recorded centrality, reviews and
//! likelihoods. What a better choice among the same answers could gain, without generating
//! again.
//!
//! OUT holds `tasks/<namespace>/candidates.json` per task (written atomically; a resumed study
//! skips the tasks it holds) and `candidates.json`, the study of the last finished invocation.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::batch::{read_json, task_dir, tasks_sha256, write_json};
use super::metrics::verdict;
use super::pipelines::task_target;
use super::report::run_records;
use super::runner::{check_python, run_task, RunnerConfig, TaskTests};
use super::tasks::{load_function_tasks, FunctionTask};
use super::EvalError;
use crate::generate::model_tests::{
    complete_imports, run_pool, write_in_view, ModelTests, TestScore,
};
use crate::generate::{select, GenerateOptions};
use crate::llm::Llm;
use crate::repo::mask::MaskedView;

pub struct StudyConfig<'a> {
    /// The studied run: one directory, or its shard directories.
    pub run: Vec<PathBuf>,
    /// The run's task file (checked against the hash the run recorded).
    pub tasks_file: PathBuf,
    pub source_root: PathBuf,
    pub out: PathBuf,
    pub runner: RunnerConfig,
    pub jobs: usize,
    pub cancel: &'a AtomicBool,
    /// One line per finished task on stderr.
    pub progress: bool,
    /// Score the likelihoods the answers lack (`likely` replayed on every pool).
    pub likelihood: bool,
    /// Run `--select tests` too: the model's tests for each task (kept here, one file per
    /// task, shared by the studies of several runs) run against the answers of the pools
    /// where the answers a selection may keep do not all pass or all fail (elsewhere no choice
    /// changes the verdict).
    pub model_tests: Option<PathBuf>,
}

/// One answer of a task's pool as the run's trace recorded it, and how its tests went.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    /// `first`, `repair`, `sample<seed>` or `infill`.
    pub label: String,
    /// The weight of its problems as the run recorded it (see
    /// [`crate::generate::pipeline::CandidateTrace::problems`]).
    pub problems: usize,
    pub centrality: f64,
    pub review: Option<f64>,
    pub body: String,
    /// The body's mean log-probability per token under the bare request for the target, and
    /// its tokens (see [`select::likelihoods`]): from a `--select likely` run's trace, or
    /// scored by the study with `--likelihood`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood_tokens: Option<usize>,
    /// How many of the model's tests pass with this answer, and how many raise (see
    /// [`StudyConfig::model_tests`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_passed: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_raised: Option<usize>,
    /// Whether the examples of the target's docstring pass with it, as the run found (every
    /// replayed selection puts those that do first, as the run did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples_passed: Option<bool>,
    /// `pass`, or why not (the exception its test ended with, `timeout`, ...).
    #[serde(default)]
    pub outcome: String,
}

impl Candidate {
    /// Its tally over the model's tests, when they ran (a study written before raises were
    /// counted has none).
    fn test_score(&self) -> Option<TestScore> {
        self.tests_passed.map(|passed| TestScore {
            passed,
            raised: self.tests_raised.unwrap_or(0),
        })
    }
}

/// `tasks/<namespace>/candidates.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskCandidates {
    pub namespace: String,
    /// The run's verdict on the answer it kept.
    pub run_outcome: String,
    /// The label of the answer the run kept.
    pub kept: Option<String>,
    pub candidates: Vec<Candidate>,
    /// The model's tests ran against this pool's answers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tests_run: bool,
}

/// How one kind of answer did over the studied tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LabelScore {
    pub offered: usize,
    pub passed: usize,
}

/// The study of one run's answers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Study {
    pub method: String,
    pub dirs: Vec<PathBuf>,
    /// Tasks whose trace holds a pool of answers: the studied ones.
    pub tasks: usize,
    /// Finished tasks without a pool (`--select first`, no names check, an older trace).
    pub without_pool: usize,
    /// Distinct answers tested (an answer given twice in a pool is tested once).
    pub bodies_tested: usize,
    /// The kept answer passes.
    pub kept: usize,
    /// Tasks where the kept answer, tested again, disagrees with the run's verdict (a flaky
    /// test, or a trace that does not describe what was kept).
    pub kept_disagrees: usize,
    /// The selections replayed on the recorded problems, centrality and reviews.
    pub central: usize,
    pub review: usize,
    /// `likely` replayed, where every pool's answers with the fewest problems have their
    /// likelihood.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likely: Option<usize>,
    /// `tests` replayed (with the model's tests), and the pools whose answers with the fewest
    /// problems those tests told apart (not all passing as many).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_told_apart: Option<usize>,
    /// Some answer passes; some answer with the fewest problems (what a selection may keep).
    pub some: usize,
    pub some_fewest: usize,
    pub by_label: BTreeMap<String, LabelScore>,
}

#[derive(Deserialize)]
struct Trace {
    grounding: Option<Pool>,
}

#[derive(Deserialize)]
struct Pool {
    #[serde(default)]
    candidates: Vec<Candidate>,
    kept_selected: Option<String>,
}

/// Tests every answer in the pools of `cfg.run` and sums up what a selection could keep.
/// `llm` scores the likelihoods the answers with the fewest problems lack (`cfg.likelihood`)
/// and writes the model's tests (`cfg.model_tests`).
pub fn study(cfg: &StudyConfig, mut llm: Option<&mut dyn Llm>) -> Result<Study, EvalError> {
    if cfg.jobs == 0 {
        return Err(EvalError::Invalid("--jobs must be at least 1".into()));
    }
    check_python(&cfg.runner.python)?;
    let (info, records) = run_records(&cfg.run)?;
    let hash = tasks_sha256(&cfg.tasks_file)?;
    if info.tasks_sha256.as_ref().is_some_and(|h| *h != hash) {
        return Err(EvalError::Invalid(format!(
            "{} ran another task file than {}",
            cfg.run[0].display(),
            cfg.tasks_file.display()
        )));
    }
    let tasks: HashMap<String, FunctionTask> = load_function_tasks(&cfg.tasks_file)?
        .into_iter()
        .map(|t| (t.namespace.clone(), t))
        .collect();
    let mut todo = Vec::new();
    let mut studied = Vec::new();
    let mut without_pool = 0;
    for r in &records {
        let name = &r.result.namespace;
        let Some(task) = tasks.get(name) else {
            return Err(EvalError::Invalid(format!(
                "task {name} of the run is not in {}",
                cfg.tasks_file.display()
            )));
        };
        // A task studied before is read back, its trace not again.
        let path = task_dir(&cfg.out, name).join("candidates.json");
        if let Some(mut done) = read_json::<TaskCandidates>(&path) {
            if let Some(llm) = llm
                .as_deref_mut()
                .filter(|_| cfg.likelihood && !scored(&done))
            {
                score_likelihoods(llm, task, cfg, &mut done)?;
                write_json(&path, &done)?;
            }
            studied.push(done);
            continue;
        }
        let pool = cfg
            .run
            .iter()
            .find_map(|d| read_json::<Trace>(&task_dir(d, name).join("trace.json")))
            .and_then(|t| t.grounding)
            .filter(|p| !p.candidates.is_empty());
        let Some(pool) = pool else {
            without_pool += 1;
            continue;
        };
        let run_outcome = verdict(&r.result);
        let mut pool = TaskCandidates {
            namespace: name.clone(),
            run_outcome,
            kept: pool.kept_selected,
            candidates: pool.candidates,
            tests_run: false,
        };
        if let Some(llm) = llm
            .as_deref_mut()
            .filter(|_| cfg.likelihood && !scored(&pool))
        {
            score_likelihoods(llm, task, cfg, &mut pool)?;
        }
        todo.push((task, pool));
    }
    studied.extend(test_pools(cfg, todo)?);
    if let Some(dir) = &cfg.model_tests {
        let Some(llm) = llm else {
            return Err(EvalError::Invalid(
                "the model's tests need the model".into(),
            ));
        };
        for pool in studied.iter_mut().filter(|p| !p.tests_run && split(p)) {
            if cfg.cancel.load(Ordering::SeqCst) {
                break;
            }
            judge_pool(llm, &tasks[&pool.namespace], cfg, dir, pool)?;
        }
    }
    if cfg.cancel.load(Ordering::SeqCst) {
        return Err(EvalError::Invalid(format!(
            "interrupted: {} tasks studied; run the same command to resume",
            studied.len()
        )));
    }
    let mut out = sum_up(&studied, cfg.model_tests.is_some());
    out.method = info.method;
    out.dirs = cfg.run.clone();
    out.without_pool = without_pool;
    write_json(&cfg.out.join("candidates.json"), &out)?;
    Ok(out)
}

/// Whether the answers a selection may keep do not all pass or all fail.
fn split(pool: &TaskCandidates) -> bool {
    let c = &pool.candidates;
    let kept: Vec<bool> = c
        .iter()
        .zip(eligible(c))
        .filter(|(_, e)| *e)
        .map(|(x, _)| x.outcome == "pass")
        .collect();
    kept.iter().any(|&p| p) && !kept.iter().all(|&p| p)
}

/// Runs the model's tests of `task` (read from `dir`, or written and kept there) against the
/// answers with the fewest problems of `pool`, and writes the pool back.
fn judge_pool(
    llm: &mut dyn Llm,
    task: &FunctionTask,
    cfg: &StudyConfig,
    dir: &Path,
    pool: &mut TaskCandidates,
) -> Result<(), EvalError> {
    let path = dir.join(format!("{}.json", task.namespace));
    let (repo, id, target) = task_target(task, &cfg.source_root)
        .map_err(|e| EvalError::task(&task.namespace, e.to_string()))?;
    let view = MaskedView::new(&repo, Some(id), false);
    let tests = match read_json::<ModelTests>(&path) {
        // Kept tests get the imports as newly written ones do (a no-op on those).
        Some(mut tests) => {
            complete_imports(&view, &target, &mut tests);
            tests
        }
        None => {
            let budget = GenerateOptions::default().local_budget;
            let written = write_in_view(llm, &view, &target, budget)
                .map_err(|e| EvalError::task(&task.namespace, format!("tests: {e}")))?;
            let tests = written.map(|(t, _)| t).unwrap_or_default();
            write_json(&path, &tests)?;
            tests
        }
    };
    let c = &mut pool.candidates;
    let bodies: Vec<&str> = c.iter().map(|x| x.body.as_str()).collect();
    let runner = TaskTests {
        task,
        source_root: &cfg.source_root,
        cfg: &cfg.runner,
        cancel: cfg.cancel,
    };
    let (passed, error) = run_pool(&runner, &tests, &bodies, &eligible(c));
    if cfg.cancel.load(Ordering::SeqCst) {
        return Ok(());
    }
    // Unlike a pipeline, a study stops: an answer it cannot test would count as failing.
    if let Some(e) = error {
        return Err(EvalError::task(
            &task.namespace,
            format!("the model's tests: {e}"),
        ));
    }
    for (x, p) in c.iter_mut().zip(passed) {
        x.tests_passed = p.map(|s| s.passed);
        x.tests_raised = p.map(|s| s.raised);
    }
    pool.tests_run = true;
    write_json(
        &task_dir(&cfg.out, &pool.namespace).join("candidates.json"),
        pool,
    )?;
    if cfg.progress {
        let counts: Vec<String> = pool
            .candidates
            .iter()
            .map(|x| match (x.tests_passed, x.tests_raised) {
                (Some(p), Some(r)) => format!("{p}/{r}"),
                _ => "-".into(),
            })
            .collect();
        eprintln!(
            "tests: {} ({} written; passed/raised per answer: {})",
            pool.namespace,
            tests.names.len(),
            counts.join(" ")
        );
    }
    Ok(())
}

/// Whether a pool's answers with the fewest problems have their likelihoods.
fn scored(pool: &TaskCandidates) -> bool {
    let c = &pool.candidates;
    select::likely_ranks(&likelihoods(c), &eligible(c)).is_some()
}

/// The answers a selection may keep ([`select::eligible`]).
fn eligible(c: &[Candidate]) -> Vec<bool> {
    select::eligible(&c.iter().map(|x| x.problems).collect::<Vec<_>>())
}

fn likelihoods(c: &[Candidate]) -> Vec<Option<f64>> {
    c.iter().map(|x| x.likelihood).collect()
}

/// Scores the likelihoods of the answers with the fewest problems of `pool`.
fn score_likelihoods(
    llm: &mut dyn Llm,
    task: &FunctionTask,
    cfg: &StudyConfig,
    pool: &mut TaskCandidates,
) -> Result<(), EvalError> {
    let (_, _, target) = task_target(task, &cfg.source_root)
        .map_err(|e| EvalError::task(&task.namespace, e.to_string()))?;
    let c = &mut pool.candidates;
    let bodies: Vec<&str> = c.iter().map(|x| x.body.as_str()).collect();
    let found = select::likelihoods(llm, &target, &bodies, &eligible(c))
        .map_err(|e| EvalError::task(&task.namespace, format!("likelihoods: {e}")))?;
    for (x, l) in c.iter_mut().zip(found.scores) {
        x.likelihood = l.map(|l| l.mean());
        x.likelihood_tokens = l.map(|l| l.tokens);
    }
    if cfg.progress {
        eprintln!("likelihoods scored: {}", pool.namespace);
    }
    Ok(())
}

/// Tests each task's distinct answers on `cfg.jobs` threads, a task at a time per thread, and
/// writes each task's file when its answers are done.
fn test_pools(
    cfg: &StudyConfig,
    todo: Vec<(&FunctionTask, TaskCandidates)>,
) -> Result<Vec<TaskCandidates>, EvalError> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<TaskCandidates>> = Mutex::new(Vec::new());
    let failed: Mutex<Option<EvalError>> = Mutex::new(None);
    let total = todo.len();
    std::thread::scope(|scope| {
        for _ in 0..cfg.jobs.min(total.max(1)) {
            scope.spawn(|| {
                while let Some((task, pool)) = todo.get(next.fetch_add(1, Ordering::SeqCst)) {
                    if cfg.cancel.load(Ordering::SeqCst) {
                        break;
                    }
                    let mut pool = pool.clone();
                    let mut tested: HashMap<String, String> = HashMap::new();
                    for c in &mut pool.candidates {
                        if let Some(o) = tested.get(&c.body) {
                            c.outcome = o.clone();
                            continue;
                        }
                        let r = run_task(task, &c.body, &cfg.source_root, &cfg.runner, cfg.cancel);
                        c.outcome = verdict(&r);
                        tested.insert(c.body.clone(), c.outcome.clone());
                    }
                    if cfg.cancel.load(Ordering::SeqCst) {
                        break;
                    }
                    let path = task_dir(&cfg.out, &pool.namespace).join("candidates.json");
                    if let Err(e) = write_json(&path, &pool) {
                        failed.lock().unwrap().get_or_insert(e);
                        cfg.cancel.store(true, Ordering::SeqCst);
                        break;
                    }
                    let mut done = done.lock().unwrap();
                    if cfg.progress {
                        let passed = pool.candidates.iter().filter(|c| c.outcome == "pass");
                        eprintln!(
                            "[{}/{total}] {}: {} of {} answers pass ({} distinct)",
                            done.len() + 1,
                            pool.namespace,
                            passed.count(),
                            pool.candidates.len(),
                            tested.len()
                        );
                    }
                    done.push(pool);
                }
            });
        }
    });
    match failed.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(done.into_inner().unwrap()),
    }
}

/// The study's figures over tested pools; with `tests`, `tests` replayed too.
fn sum_up(pools: &[TaskCandidates], tests: bool) -> Study {
    let mut s = Study {
        tasks: pools.len(),
        ..Study::default()
    };
    // Per pool, whether `likely` keeps a passing answer (`None`: some answer has no likelihood).
    let mut likely_kept = Vec::new();
    let (mut tests_kept, mut told_apart) = (0, 0);
    for p in pools {
        let c = &p.candidates;
        let passes = |i: usize| c[i].outcome == "pass";
        let mut distinct: Vec<&str> = c.iter().map(|c| c.body.as_str()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        s.bodies_tested += distinct.len();
        for x in c {
            let label = s.by_label.entry(x.label.clone()).or_default();
            label.offered += 1;
            label.passed += usize::from(x.outcome == "pass");
        }
        if let Some(k) = c.iter().position(|x| Some(&x.label) == p.kept.as_ref()) {
            s.kept += usize::from(passes(k));
            s.kept_disagrees += usize::from(passes(k) != (p.run_outcome == "pass"));
        }
        let eligible = eligible(c);
        s.some += usize::from((0..c.len()).any(passes));
        s.some_fewest += usize::from((0..c.len()).any(|i| eligible[i] && passes(i)));
        let centrality: Vec<f64> = c.iter().map(|x| x.centrality).collect();
        let reviews: Vec<Option<f64>> = c.iter().map(|x| x.review).collect();
        let examples: Vec<Option<bool>> = c.iter().map(|x| x.examples_passed).collect();
        let keeps = |ranks: &[f64]| {
            select::best(&select::examples_ranks(&examples, ranks), &eligible).is_some_and(passes)
        };
        let central = select::ranks(&centrality, &vec![None; c.len()], &eligible);
        let review = select::ranks(&centrality, &reviews, &eligible);
        s.central += usize::from(keeps(&central));
        s.review += usize::from(keeps(&review));
        let scores: Vec<Option<TestScore>> = c.iter().map(Candidate::test_score).collect();
        tests_kept += usize::from(keeps(&select::tests_ranks(&scores, &review)));
        let mut counts: Vec<TestScore> = (0..c.len())
            .filter(|&i| eligible[i])
            .map(|i| scores[i].unwrap_or_default())
            .collect();
        counts.dedup();
        told_apart += usize::from(counts.len() > 1);
        let likely = select::likely_ranks(&likelihoods(c), &eligible);
        likely_kept.push(likely.map(|l| keeps(&l)));
    }
    // Replayed only where every pool can be.
    s.likely = likely_kept
        .into_iter()
        .map(|k| k.map(usize::from))
        .sum::<Option<usize>>();
    if tests {
        s.tests = Some(tests_kept);
        s.tests_told_apart = Some(told_apart);
    }
    s
}

/// [`Study`] as markdown.
pub fn study_markdown(s: &Study) -> String {
    let dirs: Vec<String> = s.dirs.iter().map(|d| d.display().to_string()).collect();
    let mut out = format!(
        "`{}` ({}): {} tasks with a pool of answers, {} without; {} distinct answers tested\n\n",
        s.method,
        dirs.join(" + "),
        s.tasks,
        s.without_pool,
        s.bodies_tested
    );
    out.push_str("| answer | offered | passed |\n|---|---:|---:|\n");
    for (label, l) in &s.by_label {
        let _ = writeln!(out, "| {label} | {} | {} |", l.offered, l.passed);
    }
    let _ = writeln!(
        out,
        "\nkept by the run: {} · replayed `central`: {} · replayed `review`: {}\n\
         some answer passes: {} · some with the fewest problems: {}",
        s.kept, s.central, s.review, s.some, s.some_fewest
    );
    if let Some(n) = s.likely {
        let _ = writeln!(out, "replayed `likely`: {n}");
    }
    if let (Some(n), Some(apart)) = (s.tests, s.tests_told_apart) {
        let _ = writeln!(
            out,
            "replayed `tests`: {n} (the model's tests told the answers apart in {apart} pools)"
        );
    }
    if s.kept_disagrees > 0 {
        let _ = writeln!(
            out,
            "note: on {} tasks the kept answer tested again disagrees with the run's verdict",
            s.kept_disagrees
        );
    }
    out
}
