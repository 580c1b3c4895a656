//! Pass@1 and its splits, and dependency recall of a method's context.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::runner::{pytest_exception, Outcome, TaskResult, NONE_PASSED, NO_REPORT};
use super::tasks::{DepKind, Dependency};

/// Passed out of total, and the ratio.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub passed: usize,
    pub total: usize,
    pub pass_at_1: f64,
}

impl Score {
    fn add(&mut self, passed: bool) {
        self.total += 1;
        self.passed += passed as usize;
        self.pass_at_1 = self.passed as f64 / self.total as f64;
    }
}

/// Pass@1 overall, by project and by dependency kind, plus outcome counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PassSummary {
    pub overall: Score,
    pub by_project: BTreeMap<String, Score>,
    /// Keys `none`, `intra_class`, `intra_file`, `cross_file`; a task counts under each it has.
    pub by_kind: BTreeMap<String, Score>,
    pub outcomes: BTreeMap<String, usize>,
    /// Tasks that did not pass, by [`Failure::cause`].
    pub causes: BTreeMap<String, usize>,
}

pub fn pass_summary<'a>(results: impl IntoIterator<Item = &'a TaskResult>) -> PassSummary {
    let mut s = PassSummary::default();
    for k in DepKind::ALL {
        s.by_kind.insert(k.as_str().to_string(), Score::default());
    }
    for r in results {
        let passed = r.outcome == Outcome::Pass;
        s.overall.add(passed);
        s.by_project
            .entry(r.project.clone())
            .or_default()
            .add(passed);
        for k in &r.kinds {
            s.by_kind
                .entry(k.as_str().to_string())
                .or_default()
                .add(passed);
        }
        *s.outcomes
            .entry(r.outcome.as_str().to_string())
            .or_default() += 1;
        if let Some(f) = failure(r) {
            *s.causes.entry(f.cause).or_default() += 1;
        }
    }
    s
}

/// Why a task did not pass: a one-word cause and the line it was read from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The exception its failing test ended with (`NameError`, `AssertionError`, pytest's
    /// `Failed` for a `raises` that did not raise, ...), read from pytest's short summary line
    /// or else its first `E` line; `timeout`; `empty body` (nothing ran); `generation failed`
    /// (the method gave no answer, e.g. an empty infilled body); `harness error` (the task could
    /// not be run); `skipped` (pytest exited 0 and no test passed); `exited early` (it exited 0
    /// with no report: the process was ended); `test failed` when the output names no
    /// exception.
    pub cause: String,
    /// That output line (at most [`DETAIL_CHARS`] characters), or the harness's message.
    pub detail: String,
}

/// How the message of a task whose method gave no answer begins.
pub const GENERATION_FAILED: &str = "generation failed:";

/// Most characters of a failure's detail line.
pub const DETAIL_CHARS: usize = 200;

/// A result in one word: `pass`, or the cause of its [`failure`].
pub fn verdict(r: &TaskResult) -> String {
    failure(r).map_or_else(|| "pass".to_string(), |f| f.cause)
}

/// Why `r` did not pass; `None` for a pass. Read from the saved output, so older runs get
/// causes too.
pub fn failure(r: &TaskResult) -> Option<Failure> {
    let message = || r.message.clone().unwrap_or_default();
    let (cause, detail) = match r.outcome {
        Outcome::Pass => return None,
        Outcome::Timeout => ("timeout".to_string(), message()),
        // The message says which (see `eval::batch`): read back, older runs get it too.
        Outcome::Error if message().starts_with(GENERATION_FAILED) => {
            ("generation failed".to_string(), message())
        }
        Outcome::Error => ("harness error".to_string(), message()),
        Outcome::Fail if r.tests_run == 0 => ("empty body".to_string(), message()),
        Outcome::Fail if message().starts_with(NONE_PASSED) => ("skipped".to_string(), message()),
        Outcome::Fail if message().starts_with(NO_REPORT) => {
            ("exited early".to_string(), message())
        }
        Outcome::Fail => match pytest_exception(&r.output_tail) {
            Some((name, detail)) => (name, detail),
            None => ("test failed".to_string(), message()),
        },
    };
    let detail = detail.chars().take(DETAIL_CHARS).collect();
    Some(Failure { cause, detail })
}

/// Share of the task's dependency names found in a method's final context (qualified names).
/// A context entry covers a dependency when it names it or encloses it (`pkg.mod.Class` covers
/// `pkg.mod.Class.method`). `None` when the task has no dependencies.
pub fn dependency_recall(context: &[String], dependency: &Dependency) -> Option<f64> {
    let wanted = dependency.names();
    if wanted.is_empty() {
        return None;
    }
    let have: HashSet<&str> = context.iter().map(String::as_str).collect();
    let found = wanted
        .iter()
        .filter(|dep| {
            have.contains(*dep)
                || dep
                    .match_indices('.')
                    .any(|(i, _)| have.contains(&dep[..i]))
        })
        .count();
    Some(found as f64 / wanted.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(project: &str, kinds: Vec<DepKind>, outcome: Outcome) -> TaskResult {
        TaskResult {
            namespace: "x".into(),
            project: project.into(),
            kinds,
            outcome,
            failed_test: None,
            tests_run: 1,
            test_seconds: 0.0,
            message: None,
            output_tail: String::new(),
        }
    }

    #[test]
    fn splits_by_project_and_kind() {
        use DepKind::*;
        let rs = [
            result("a", vec![None], Outcome::Pass),
            result("a", vec![IntraClass, CrossFile], Outcome::Fail),
            result("b", vec![IntraFile, CrossFile], Outcome::Pass),
            result("b", vec![CrossFile], Outcome::Timeout),
        ];
        let s = pass_summary(&rs);
        assert_eq!((s.overall.passed, s.overall.total), (2, 4));
        assert_eq!(s.overall.pass_at_1, 0.5);
        assert_eq!(s.by_project["a"].passed, 1);
        assert_eq!(s.by_project["b"].total, 2);
        assert_eq!(
            (
                s.by_kind["cross_file"].passed,
                s.by_kind["cross_file"].total
            ),
            (1, 3)
        );
        assert_eq!(s.by_kind["intra_class"].pass_at_1, 0.0);
        assert_eq!(s.by_kind["none"].pass_at_1, 1.0);
        assert_eq!(s.outcomes["timeout"], 1);
        assert_eq!(s.causes["timeout"], 1);
        assert_eq!(s.causes.values().sum::<usize>(), 2);
    }

    #[test]
    fn a_failure_is_named_by_the_exception_its_test_ended_with() {
        let fail = |tail: &str| {
            let mut r = result("a", vec![], Outcome::Fail);
            r.output_tail = tail.into();
            failure(&r).map(|f| f.cause)
        };
        // pytest's short summary line wins over earlier `E` lines.
        let tail = "E       KeyError: 'x'\n\nboltons/x.py:3: KeyError\n\
                    =========================== short test summary info ===\n\
                    FAILED tests/t.py::test_a - KeyError: 'x'\n1 failed in 0.1s\n";
        assert_eq!(fail(tail).as_deref(), Some("KeyError"));
        let mut r = result("a", vec![], Outcome::Fail);
        r.output_tail = tail.into();
        assert_eq!(failure(&r).unwrap().detail, "KeyError: 'x'");
        // The summary line cut short: the name from it, the whole line from the `E` lines.
        r.output_tail = "E   TypeError: 'months' is an invalid keyword argument\n\
                         FAILED tests/t.py::test_d - TypeError: 'mon...\n"
            .into();
        let f = failure(&r).unwrap();
        assert_eq!(f.cause, "TypeError");
        assert_eq!(
            f.detail,
            "TypeError: 'months' is an invalid keyword argument"
        );
        let cases = [
            // A lower-case class with its module; a rewritten assertion, with and without the
            // summary line; an import that fails at collection; a module-qualified exception;
            // a `pytest.raises` that did not raise.
            (
                "FAILED tests/t.py::test_e - zlib.error: Error -3 while decompressing\n",
                "zlib.error",
            ),
            ("E   pkg.socket.timeout: timed out\n", "socket.timeout"),
            (
                "E       assert 7 == 8\n\ntests/t.py:15: AssertionError\n",
                "AssertionError",
            ),
            (
                "FAILED tests/t.py::test_b - assert (b'78', False) == (b'78', True)\n",
                "AssertionError",
            ),
            (
                "ERROR tests/t.py - NameError: name 'cls' is not defined\n",
                "NameError",
            ),
            (
                "E   json.decoder.JSONDecodeError: Expecting value\n",
                "JSONDecodeError",
            ),
            (
                "FAILED tests/t.py::test_c - Failed: DID NOT RAISE <class 'ValueError'>\n",
                "Failed",
            ),
            // Prose or lower-case words are not exceptions.
            (
                "E   where 3 = len([1, 2, 3])\nsomething Broke here\n",
                "test failed",
            ),
        ];
        for (tail, cause) in cases {
            assert_eq!(fail(tail).as_deref(), Some(cause), "{tail}");
        }
        let mut empty = result("a", vec![], Outcome::Fail);
        empty.tests_run = 0;
        empty.message = Some("body is empty or only `pass`".into());
        let f = failure(&empty).unwrap();
        assert_eq!(
            (f.cause.as_str(), f.detail.as_str()),
            ("empty body", "body is empty or only `pass`")
        );
        let mut error = result("a", vec![], Outcome::Error);
        error.message = Some("the repository could not be copied".into());
        assert_eq!(failure(&error).unwrap().cause, "harness error");
        error.message = Some(format!(
            "{GENERATION_FAILED} the model's answer holds no code"
        ));
        assert_eq!(failure(&error).unwrap().cause, "generation failed");
        let mut unchecked = result("a", vec![], Outcome::Fail);
        unchecked.message = Some(format!("{NONE_PASSED} t.py::test_a ended with 1 skipped"));
        assert_eq!(failure(&unchecked).unwrap().cause, "skipped");
        unchecked.message = Some(format!("{NO_REPORT} t.py::test_a exited 0 before ..."));
        assert_eq!(failure(&unchecked).unwrap().cause, "exited early");
        assert_eq!(failure(&result("a", vec![], Outcome::Pass)), None);
    }

    #[test]
    fn recall_counts_named_or_enclosing_context() {
        let dep = Dependency {
            intra_class: vec!["p.m.C.a".into()],
            intra_file: vec!["p.m.f".into()],
            cross_file: vec!["p.n.g".into(), "p.n.K.h".into()],
        };
        let ctx = vec![
            "p.m.f".to_string(),
            "p.n.K".to_string(),
            "p.m.Cx".to_string(),
        ];
        assert_eq!(dependency_recall(&ctx, &dep), Some(0.5));
        assert_eq!(dependency_recall(&[], &dep), Some(0.0));
        assert_eq!(dependency_recall(&ctx, &Dependency::default()), None);
    }
}
