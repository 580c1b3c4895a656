//! `repohop eval` (Pass@1 batch runs) and `repohop report` (compare run directories).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::eval::batch::{load_completions, run_batch, BatchConfig, Source, Summary};
use repohop::eval::by_task::{by_task_markdown, compare_by_task};
use repohop::eval::candidates::{study, study_markdown, StudyConfig};
use repohop::eval::line_metrics::score_lines;
use repohop::eval::line_report::{
    compare_table, group_table, is_line_run, load_line_run, merge_line_runs, on_common_cursors,
    prompt_table,
};
use repohop::eval::lines::{prompt_lines, run_lines, LineRunConfig};
use repohop::eval::report::{
    failed_tasks, failures_markdown, load_run, markdown, merge_runs, svg_chart,
};
use repohop::eval::runner::RunnerConfig;
use repohop::eval::{pipelines, tasks};
use repohop::generate::complete::LineMethod;
use repohop::generate::select::Select;
use repohop::generate::PromptFormat;
use repohop::llm::{CandleLlm, Engine, SharedLlm};
use repohop::retrieve::dyretriever::ExpandMode;

use super::args::{EmbedArgs, LineArgs, RemoteArgs};

#[derive(Args)]
pub struct EvalArgs {
    /// Task file: DevEval JSONL records, or repohop's function-task or line-task JSONL.
    #[arg(long)]
    tasks: PathBuf,
    /// Folder the tasks' project_path / completion_path are relative to (DevEval's Source_Code).
    #[arg(long)]
    source_root: PathBuf,
    /// Score this DevEval-format `{namespace, completion}` JSONL instead of generating.
    #[arg(long, conflicts_with = "method")]
    completions: Option<PathBuf>,
    /// Test every answer a finished run chose from (its traces' pools; a run's shards joined
    /// by commas) and replay the selections on them, instead of generating.
    #[arg(long, value_name = "RUN", conflicts_with_all = ["method", "completions"])]
    candidates_of: Option<PathBuf>,
    /// With --candidates-of: score the likelihood of the answers whose trace has none (as
    /// `--select likely` does, with --model) and replay `likely` too.
    #[arg(long, requires = "candidates_of")]
    likelihood: bool,
    /// With --candidates-of: replay `--select tests` too. The model (--model) writes tests for
    /// each task whose answers a selection may keep do not all pass or all fail, kept in DIR
    /// (one file per task, reused: several runs' studies can share them), and they run
    /// against those answers.
    #[arg(long, value_name = "DIR", requires = "candidates_of")]
    model_tests: Option<PathBuf>,
    /// Generate with this method: reference, not-implemented, direct, dense, simplerag,
    /// dyretriever, dycoder; for line tasks none, vanilla, repocoder, graphcoder, saracoder.
    #[arg(long)]
    method: Option<String>,
    /// Line tasks: retrieval switches and prompt budget.
    #[command(flatten)]
    line: LineArgs,
    /// Generator model for methods that generate: alias, local path or Hugging Face repo id.
    #[arg(long, default_value = repohop::models::DEFAULT_GENERATOR)]
    model: String,
    #[command(flatten)]
    remote: RemoteArgs,
    /// Leave the target's own file out of generation prompts (the papers' layout); the run is
    /// named `<method>-nolocal`.
    #[arg(long)]
    no_local: bool,
    /// The generation prompt's layout (see `generate --prompt-format`); other than chat, the
    /// run is named `<method>-<format>`.
    #[arg(long, value_enum, default_value = "chat")]
    prompt_format: PromptFormat,
    /// Don't check the answer's names against the repository (no repair round); the run is
    /// named `<method>-nogrounding`.
    #[arg(long)]
    no_grounding: bool,
    /// Answers sampled (for every task with `review`/`central`; with `first`, when the checked
    /// answer still names what doesn't exist); other than the
    /// default, the run is named `<method>-samples<N>`.
    #[arg(long, default_value_t = repohop::generate::pipeline::SAMPLES)]
    samples: usize,
    /// Which checked answer is kept. `review` (the default with the names check) and `central`
    /// draw samples and the infilled answer for every task and keep, of those with the fewest
    /// problems, the one closest to all the others (`central`) plus the one whose code best
    /// explains the docstring (`review`); `first` (the default without it) keeps the greedy
    /// answer unless another has fewer problems; `tests` also runs, against the answers with
    /// the fewest problems, a few tests the model writes from the target's file and keeps the
    /// one passing the most (a tie: as `review`); `likely` the body likeliest under the bare
    /// request. Other than the default, the run is named `<method>-<select>`.
    #[arg(long, value_enum)]
    select: Option<Select>,
    /// The embedder of dense similarity (other than the default, the run is named
    /// `<method>-embed-<model>`), and its device. Vectors are kept in the run directory.
    #[command(flatten)]
    embed: EmbedArgs,
    /// DyRetriever's expand step: the LLM, the parsed call sites, or both.
    #[arg(long, value_enum, default_value = "static")]
    expand: ExpandMode,
    /// DyRetriever's entry points from the LLM alone, as in the paper.
    #[arg(long)]
    paper_walk: bool,
    /// Python with pytest and the projects' test dependencies (checked before any task).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    /// Test tasks in parallel, each in its own copy of the project.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Function tasks generated at the same time, their LLM calls decoded together by one
    /// shared engine (prompts are still computed one at a time).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Compute every prompt whole instead of reusing the prefix computed for an earlier call:
    /// slower, but each completion is bit for bit the same whatever ran before or beside it.
    #[arg(long)]
    no_prefix_reuse: bool,
    /// Most MiB the keys and values of the answers decoded together may take (with
    /// --concurrency); an answer past it waits, in order, for others to end. Answers are the
    /// same either way. Default: no bound (the 1.5B model takes 56 KiB per token).
    #[arg(long, value_name = "MIB")]
    kv_budget_mb: Option<usize>,
    /// Only the first N tasks (of the shard).
    #[arg(long)]
    limit: Option<usize>,
    /// `i/n`: this run takes every n-th task starting with the i-th (1-based).
    #[arg(long)]
    shard: Option<String>,
    /// Seconds for all tests of one task.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Address-space limit for test processes, in MiB (0: none).
    #[arg(long, default_value_t = 4096)]
    memory_mb: u64,
    /// Largest file a test process may write (its output log included), in MiB (0: none).
    #[arg(long, default_value_t = 256)]
    file_size_mb: u64,
    /// Let test processes reach the network (by default they only have their own loopback).
    #[arg(long)]
    allow_network: bool,
    /// Fail instead of running tests unsandboxed where namespaces are unavailable.
    #[arg(long)]
    require_sandbox: bool,
    /// Run directory (resumable); default `eval-runs/<method>`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Line tasks: build each cursor's prompt as the method would (RepoCoder: its first
    /// round) and say where the ground truth's identifiers are in it, without running the
    /// model; nothing is written.
    #[arg(long, conflicts_with = "completions")]
    prompt_only: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// No per-task progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
pub struct ReportArgs {
    /// Run directories written by `repohop eval` (all of function tasks, or all of line tasks:
    /// those are compared on the cursors every run finished).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Print a JSON array of run summaries instead of markdown tables.
    #[arg(long)]
    json: bool,
    /// Write an SVG chart of Pass@1 and time per phase per method.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// The directories are shards of one run (`eval --shard i/n`, possibly on other machines):
    /// report them as one. Refuses different methods, task files, timeouts (line runs: models
    /// or budgets) and overlaps.
    #[arg(long)]
    merge: bool,
    /// Instead of the tables, list every task that did not pass (function runs): its
    /// dependency kinds, the cause (the exception its test ended with, `timeout`, ...) and the
    /// output line it was read from.
    #[arg(long)]
    failures: bool,
    /// Instead of the tables, compare the runs task by task (function runs): each run's
    /// passes, those no other run has, how many pass in every run and in some run, and the
    /// tasks they disagree on with each run's outcome. A run split into shards is given as
    /// its directories joined by commas (`DIR1,DIR2`).
    #[arg(long, conflicts_with_all = ["merge", "failures", "chart"])]
    by_task: bool,
}

#[derive(Args)]
pub struct SampleArgs {
    /// Folder the repositories are in (DevEval's Source_Code).
    #[arg(long)]
    source_root: PathBuf,
    /// A repository, relative to the source root (repeat for several).
    #[arg(long = "repo", required = true)]
    repos: Vec<String>,
    /// Cursors per repository.
    #[arg(long, default_value_t = 100)]
    per_repo: usize,
    /// Share of cursors whose line uses a name imported from the repository.
    #[arg(long, default_value_t = 0.5)]
    cross_share: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the tasks here (JSONL) instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Draws line-completion cursors (RepoEval style) and prints them as line tasks.
pub fn run_sample(args: SampleArgs) -> Result<()> {
    use repohop::eval::sample::{cursors, draw};
    let opts = repohop::repo::IndexOptions {
        use_cache: false,
        ..Default::default()
    };
    let mut out = String::new();
    for name in &args.repos {
        let root = args.source_root.join(name);
        let repo = repohop::repo::Repository::open(&root, &opts)
            .with_context(|| format!("cannot index {}", root.display()))?;
        let all = cursors(&repo, name);
        let cross = all
            .iter()
            .filter(|t| t.split.as_deref() == Some("cross_file"))
            .count();
        let picked = draw(all.clone(), args.per_repo, args.cross_share, args.seed);
        eprintln!(
            "{name}: {} cursors ({cross} cross-file), {} drawn",
            all.len(),
            picked.len()
        );
        for t in picked {
            out.push_str(&serde_json::to_string(&t)?);
            out.push('\n');
        }
    }
    match &args.out {
        Some(p) => repohop::fsutil::write_atomic(p, out.as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?,
        None => print!("{out}"),
    }
    Ok(())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    const NOTE: &[u8] =
        b"\nstopping after the current task (a generation can take minutes); signal again to quit now\n";
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: `_exit` is async-signal-safe; every finished task is already on disk.
        unsafe { libc::_exit(130) };
    }
    // SAFETY: `write` is async-signal-safe and the buffer is a static.
    unsafe { libc::write(2, NOTE.as_ptr().cast(), NOTE.len()) };
}

/// Ctrl-C / SIGTERM stop the run cleanly: running tests are killed, temp copies removed, and
/// the run directory keeps every finished task. The task being generated finishes first; a
/// second signal quits at once (that task is lost, the finished ones are kept).
fn install_stop_handler() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler touches only an atomic and async-signal-safe calls.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// A run's result; a run stopped by Ctrl-C / SIGTERM says where it stopped and exits 130.
fn stopped_or<T>(r: Result<T, repohop::eval::EvalError>) -> Result<T> {
    match r {
        Err(e) if STOP.load(Ordering::SeqCst) => {
            eprintln!("{e}");
            std::process::exit(130);
        }
        r => Ok(r?),
    }
}

fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let (i, n) = s
        .split_once('/')
        .with_context(|| format!("--shard {s}: want i/n, e.g. 1/4"))?;
    let (i, n): (usize, usize) = (
        i.trim()
            .parse()
            .with_context(|| format!("--shard {s}: bad i"))?,
        n.trim()
            .parse()
            .with_context(|| format!("--shard {s}: bad n"))?,
    );
    if n == 0 || i == 0 || i > n {
        bail!("--shard {s}: want 1 <= i <= n");
    }
    Ok((i, n))
}

pub fn run_eval(args: EvalArgs) -> Result<()> {
    super::args::check_select(args.select, args.no_grounding)?;
    let lines: Vec<_> = tasks::load_tasks(&args.tasks)?
        .into_iter()
        .filter_map(|t| match t {
            tasks::Task::Line(l) => Some(l),
            tasks::Task::Function(_) => None,
        })
        .collect();
    if !lines.is_empty() {
        return score_line_tasks(&args, &lines);
    }
    if args.prompt_only {
        bail!(
            "--prompt-only applies to line tasks; {} holds function tasks",
            args.tasks.display()
        );
    }
    if let Some(run) = &args.candidates_of {
        return study_candidates(&args, run);
    }
    // A server is asked first: its model names the run.
    let remote = match &args.method {
        Some(m) if pipelines::generates(m) => args.remote.connect()?.map(Engine::Remote),
        _ => None,
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let name = match &args.method {
            Some(m) => pipelines::Settings {
                engine: remote.clone(),
                ..settings(&args, Path::new(""))
            }
            .variant_name(m),
            None => "completions".into(),
        };
        PathBuf::from("eval-runs").join(name)
    });
    let source = match (&args.completions, &args.method) {
        (Some(c), None) => Source::Completions(c.clone()),
        (None, Some(m)) => {
            let mut settings = settings(&args, &out.join("vectors"));
            if pipelines::generates(m) {
                settings.engine = match remote {
                    Some(remote) => Some(remote),
                    None if args.concurrency > 1 => {
                        let llm = CandleLlm::load(&args.model, &settings.llm_options())?;
                        Some(Engine::Local(SharedLlm::spawn(llm)))
                    }
                    None => None,
                };
            }
            Source::Method(
                pipelines::builtin(m, &settings)
                    .map_err(|e| anyhow::anyhow!("--method {m}: {e}"))?,
            )
        }
        _ => bail!("give --completions FILE (score existing completions) or --method M (generate)"),
    };
    if !args.source_root.is_dir() {
        bail!(
            "--source-root {}: not a directory (it should hold the projects named by project_path)",
            args.source_root.display()
        );
    }
    let shard = args.shard.as_deref().map(parse_shard).transpose()?;
    check_sandbox(&args)?;
    install_stop_handler();
    let cfg = BatchConfig {
        tasks_file: args.tasks.clone(),
        source_root: args.source_root.clone(),
        out: out.clone(),
        runner: runner_config(&args),
        jobs: args.jobs,
        concurrency: args.concurrency,
        limit: args.limit,
        shard,
        cancel: &STOP,
        progress: !args.quiet,
    };
    let summary = stopped_or(run_batch(&cfg, source))?;
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print_summary(&summary, &out);
    }
    Ok(())
}

/// How the tests run, from the flags.
fn runner_config(args: &EvalArgs) -> RunnerConfig {
    RunnerConfig {
        python: args.python.clone(),
        timeout: Duration::from_secs_f64(args.timeout.max(0.1)),
        memory_bytes: (args.memory_mb > 0).then_some(args.memory_mb << 20),
        file_size_bytes: (args.file_size_mb > 0).then_some(args.file_size_mb << 20),
        allow_network: args.allow_network,
        require_sandbox: args.require_sandbox,
        ..RunnerConfig::default()
    }
}

/// `--require-sandbox` refuses to start where namespaces are unavailable.
fn check_sandbox(args: &EvalArgs) -> Result<()> {
    let sandbox = repohop::eval::sandbox::availability();
    if args.require_sandbox && !sandbox.sandboxed() {
        bail!(
            "--require-sandbox: namespaces are unavailable here ({})",
            sandbox.reason.as_deref().unwrap_or("unknown reason")
        );
    }
    Ok(())
}

/// `eval --candidates-of RUN`: every answer of the run's pools tested, the selections replayed.
fn study_candidates(args: &EvalArgs, run: &Path) -> Result<()> {
    let Some(out) = args.out.clone() else {
        bail!("--candidates-of needs --out DIR (where the answers' verdicts are kept)");
    };
    let run = shard_dirs(run);
    if run.iter().any(|d| is_line_run(d)) {
        bail!("--candidates-of studies function runs; line runs keep no pools of answers");
    }
    check_sandbox(args)?;
    install_stop_handler();
    let cfg = StudyConfig {
        run,
        tasks_file: args.tasks.clone(),
        source_root: args.source_root.clone(),
        out,
        runner: runner_config(args),
        jobs: args.jobs,
        cancel: &STOP,
        progress: !args.quiet,
        likelihood: args.likelihood,
        model_tests: args.model_tests.clone(),
    };
    let mut scorer = match args.likelihood || args.model_tests.is_some() {
        true => Some(CandleLlm::load(
            &args.model,
            &settings(args, Path::new("")).llm_options(),
        )?),
        false => None,
    };
    let scorer = scorer.as_mut().map(|l| l as &mut dyn repohop::llm::Llm);
    let study = stopped_or(study(&cfg, scorer))?;
    if args.json {
        println!("{}", serde_json::to_string(&study)?);
    } else {
        print!("{}", study_markdown(&study));
    }
    Ok(())
}

/// Line tasks: no tests to run, only EM / ES / ID-EM / ID-F1 in both definitions, of given
/// predictions or of a method's.
fn score_line_tasks(args: &EvalArgs, lines: &[tasks::LineTask]) -> Result<()> {
    if args.concurrency > 1 {
        bail!("--concurrency applies to function tasks; line tasks are completed one at a time");
    }
    if let Some(m) = &args.method {
        return run_line_method(args, m);
    }
    let Some(path) = &args.completions else {
        bail!(
            "{} holds line tasks: give --method M or score predictions with --completions FILE ({{\"id\", \"completion\"}} JSONL)",
            args.tasks.display()
        );
    };
    let s = score_lines(lines, &load_completions(path)?);
    if args.json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    println!("{} line tasks, {} without a prediction", s.total, s.missing);
    println!("| definition | EM % | ES % | ID-EM % | ID-F1 % |");
    println!("|---|---:|---:|---:|---:|");
    for (name, m) in [("CrossCodeEval", s.cceval), ("GraphCoder", s.graphcoder)] {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} |",
            100.0 * m.em,
            100.0 * m.es,
            100.0 * m.id_em,
            100.0 * m.id_f1
        );
    }
    Ok(())
}

/// Generates and scores line tasks with a line-completion method.
fn run_line_method(args: &EvalArgs, method: &str) -> Result<()> {
    use clap::ValueEnum;
    let m = LineMethod::from_str(method, true).map_err(|_| {
        anyhow::anyhow!(
            "--method {method}: line tasks take none, vanilla, repocoder, graphcoder or saracoder"
        )
    })?;
    let options = args.line.options(m);
    if !args.source_root.is_dir() {
        bail!(
            "--source-root {}: not a directory (it should hold the repositories the tasks name)",
            args.source_root.display()
        );
    }
    let embedder = if options.needs_embedder() {
        let device = repohop::embed::parse_device(&args.embed.device)?;
        Some(repohop::embed::load(&args.embed.embed_model, &device)?)
    } else {
        None
    };
    let mut llm = args.remote.llm_or(&args.model)?;
    let remote = args.remote.llm_endpoint.is_some().then(|| llm.name());
    let name = options.variant_name() + &pipelines::generator_suffix(remote, &args.model);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("eval-runs").join(name));
    install_stop_handler();
    let cfg = LineRunConfig {
        tasks_file: args.tasks.clone(),
        source_root: args.source_root.clone(),
        out: out.clone(),
        options,
        limit: args.limit,
        shard: args.shard.as_deref().map(parse_shard).transpose()?,
        cancel: &STOP,
        progress: !args.quiet,
    };
    let embedder = embedder
        .as_ref()
        .map(|e| e as &dyn repohop::embed::Embedder);
    if args.prompt_only {
        let s = stopped_or(prompt_lines(&cfg, llm.as_ref(), embedder))?;
        if args.json {
            println!("{}", serde_json::to_string(&s)?);
            return Ok(());
        }
        println!(
            "{}: the prompts of {} line tasks ({} errors) · retrieval {:.1} ms median · {:.0} s wall",
            s.method, s.total, s.errors, s.retrieve_ms_median, s.wall_seconds
        );
        print!("{}", prompt_table(&s));
        return Ok(());
    }
    let s = stopped_or(run_lines(&cfg, llm.as_mut(), embedder))?;
    if args.json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    println!(
        "{}: {} line tasks ({} run now, {} resumed, {} errors) · {:.0} s wall",
        s.method, s.total, s.ran, s.resumed, s.errors, s.wall_seconds
    );
    print!("{}", group_table(&s));
    if let Some(r) = &s.all.recall {
        println!(
            "ground-truth identifiers in the prompt: {:.1}% (in the unfinished code {:.1}%, added by retrieval {:.1}%)",
            100.0 * r.prompt,
            100.0 * r.context,
            100.0 * r.added
        );
    }
    println!(
        "retrieval {:.1} ms median per cursor (codebase build up to {:.0} ms) · generation {:.0} ms median · {:.0} prompt tokens mean",
        s.retrieve_ms_median, s.codebase_ms_max, s.generate_ms_median, s.prompt_tokens_mean
    );
    println!("(EM/ES/ID: CrossCodeEval's definitions; GC: GraphCoder's)");
    println!("run directory: {}", out.display());
    Ok(())
}

fn print_summary(s: &Summary, out: &std::path::Path) {
    println!(
        "{}: Pass@1 {:.1}% ({}/{}) · {} run now, {} resumed · {:.1} s wall, {:.1} tasks/min",
        s.method,
        100.0 * s.pass_at_1,
        s.passed,
        s.total,
        s.ran,
        s.resumed,
        s.wall_seconds,
        s.tasks_per_minute
    );
    let outcomes: Vec<String> = s.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("outcomes: {}", outcomes.join(", "));
    let report = repohop::eval::report::RunReport::new(out, s.clone());
    println!();
    print!("{}", markdown(std::slice::from_ref(&report)));
    println!();
    println!("by project:");
    for (p, sc) in &s.by_project {
        println!(
            "  {p:<30} {:>5.1}% ({}/{})",
            100.0 * sc.pass_at_1,
            sc.passed,
            sc.total
        );
    }
    println!("run directory: {}", out.display());
}

pub fn run_report(args: ReportArgs) -> Result<()> {
    if args.by_task {
        return report_by_task(&args);
    }
    let lines = args.runs.iter().filter(|d| is_line_run(d)).count();
    if lines == args.runs.len() {
        return report_lines(&args);
    }
    if lines > 0 {
        bail!("line-completion runs and function runs cannot share a report; give one kind");
    }
    if args.failures {
        let rows = failed_tasks(&args.runs)?;
        if args.json {
            println!("{}", serde_json::to_string(&rows)?);
        } else {
            print!("{}", failures_markdown(&rows));
        }
        return Ok(());
    }
    let runs = runs_or_merged(
        args.runs.as_slice(),
        args.merge,
        merge_runs,
        load_run,
        |r| r.missing.as_ref(),
    )?;
    if let Some(path) = &args.chart {
        std::fs::write(path, svg_chart(&runs))
            .with_context(|| format!("cannot write chart {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&runs)?);
    } else {
        print!("{}", markdown(&runs));
    }
    Ok(())
}

/// `report --by-task`: function runs (a run's shards joined by commas) compared task by task.
fn report_by_task(args: &ReportArgs) -> Result<()> {
    let runs: Vec<Vec<PathBuf>> = args.runs.iter().map(|r| shard_dirs(r)).collect();
    if runs.iter().flatten().any(|d| is_line_run(d)) {
        bail!("--by-task compares function runs; line runs are compared by `report` itself");
    }
    let compared = compare_by_task(&runs)?;
    if args.json {
        println!("{}", serde_json::to_string(&compared)?);
    } else {
        print!("{}", by_task_markdown(&compared));
    }
    Ok(())
}

/// The directories of one `--by-task` run: the argument itself when it names a directory,
/// else its comma-separated parts (a run's shards).
fn shard_dirs(run: &Path) -> Vec<PathBuf> {
    match run.to_str() {
        Some(s) if !run.is_dir() && s.contains(',') => s.split(',').map(PathBuf::from).collect(),
        _ => vec![run.to_path_buf()],
    }
}

/// The run directories' reports, or with `merge` the one report of them as shards (naming the
/// tasks no shard finished).
fn runs_or_merged<T>(
    dirs: &[PathBuf],
    merge: bool,
    merged: fn(&[PathBuf]) -> Result<T, repohop::eval::EvalError>,
    load: fn(&Path) -> Result<T, repohop::eval::EvalError>,
    missing: fn(&T) -> Option<&Vec<String>>,
) -> Result<Vec<T>> {
    if !merge {
        return Ok(dirs
            .iter()
            .map(|d| load(d))
            .collect::<Result<Vec<_>, _>>()?);
    }
    let one = merged(dirs)?;
    if let Some(m) = missing(&one).filter(|m| !m.is_empty()) {
        eprintln!(
            "note: {} of the task file's tasks are in no shard (first: {})",
            m.len(),
            m[0]
        );
    }
    Ok(vec![one])
}

/// `report` of line-completion runs: one run's groups, or several runs compared on the cursors
/// they all finished.
fn report_lines(args: &ReportArgs) -> Result<()> {
    if args.chart.is_some() {
        bail!("--chart draws function runs; line runs have no chart");
    }
    if args.failures {
        bail!("--failures lists function tasks; line runs are scored by match, not by tests");
    }
    let runs = runs_or_merged(
        args.runs.as_slice(),
        args.merge,
        merge_line_runs,
        load_line_run,
        |r| r.missing.as_ref(),
    )?;
    let (runs, left_out) = on_common_cursors(&runs);
    if args.json {
        println!("{}", serde_json::to_string(&runs)?);
        return Ok(());
    }
    if left_out > 0 {
        println!(
            "on the {} cursors every run finished ({left_out} finished by only some are left out)\n",
            runs[0].summary.total
        );
    }
    print!("{}", compare_table(&runs));
    if let [one] = &runs[..] {
        println!();
        print!("{}", group_table(&one.summary));
        println!("(EM/ES/ID: CrossCodeEval's definitions; GC: GraphCoder's)");
    } else {
        println!("(EM/ES/ID: CrossCodeEval's definitions)");
    }
    Ok(())
}

/// The methods' settings; the projects' vectors are kept in `vectors_dir`.
fn settings(args: &EvalArgs, vectors_dir: &Path) -> pipelines::Settings {
    pipelines::Settings {
        embed_model: args.embed.embed_model.clone(),
        embed_device: args.embed.device.clone(),
        local: !args.no_local,
        expand: args.expand,
        paper_walk: args.paper_walk,
        grounding: !args.no_grounding,
        samples: args.samples,
        select: Select::or_default(args.select, !args.no_grounding),
        prefix_reuse: !args.no_prefix_reuse,
        kv_budget_bytes: args.kv_budget_mb.map(|m| m << 20),
        format: args.prompt_format,
        ..pipelines::Settings::new(&args.model, vectors_dir)
    }
}
