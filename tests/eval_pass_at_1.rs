//! Pass@1 on the fixture project, through the CLI, with real pytest runs.

mod eval_common;
use eval_common::*;

#[test]
fn reference_bodies_pass_and_not_implemented_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("ref");
    let s = summary(&eval(&run, &["--method", "reference", "--jobs", "2"]));
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(s["pass_at_1"], 1.0);
    assert_eq!(s["by_kind"]["intra_class"]["total"], 2);
    assert_eq!(s["by_kind"]["cross_file"]["passed"], 1);
    assert_eq!(s["by_kind"]["none"]["total"], 1);
    assert_eq!(s["by_project"]["Demo/calc"]["passed"], 4);
    // The reference completion is the body as it stands, in DevEval's completions format.
    let lines = std::fs::read_to_string(run.join("completions.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["namespace"], "calc.ops.add");
    assert_eq!(first["completion"], "    return a + b\n");

    let s = summary(&eval(
        &tmp.path().join("ni"),
        &["--method", "not-implemented"],
    ));
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(0), Some(4))
    );
    assert_eq!(s["outcomes"]["fail"], 4);
}

#[test]
fn wrong_pass_and_error_bodies_fail_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[
            // Dedented differently from the file: re-indented to `indent`, so it still passes.
            ("calc.ops.add", "return a + b"),
            ("calc.ops.scale", "    return [v / total for v in values]\n"),
            ("calc.ops.Stack.push", "        pass\n"),
            ("calc.ops.Stack.pop", "return self.items.pop(\n"),
        ],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(&run, &["--completions", file.to_str().unwrap()]));
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(1), Some(4))
    );
    let add = result(&run, "calc.ops.add");
    assert_eq!(add["outcome"], "pass");
    let scale = result(&run, "calc.ops.scale");
    assert_eq!(scale["outcome"], "fail");
    assert_eq!(scale["failed_test"], "tests/test_ops.py::test_scale");
    assert!(scale["output_tail"]
        .as_str()
        .unwrap()
        .contains("ZeroDivisionError"));
    let push = result(&run, "calc.ops.Stack.push");
    assert_eq!(push["outcome"], "fail");
    assert_eq!(push["tests_run"], 0);
    assert!(push["message"].as_str().unwrap().contains("only `pass`"));
    // A syntax error fails the first test (collection error).
    let pop = result(&run, "calc.ops.Stack.pop");
    assert_eq!(pop["outcome"], "fail");
    assert_eq!(pop["failed_test"], "tests/test_ops.py::test_push");
}

/// pytest exits 0 when its tests are skipped or expected to fail, and a body that calls
/// `os._exit(0)` ends the run with 0 before any test finishes: none of these is a pass.
#[test]
fn a_body_that_skips_or_ends_the_run_early_does_not_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[
            ("calc.ops.add", "import os\nos._exit(0)\n"),
            (
                "calc.ops.scale",
                "import pytest\npytest.skip('not today')\n",
            ),
            (
                "calc.ops.Stack.push",
                "import pytest\npytest.xfail('later')\n",
            ),
            // The one body that does the work passes.
            (
                "calc.ops.Stack.pop",
                "return self.items.pop() if self.items else None\n",
            ),
        ],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(&run, &["--completions", file.to_str().unwrap()]));
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(1), Some(4)),
        "{s}"
    );
    let cause = |ns: &str| {
        let r = result(&run, ns);
        assert_eq!(r["outcome"], "fail", "{r}");
        r["message"].as_str().unwrap().to_string()
    };
    assert!(cause("calc.ops.add").starts_with("no pytest report:"));
    assert!(cause("calc.ops.scale")
        .ends_with("1 test(s) skipped or expected to fail (first: not today)"));
    assert!(cause("calc.ops.Stack.push").starts_with("no test passed:"));
    assert_eq!(result(&run, "calc.ops.Stack.pop")["outcome"], "pass");
    assert_eq!(s["causes"]["skipped"], 2, "{s}");
    assert_eq!(s["causes"]["exited early"], 1, "{s}");
}

#[test]
fn infinite_loop_times_out_and_the_next_task_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[
            ("calc.ops.add", "while True:\n    pass\n"),
            (
                "calc.ops.scale",
                "return [ratio(v, total) for v in values]\n",
            ),
        ],
    );
    let run = tmp.path().join("run");
    let started = std::time::Instant::now();
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "2",
            "--timeout",
            "8",
        ],
    ));
    // 8 s: the loop is cut there, while a correct body has time to start pytest on a loaded
    // machine.
    assert!(started.elapsed().as_secs() < 60);
    assert_eq!(s["outcomes"]["timeout"], 1);
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(1), Some(2))
    );
    let add = result(&run, "calc.ops.add");
    assert_eq!(add["outcome"], "timeout");
    assert!(add["message"].as_str().unwrap().contains("timed out"));
    let secs = add["test_seconds"].as_f64().unwrap();
    assert!((8.0..20.0).contains(&secs), "{secs}");
    assert_eq!(result(&run, "calc.ops.scale")["outcome"], "pass");
}

#[test]
fn missing_completion_is_an_error_not_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(tmp.path(), &[("calc.ops.add", "return a + b\n")]);
    let run = tmp.path().join("run");
    let s = summary(&eval(&run, &["--completions", file.to_str().unwrap()]));
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(s["outcomes"]["error"], 3);
    let msg = result(&run, "calc.ops.scale")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("no completion for this namespace"), "{msg}");
}

/// A Python that cannot run the tests stops the run before any task, saying why, instead of
/// every task "failing" with `No module named pytest`; `generate --python` alike.
#[test]
fn a_python_without_pytest_is_refused_before_any_task() {
    let tmp = tempfile::tempdir().unwrap();
    let venv = tmp.path().join("bare");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let missing = tmp.path().join("nowhere/bin/python");
    for (python, why) in [
        (
            venv.join("bin/python"),
            "cannot import pytest (ModuleNotFoundError",
        ),
        (missing, "not found; pass --python"),
    ] {
        let run = tmp.path().join("run");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
            .args(["eval", "--method", "reference", "--tasks"])
            .arg(fixture().join("tasks.jsonl"))
            .arg("--source-root")
            .arg(fixture().join("Source_Code"))
            .arg("--python")
            .arg(&python)
            .arg("--out")
            .arg(&run)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why), "{stderr}");
        assert!(
            !run.join("tasks").exists(),
            "a task ran with {}",
            python.display()
        );
        // `generate --python` (the docstring's examples, `--select tests`) alike, before the
        // repository or a model is opened.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
            .args([
                "generate",
                "--repo",
                "/nonexistent",
                "--target",
                "m.py::f",
                "--python",
            ])
            .arg(&python)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why), "{stderr}");
    }
}

/// The scenario of the target's own file in the prompt, with the real model: the plotter's
/// step size is only in the target's file, so the signature alone can't give it.
#[test]
fn the_targets_own_file_turns_a_failing_completion_into_a_passing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let source = fixture().join("Source_Code");
    let before = snapshot(&source);
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let args = [&["--method"][..], extra].concat();
        let s = summary(
            &tasks_command("scenario-tasks.jsonl", &source, &out, &args)
                .output()
                .unwrap(),
        );
        (s, out)
    };
    let (s, out) = run("alone", &["direct", "--no-local"]);
    assert_eq!(s["method"], "direct-nolocal");
    assert_eq!(s["passed"], 0, "{}", completion_of(&out));
    let (s, out) = run("local", &["direct"]);
    assert_eq!(s["passed"], 1, "{}", completion_of(&out));
    assert!(completion_of(&out).contains("STEPS_PER_METRE"));

    // Dense similarity keeps the project's vectors in the run directory, never in the project.
    let (s, out) = run("dense", &["dense"]);
    assert_eq!(s["total"], 1);
    let vectors: Vec<_> = std::fs::read_dir(out.join("vectors")).unwrap().collect();
    assert_eq!(vectors.len(), 1);
    assert_eq!(snapshot(&source), before);
}

/// Tasks generated several at a time, their LLM calls decoded together by one shared engine,
/// get the completions of the run that generates them one after another, prefix reuse on:
/// what a prompt reuses depends on timing, but a reused prefix holds the bits computed whole.
#[test]
fn tasks_generated_at_once_get_the_sequential_completions() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let args = [
            &["--method", "direct", "--no-grounding", "--jobs", "2"][..],
            extra,
        ]
        .concat();
        let s = summary(&eval(&out, &args));
        (s, completion_of(&out))
    };
    let (one, sequential) = run("one", &[]);
    let (three, together) = run("three", &["--concurrency", "3"]);
    assert_eq!(one["total"], 4);
    assert_eq!(together, sequential);
    assert_eq!(three["passed"], one["passed"]);
    // Methods without a model fork freely; the reference still passes everything.
    let s = summary(&eval(
        &tmp.path().join("ref"),
        &["--method", "reference", "--concurrency", "4"],
    ));
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(4), Some(4))
    );
    // A concurrency of 0 is refused.
    let out = eval(
        &tmp.path().join("zero"),
        &["--method", "reference", "--concurrency", "0"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--concurrency must be at least 1"));
}

fn completion_of(run: &std::path::Path) -> String {
    std::fs::read_to_string(run.join("completions.jsonl")).unwrap()
}

/// The examples of a target's docstring run as doctest runs them (the project's
/// `doctest_optionflags`, the module's names), in a copy per answer: the one test passes when
/// every example does; an answer that breaks the module raises.
#[test]
fn docstring_examples_run_against_each_answer_in_a_copy() {
    use repohop::eval::runner::{run_model_tests, RunnerConfig, TaskTests};
    use repohop::eval::tasks::FunctionTask;
    use repohop::generate::model_tests::{
        docstring_examples, examples_failures, TestOutcome, TestRunner,
    };
    use repohop::generate::Target;
    use repohop::repo::{resolve_target, IndexOptions, MaskedView, Repository};
    use std::sync::atomic::AtomicBool;

    let root = tempfile::tempdir().unwrap();
    let files = [
        ("pytest.ini", "[pytest]\ndoctest_optionflags=NORMALIZE_WHITESPACE ELLIPSIS\n"),
        ("pkg/__init__.py", ""),
        (
            "pkg/m.py",
            "SCALE = 2\n\n\ndef double(x):\n    \"\"\"Twice x.\n\n    >>> double(SCALE)\n    4\n    \
             >>> [double(i) for i in range(3)]\n    [0, ..., 4]\n    \"\"\"\n    return x * 2\n\n\n\
             def plain(x):\n    \"\"\"No examples.\"\"\"\n    return x\n\n\n\
             class Box:\n    def size(self):\n        \"\"\"The size, \"quoted\".\n\n        \
             >>> Box().size()\n        3\n        \"\"\"\n        return 3\n",
        ),
    ];
    for (path, text) in files {
        let p = root.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let before = snapshot(root.path());
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(root.path(), &opts).unwrap();
    let cfg = RunnerConfig {
        python: python(),
        ..RunnerConfig::default()
    };
    let cancel = AtomicBool::new(false);
    let examples = |qualname: &str| {
        let id = resolve_target(&repo, qualname).unwrap();
        let target = Target::of(&repo, id).unwrap();
        docstring_examples(&MaskedView::new(&repo, Some(id), false), &target)
    };
    assert_eq!(examples("pkg.m.plain"), None, "no examples, no test");
    let run = |qualname: &str, body: &str| {
        let tests = examples(qualname).expect("examples");
        let task = FunctionTask::in_repository(qualname, "pkg/m.py");
        run_model_tests(&task, body, root.path(), &cfg, &tests, &cancel).unwrap()
    };
    use TestOutcome::{Failed as F, Passed as P, Raised as R};
    assert_eq!(
        run("pkg.m.double", "return x * 2\n"),
        [P],
        "ELLIPSIS from pytest.ini"
    );
    assert_eq!(run("pkg.m.double", "return x + 2\n"), [F]);
    assert_eq!(
        run("pkg.m.double", "raise ValueError(x)\n"),
        [F],
        "doctest reports it"
    );
    assert_eq!(
        run("pkg.m.double", "return x *\n"),
        [R],
        "the module does not load"
    );
    assert_eq!(run("pkg.m.Box.size", "return 3\n"), [P]);
    assert_eq!(run("pkg.m.Box.size", "return 4\n"), [F]);
    // What the examples gave, as the repair round shows it.
    let task = FunctionTask::in_repository("pkg.m.double", "pkg/m.py");
    let runner = TaskTests {
        task: &task,
        source_root: root.path(),
        cfg: &cfg,
        cancel: &cancel,
    };
    let tests = examples("pkg.m.double").unwrap();
    assert_eq!(runner.failure("return x * 2\n", &tests).unwrap(), None);
    let tail = runner.failure("return x + 2\n", &tests).unwrap().unwrap();
    assert_eq!(
        examples_failures(&tail).as_deref(),
        Some("Failed example:\n    [double(i) for i in range(3)]\nExpected:\n    [0, ..., 4]\nGot:\n    [2, 3, 4]\n"),
        "{tail}"
    );
    assert_eq!(snapshot(root.path()), before, "the examples ran in copies");
}

/// A src-layout project installed in editable mode (a `.pth` naming its original `src`, as
/// hatchling and setuptools write) still has the answer tested: the copy's package comes first.
/// Its `addopts = --color=yes` leaves the log plain, so the failure's cause is read.
#[test]
fn an_editable_install_does_not_hide_the_answer() {
    use std::process::Command;
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("Source_Code");
    let files = [
        ("proj/pytest.ini", "[pytest]\naddopts = --color=yes\n"),
        ("proj/src/pkg/__init__.py", ""),
        (
            "proj/src/pkg/m.py",
            "def double(x):\n    \"\"\"Twice x.\"\"\"\n    return x * 2\n",
        ),
        (
            "proj/tests/test_m.py",
            "from pkg.m import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
        ),
    ];
    for (path, text) in files {
        let p = source.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let task = serde_json::json!({"namespace": "pkg.m.double", "project_path": "proj",
        "completion_path": "proj/src/pkg/m.py", "tests": ["tests/test_m.py::test_double"]});
    let tasks = tmp.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{task}\n")).unwrap();
    // A venv of its own: pytest from the tests' Python, the project from its original tree.
    let venv = tmp.path().join("venv");
    let made = Command::new(python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let purelib = |py: &std::path::Path| {
        let out = Command::new(py)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .unwrap();
        std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    };
    let site = purelib(&venv.join("bin/python"));
    std::fs::write(
        site.join("tests_python.pth"),
        format!("{}\n", purelib(&python()).display()),
    )
    .unwrap();
    std::fs::write(
        site.join("_pkg.pth"),
        format!("{}\n", source.join("proj/src").display()),
    )
    .unwrap();
    let score = |body: &str| {
        let dir = tempfile::tempdir_in(tmp.path()).unwrap();
        let file = completions(dir.path(), &[("pkg.m.double", body)]);
        let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
            .arg("eval")
            .arg("--tasks")
            .arg(&tasks)
            .arg("--source-root")
            .arg(&source)
            .arg("--python")
            .arg(venv.join("bin/python"))
            .arg("--completions")
            .arg(&file)
            .arg("--out")
            .arg(dir.path().join("run"))
            .arg("--json")
            .output()
            .unwrap();
        summary(&out)["passed"].as_u64()
    };
    assert_eq!(score("    return x * 2\n"), Some(1));
    assert_eq!(
        score("    return x + 3\n"),
        Some(0),
        "the original body was tested"
    );
}

/// In a src layout the examples run against the module the project's tests import
/// (`pkg.m`, not `src.pkg.m`): an exception's name in an example's output carries it.
#[test]
fn docstring_examples_import_the_module_a_src_layout_gives() {
    use repohop::eval::runner::{run_model_tests, RunnerConfig};
    use repohop::eval::tasks::FunctionTask;
    use repohop::generate::model_tests::{docstring_examples, TestOutcome};
    use repohop::generate::Target;
    use repohop::repo::{resolve_target, IndexOptions, MaskedView, Repository};
    use std::sync::atomic::AtomicBool;

    let root = tempfile::tempdir().unwrap();
    let files = [
        ("pytest.ini", "[pytest]\npythonpath = src\n"),
        ("src/pkg/__init__.py", ""),
        (
            "src/pkg/m.py",
            "class Invalid(ValueError):\n    pass\n\n\ndef check(x):\n    \"\"\"x, when positive.\n\n    \
             >>> check(2)\n    2\n    >>> check(-1)\n    Traceback (most recent call last):\n    \
             ...\n    pkg.m.Invalid: -1\n    \"\"\"\n    if x <= 0:\n        raise Invalid(x)\n    return x\n",
        ),
    ];
    for (path, text) in files {
        let p = root.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(root.path(), &opts).unwrap();
    let id = resolve_target(&repo, "pkg.m.check").unwrap();
    let target = Target::of(&repo, id).unwrap();
    let tests = docstring_examples(&MaskedView::new(&repo, Some(id), false), &target).unwrap();
    assert!(tests.code.contains("import pkg.m as"), "{}", tests.code);
    let cfg = RunnerConfig {
        python: python(),
        ..RunnerConfig::default()
    };
    let cancel = AtomicBool::new(false);
    let task = FunctionTask::in_repository("pkg.m.check", "src/pkg/m.py");
    let run =
        |body: &str| run_model_tests(&task, body, root.path(), &cfg, &tests, &cancel).unwrap();
    use TestOutcome::{Failed as F, Passed as P};
    assert_eq!(run("if x <= 0:\n    raise Invalid(x)\nreturn x\n"), [P]);
    assert_eq!(run("if x < 0:\n    raise Invalid(x)\nreturn x\n"), [P]);
    assert_eq!(run("if x <= 0:\n    raise ValueError(x)\nreturn x\n"), [F]);
}

/// `--select tests` runs the model's tests in a copy per answer, with the answer spliced in:
/// per test, pass or not; the source tree untouched, the project's own tests not run.
#[test]
fn model_written_tests_run_against_each_answer_in_a_copy() {
    use repohop::eval::runner::{run_model_tests, RunnerConfig};
    use repohop::eval::tasks::load_function_tasks;
    use repohop::generate::model_tests::{ModelTests, TestOutcome};
    use std::sync::atomic::AtomicBool;

    let tasks = load_function_tasks(&fixture().join("tasks.jsonl")).unwrap();
    let add = tasks
        .iter()
        .find(|t| t.namespace == "calc.ops.add")
        .unwrap();
    let source = fixture().join("Source_Code");
    let before = snapshot(&source);
    let cfg = RunnerConfig {
        python: python(),
        ..RunnerConfig::default()
    };
    let code = "from calc.ops import add\n\n\
                def test_generated_1():\n    assert add(1, 2) == 3\n\n\
                def test_generated_2():\n    assert add(0, 0) == 0\n\n\
                def test_generated_3():\n    open('written.txt', 'w').write('x')\n    assert add(2, 2) == 5\n";
    let tests = ModelTests {
        code: code.into(),
        names: vec![
            "test_generated_1".into(),
            "test_generated_2".into(),
            "test_generated_3".into(),
        ],
    };
    let cancel = AtomicBool::new(false);
    let run = |body: &str| run_model_tests(add, body, &source, &cfg, &tests, &cancel).unwrap();
    use TestOutcome::{Failed as F, Passed as P, Raised as R};
    assert_eq!(run("return a + b\n"), [P, P, F]);
    assert_eq!(run("return a - b\n"), [F, P, F]);
    assert_eq!(run("return undefined_name\n"), [R, R, R], "NameError");
    assert_eq!(
        run("if a == 1:\n    raise KeyError(a)\nreturn a + b\n"),
        [R, P, F]
    );
    assert_eq!(run("pass\n"), [F, F, F], "a trivial body runs nothing");
    assert_eq!(snapshot(&source), before, "the tests ran in copies");
}
