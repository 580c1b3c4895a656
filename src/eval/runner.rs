//! Pass@1 for one completion: splice it into a private copy of the project and run the task's
//! tests there, each under the configured Python in the sandbox of [`sandbox`]: the copy (and
//! a private home and temp folder) the only writable trees, no network, a timeout, memory and
//! file-size limits.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::body::{self, BodySpan};
use super::locate;
use super::sandbox::{self, Exit, Limits};
use super::tasks::{DepKind, FunctionTask};
use super::EvalError;
use crate::generate::model_tests::{ModelTests, TestOutcome, TestRunner};

/// How tests are run.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The Python that has pytest and the project's test dependencies.
    pub python: PathBuf,
    /// For all of a task's tests together.
    pub timeout: Duration,
    pub memory_bytes: Option<u64>,
    /// Bytes of test output kept in each result (read from the end of the log, so a huge log
    /// costs no memory).
    pub output_tail: usize,
    /// RLIMIT_FSIZE for test processes: the largest file (the log included) they can write.
    pub file_size_bytes: Option<u64>,
    /// Let test processes reach the network; by default they get a network namespace with only
    /// their own loopback.
    pub allow_network: bool,
    /// Refuse to run tests (each task is an error) where the namespace sandbox is unavailable,
    /// instead of running them unsandboxed with a warning.
    pub require_sandbox: bool,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            python: PathBuf::from("python3"),
            timeout: Duration::from_secs(60),
            memory_bytes: Some(4 << 30),
            output_tail: 2000,
            file_size_bytes: Some(256 << 20),
            allow_network: false,
            require_sandbox: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every test run passed (a test the environment skips aside), and some test passed.
    Pass,
    /// A test failed, or the body was trivial (`pass`).
    Fail,
    /// The tests ran past the timeout; the process group was killed.
    Timeout,
    /// The harness could not run the task (target not found, Python missing, generation error).
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// The verdict on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub namespace: String,
    pub project: String,
    pub kinds: Vec<DepKind>,
    pub outcome: Outcome,
    /// The first test that did not pass, if any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_test: Option<String>,
    pub tests_run: usize,
    pub test_seconds: f64,
    /// Why, in words, when not `pass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The tail of the last test run's output.
    #[serde(default)]
    pub output_tail: String,
}

impl TaskResult {
    pub fn new(task: &FunctionTask, outcome: Outcome, message: Option<String>) -> Self {
        TaskResult {
            namespace: task.namespace.clone(),
            project: task.project_path.clone(),
            kinds: task.dependency.kinds(),
            outcome,
            failed_test: None,
            tests_run: 0,
            test_seconds: 0.0,
            message,
            output_tail: String::new(),
        }
    }
}

/// The file text and located body of a task's target in the (unmodified) source tree.
pub fn read_target(
    task: &FunctionTask,
    source_root: &Path,
) -> Result<(String, BodySpan), EvalError> {
    let path = source_root.join(&task.completion_path);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        EvalError::task(
            &task.namespace,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    // Recorded positions first; when they don't describe the target (shifted file, native
    // task without positions), the repository model finds it by namespace.
    let span = match body::locate(task, &text) {
        Ok(span) => span,
        Err(by_lines) => locate::locate_by_namespace(task, source_root, &text).map_err(|e| {
            EvalError::task(
                &task.namespace,
                format!("{}; by namespace: {}", by_lines.reason(), e.reason()),
            )
        })?,
    };
    Ok((text, span))
}

/// Scores one completion. Never touches `source_root`: everything happens in a temporary copy
/// that is removed when done (also on timeout or cancellation).
pub fn run_task(
    task: &FunctionTask,
    completion: &str,
    source_root: &Path,
    cfg: &RunnerConfig,
    cancel: &AtomicBool,
) -> TaskResult {
    let started = Instant::now();
    let mut result = match try_run(task, completion, source_root, cfg, cancel) {
        Ok(r) => r,
        Err(e) => TaskResult::new(task, Outcome::Error, Some(e.to_string())),
    };
    result.test_seconds = started.elapsed().as_secs_f64();
    result
}

fn try_run(
    task: &FunctionTask,
    completion: &str,
    source_root: &Path,
    cfg: &RunnerConfig,
    cancel: &AtomicBool,
) -> Result<TaskResult, EvalError> {
    if body::is_trivial(completion) {
        return Ok(TaskResult::new(
            task,
            Outcome::Fail,
            Some("body is empty or only `pass`".into()),
        ));
    }
    let copy = Spliced::new(task, completion, source_root, cfg)?;
    let deadline = Instant::now() + cfg.timeout;
    let mut result = TaskResult::new(task, Outcome::Pass, None);
    // A test the environment skips (a missing optional package) costs nothing while another
    // passes; a task none of whose tests passed was never checked.
    let (mut any_passed, mut skipped, mut why) = (false, 0, None);
    for test in &task.tests {
        let exit = copy.pytest(task, test, deadline, cfg, cancel)?;
        result.tests_run += 1;
        result.output_tail = sandbox::tail(&copy.log, cfg.output_tail);
        let verdict = match exit {
            Exit::Code(0) => match copy.report() {
                Report::Passed => {
                    any_passed = true;
                    continue;
                }
                Report::NonePassed { skipped: n, reason } => {
                    skipped += n;
                    why = why.or(reason);
                    continue;
                }
                Report::Missing => (
                    Outcome::Fail,
                    format!("{NO_REPORT} {test} exited 0 before pytest finished (the process was ended, e.g. by os._exit)"),
                ),
            },
            Exit::Code(1) => (Outcome::Fail, format!("test {test} failed")),
            Exit::Code(c) => (
                Outcome::Fail,
                format!("pytest exited with {c} on {test} (collection error, usage error or no such test)"),
            ),
            Exit::Signal(s) => (Outcome::Fail, format!("test process killed by signal {s} on {test}")),
            Exit::TimedOut => (
                Outcome::Timeout,
                format!("timed out after {:.0} s in {test}", cfg.timeout.as_secs_f64()),
            ),
            Exit::Cancelled => return Err(EvalError::task(&task.namespace, "cancelled")),
        };
        result.outcome = verdict.0;
        result.message = Some(verdict.1);
        result.failed_test = Some(test.clone());
        return Ok(result);
    }
    if !any_passed {
        result.outcome = Outcome::Fail;
        let why = why.map(|w| format!(" (first: {w})")).unwrap_or_default();
        result.message = Some(format!(
            "{NONE_PASSED} {} test run(s) exited 0 with {skipped} test(s) skipped or expected to fail{why}",
            result.tests_run
        ));
    }
    Ok(result)
}

/// Where model-written tests go in the copy: the project root, where `python -m pytest` puts
/// the project's packages on the path.
const MODEL_TESTS_FILE: &str = "test_repohop_model.py";
/// All of one answer's model-written tests together: they are small, and an answer that loops
/// must not hold the pipeline for the task timeout once per test.
const MODEL_TESTS_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs model-written tests (`--select tests`) against `completion` as the target's body, in
/// the sandbox [`run_task`] uses: per test of `tests.names`, how it ended.
pub fn run_model_tests(
    task: &FunctionTask,
    completion: &str,
    source_root: &Path,
    cfg: &RunnerConfig,
    tests: &ModelTests,
    cancel: &AtomicBool,
) -> Result<Vec<TestOutcome>, EvalError> {
    let runner = TaskTests {
        task,
        source_root,
        cfg,
        cancel,
    };
    runner.outcomes(completion, tests).map(|(each, _)| each)
}

/// The exception a failed pytest run's `output` reports, and the line naming it.
pub fn pytest_exception(output: &str) -> Option<(String, String)> {
    let summary = || summary_lines(output);
    let e_lines = || output.lines().filter_map(|l| l.strip_prefix("E "));
    let name = summary().chain(e_lines()).find_map(exception_name)?;
    // pytest cuts the summary line to the terminal's width: the detail is the first `E` line
    // naming the same exception, when there is one.
    let detail = e_lines()
        .chain(summary())
        .find(|l| exception_name(l).as_deref() == Some(name.as_str()))
        .unwrap_or_default();
    Some((name, detail.trim().to_string()))
}

/// What follows ` - ` on pytest's short summary lines (`FAILED test - KeyError: 'x'`).
fn summary_lines(output: &str) -> impl Iterator<Item = &str> {
    output.lines().filter_map(|l| {
        let rest = l
            .strip_prefix("FAILED ")
            .or_else(|| l.strip_prefix("ERROR "))?;
        Some(rest.split_once(" - ")?.1)
    })
}

/// The exception a pytest report line starts with: `KeyError: 'x'` gives `KeyError`,
/// `mod.Custom` gives `Custom`, `zlib.error: ...` gives `zlib.error` (a lower-case name says
/// little without its module), a bare `assert ...` (pytest's
/// rewritten assertion) gives `AssertionError`; `None` when the line starts with no such name.
fn exception_name(line: &str) -> Option<String> {
    let line = line.trim();
    if line == "assert" || line.starts_with("assert ") {
        return Some("AssertionError".into());
    }
    let end = line
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(line.len());
    let rest = &line[end..];
    if !(rest.is_empty() || rest.starts_with(':')) {
        return None;
    }
    let (module, name) = line[..end].rsplit_once('.').unwrap_or(("", &line[..end]));
    // A lower-case class counts with its module and message (`zlib.error: ...`).
    let lower_ok = !module.is_empty() && rest.starts_with(':');
    let ok = name.starts_with(|c: char| c.is_ascii_uppercase())
        || (lower_ok && name.starts_with(|c: char| c.is_ascii_lowercase()));
    if !ok {
        return None;
    }
    Some(if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        let module = module.rsplit('.').next().unwrap_or(module);
        format!("{module}.{name}")
    } else {
        name.to_string()
    })
}

/// How a failed task's message begins when its test runs exited 0 but no test passed.
pub const NONE_PASSED: &str = "no test passed:";
/// How it begins when a test run exited 0 without pytest's report.
pub const NO_REPORT: &str = "no pytest report:";

/// What a pytest run that exited 0 checked, from its JUnit report. The exit status alone says
/// too little: `pytest.skip()` or an expected failure exits 0 having checked nothing, and code
/// that calls `os._exit(0)` exits 0 before any test has finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// At least one test passed.
    Passed,
    /// Tests ran and none passed: `skipped` of them were skipped or expected to fail, the
    /// first for `reason` (pytest's message, e.g. `could not import 'yaml'`).
    NonePassed {
        skipped: usize,
        reason: Option<String>,
    },
    /// No readable report: the process ended before pytest finished its session.
    Missing,
}

impl Report {
    /// Reads pytest's JUnit XML (`--junitxml`): a test case passed when it holds no
    /// `failure`, `error` or `skipped` element.
    pub fn from_junit(xml: &str) -> Report {
        let Ok(doc) = roxmltree::Document::parse(xml) else {
            return Report::Missing;
        };
        let (mut passed, mut skipped, mut reason) = (0, 0, None);
        for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
            let child = |tag: &str| case.children().find(|c| c.has_tag_name(tag));
            if let Some(skip) = child("skipped") {
                skipped += 1;
                let message = skip.attribute("message").filter(|m| !m.is_empty());
                reason = reason.or(message.map(str::to_string));
            } else if child("failure").is_none() && child("error").is_none() {
                passed += 1;
            }
        }
        if passed > 0 {
            Report::Passed
        } else {
            Report::NonePassed { skipped, reason }
        }
    }
}

/// The largest report read; a test node's is a few KiB (a planted huge file is no report).
const REPORT_BYTES: u64 = 64 << 20;

/// [`run_model_tests`] for one task, as generation's `--select tests` calls it.
pub struct TaskTests<'a> {
    pub task: &'a FunctionTask,
    pub source_root: &'a Path,
    pub cfg: &'a RunnerConfig,
    pub cancel: &'a AtomicBool,
}

impl TaskTests<'_> {
    /// [`run_model_tests`], with the output's tail of the first test that did not pass.
    fn outcomes(
        &self,
        completion: &str,
        tests: &ModelTests,
    ) -> Result<(Vec<TestOutcome>, Option<String>), EvalError> {
        let (task, cfg, cancel) = (self.task, self.cfg, self.cancel);
        if body::is_trivial(completion) {
            return Ok((vec![TestOutcome::Failed; tests.names.len()], None));
        }
        let copy = Spliced::new(task, completion, self.source_root, cfg)?;
        sandbox::create_no_follow(
            &copy.root,
            Path::new(MODEL_TESTS_FILE),
            tests.code.as_bytes(),
        )
        .map_err(|e| EvalError::task(&task.namespace, format!("cannot write the tests: {e}")))?;
        let deadline = Instant::now() + cfg.timeout.min(MODEL_TESTS_TIMEOUT);
        let mut passed = Vec::new();
        let mut failure = None;
        for name in &tests.names {
            let id = format!("{MODEL_TESTS_FILE}::{name}");
            let exit = copy.pytest(task, &id, deadline, cfg, cancel)?;
            let tail = || sandbox::tail(&copy.log, cfg.output_tail);
            let outcome = match exit {
                Exit::Cancelled => return Err(EvalError::task(&task.namespace, "cancelled")),
                Exit::Code(0) if copy.report() == Report::Passed => TestOutcome::Passed,
                // A failed test: an assertion, or a `pytest.raises` that saw nothing (`Failed`).
                Exit::Code(1) => match pytest_exception(&tail()) {
                    Some((name, _)) if name == "AssertionError" || name == "Failed" => {
                        TestOutcome::Failed
                    }
                    _ => TestOutcome::Raised,
                },
                _ => TestOutcome::Raised,
            };
            if outcome != TestOutcome::Passed && failure.is_none() {
                failure = Some(tail());
            }
            passed.push(outcome);
        }
        Ok((passed, failure))
    }
}

impl TestRunner for TaskTests<'_> {
    fn run(&self, body: &str, tests: &ModelTests) -> Result<Vec<TestOutcome>, String> {
        self.outcomes(body, tests)
            .map(|(each, _)| each)
            .map_err(|e| e.to_string())
    }

    fn failure(&self, body: &str, tests: &ModelTests) -> Result<Option<String>, String> {
        self.outcomes(body, tests)
            .map(|(_, failure)| failure)
            .map_err(|e| e.to_string())
    }
}

/// A private copy of a task's project with a completion spliced in, and what running pytest
/// there needs. Removed when dropped.
struct Spliced {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    python: PathBuf,
    env: Vec<(String, String)>,
    writable: Vec<PathBuf>,
    log: PathBuf,
    /// pytest's JUnit report of the last run, in the private temp folder (tests can write
    /// there, so it is read without following links and removed before each run).
    report: PathBuf,
}

impl Spliced {
    fn new(
        task: &FunctionTask,
        completion: &str,
        source_root: &Path,
        cfg: &RunnerConfig,
    ) -> Result<Spliced, EvalError> {
        let availability = sandbox::availability();
        if !availability.sandboxed() {
            if cfg.require_sandbox {
                return Err(EvalError::task(
                    &task.namespace,
                    format!(
                        "the sandbox is required but unavailable: {}",
                        availability.reason.as_deref().unwrap_or("no namespaces")
                    ),
                ));
            }
            sandbox::warn_unsandboxed();
        }
        let (text, span) = read_target(task, source_root)?;
        let project = source_root.join(&task.project_path);
        let tmp = tempfile::Builder::new()
            .prefix("repohop-eval-")
            .tempdir_in(sandbox::work_base())
            .map_err(|e| {
                EvalError::task(&task.namespace, format!("cannot make a temp dir: {e}"))
            })?;
        let copy = tmp.path().join("project");
        sandbox::copy_project(&project, &copy).map_err(|e| {
            EvalError::task(
                &task.namespace,
                format!(
                    "cannot copy {} to {}: {e}",
                    project.display(),
                    copy.display()
                ),
            )
        })?;
        // Never through a symlink: the completion path and its folders must be real in the copy.
        sandbox::write_no_follow(
            &copy,
            Path::new(task.file_in_project()),
            body::splice(&text, span, completion).as_bytes(),
        )
        .map_err(|e| {
            EvalError::task(
                &task.namespace,
                format!("cannot write the completion into the copy: {e}"),
            )
        })?;
        let home = tmp.path().join("home");
        let scratch = tmp.path().join("tmp");
        for d in [&home, &scratch] {
            std::fs::create_dir_all(d).map_err(|e| EvalError::io(d, e))?;
        }
        let python = resolve_python(&cfg.python).ok_or_else(|| {
            EvalError::task(
                &task.namespace,
                format!(
                    "Python `{}` not found; pass --python /path/to/venv/bin/python",
                    cfg.python.display()
                ),
            )
        })?;
        let mut env = scrubbed_env(&home, &scratch);
        if let Some(dir) = package_root(&copy, Path::new(task.file_in_project())) {
            env.push(("PYTHONPATH".into(), dir.display().to_string()));
        }
        // The log stays outside the writable trees; the child writes it only through its fds.
        let log = tmp.path().join("pytest.log");
        let report = scratch.join("repohop-junit.xml");
        Ok(Spliced {
            report,
            writable: vec![copy.clone(), home, scratch],
            root: copy,
            python,
            env,
            log,
            _tmp: tmp,
        })
    }

    /// `python -m pytest -x -q TEST` (no colour, no cache) in the copy, until `deadline`.
    fn pytest(
        &self,
        task: &FunctionTask,
        test: &str,
        deadline: Instant,
        cfg: &RunnerConfig,
        cancel: &AtomicBool,
    ) -> Result<Exit, EvalError> {
        let limits = Limits {
            timeout: deadline.saturating_duration_since(Instant::now()),
            memory_bytes: cfg.memory_bytes,
            file_size_bytes: cfg.file_size_bytes,
            writable: self.writable.clone(),
            network: cfg.allow_network,
        };
        // `--color=no` over a project's `addopts`: the causes are read from this log.
        let junit = format!("--junitxml={}", self.report.display());
        let args: Vec<String> = [
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "--color=no",
            &junit,
            test,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // The last run's report (or whatever a test left at its name) must not count for this one.
        match std::fs::remove_file(&self.report) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(EvalError::io(&self.report, e))
            }
            _ => {}
        }
        sandbox::run_limited(
            &self.python,
            &args,
            &self.root,
            &self.env,
            &limits,
            &self.log,
            cancel,
        )
        .map_err(|e| {
            EvalError::task(
                &task.namespace,
                format!("cannot run {}: {e}", self.python.display()),
            )
        })
    }

    /// The last run's [`Report`]. The file is the tests' to write, so never through a link,
    /// never blocking on a FIFO, and only a regular file of bounded size counts.
    fn report(&self) -> Report {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.report);
        let Ok(file) = file else {
            return Report::Missing;
        };
        if !file
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() <= REPORT_BYTES)
        {
            return Report::Missing;
        }
        let mut xml = String::new();
        match file.take(REPORT_BYTES).read_to_string(&mut xml) {
            Ok(_) => Report::from_junit(&xml),
            Err(_) => Report::Missing,
        }
    }
}

/// The folder the target's top package is imported from, when that is not the project's root
/// (a src layout: `src/pkg/mod.py` gives `src`). It goes on the tests' PYTHONPATH, ahead of the
/// Python's own paths: a project installed in editable mode (a `.pth` or an import hook naming
/// the original tree) would otherwise import the original file, not the copy with the answer.
fn package_root(copy: &Path, file: &Path) -> Option<PathBuf> {
    let mut dir = copy.join(file).parent()?.to_path_buf();
    let is_package = |d: &Path| d.join("__init__.py").is_file();
    if !is_package(&dir) {
        return None;
    }
    while dir != copy && is_package(&dir) {
        dir = dir.parent()?.to_path_buf();
    }
    (dir != copy).then_some(dir)
}

/// The caller's `PATH` (how the Python finds its tools), or the usual one.
fn host_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

/// Only what pytest needs; nothing from the caller's environment leaks into generated code.
fn scrubbed_env(home: &Path, tmp: &Path) -> Vec<(String, String)> {
    let path = host_path();
    let lang = std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), home.display().to_string()),
        ("TMPDIR".into(), tmp.display().to_string()),
        ("LANG".into(), lang),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("PYTHONHASHSEED".into(), "0".into()),
    ]
}

/// A bare name is looked up on PATH (the child's environment is scrubbed before exec).
/// Fails when `python` is missing or cannot import pytest as the tests would run it (no
/// user site: the sandbox gives each test a private home), before a run spends hours
/// generating answers that every test would then "fail" with `No module named pytest`.
pub fn check_python(python: &Path) -> Result<(), EvalError> {
    let found = resolve_python(python).ok_or_else(|| {
        EvalError::Invalid(format!(
            "Python `{}` not found; pass --python /path/to/venv/bin/python",
            python.display()
        ))
    })?;
    let path = host_path();
    let out = std::process::Command::new(&found)
        .args(["-c", "import pytest"])
        .env_clear()
        .env("PATH", path)
        .env("PYTHONNOUSERSITE", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| EvalError::Invalid(format!("cannot run {}: {e}", found.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .trim()
        .lines()
        .last()
        .unwrap_or("it exited with an error");
    Err(EvalError::Invalid(format!(
        "{} cannot import pytest ({why}): pass --python with the Python of a virtual \
         environment that has pytest and the project's test dependencies",
        found.display()
    )))
}

fn resolve_python(python: &Path) -> Option<PathBuf> {
    if python.components().count() > 1 {
        // Absolute, not canonical: a venv's python is a symlink that must stay one.
        return python
            .is_file()
            .then(|| std::path::absolute(python).ok())
            .flatten();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(python))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_passes_only_when_a_test_case_passed() {
        let suite = |cases: &str| {
            format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><testsuites><testsuite name=\"pytest\" \
                 tests=\"2\">{cases}</testsuite></testsuites>"
            )
        };
        let none = |skipped, reason: Option<&str>| Report::NonePassed {
            skipped,
            reason: reason.map(str::to_string),
        };
        let ok = r#"<testcase classname="t" name="test_ok" time="0.0" />"#;
        let skip = r#"<testcase name="test_s"><skipped type="pytest.skip" message="x">t.py:3: x</skipped></testcase>"#;
        let xfail =
            r#"<testcase name="test_x"><skipped type="pytest.xfail" message="" /></testcase>"#;
        let failed =
            r#"<testcase name="test_f"><failure message="assert 0">...</failure></testcase>"#;
        let cases = [
            (suite(ok), Report::Passed),
            (suite(&format!("{skip}{ok}")), Report::Passed),
            (suite(skip), none(1, Some("x"))),
            (suite(&format!("{xfail}{skip}")), none(2, Some("x"))),
            (suite(failed), none(0, None)),
            (suite(""), none(0, None)),
            // pytest before 5.1 wrote a bare `testsuite` root.
            (format!("<testsuite>{ok}</testsuite>"), Report::Passed),
            // A report cut off mid-write is no report.
            (suite(ok)[..60].to_string(), Report::Missing),
            (String::new(), Report::Missing),
        ];
        for (xml, want) in cases {
            assert_eq!(Report::from_junit(&xml), want, "{xml}");
        }
    }
}
