//! Shared by the eval integration tests: the fixture, the Python with pytest, running the CLI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/evalproj")
}

/// The Python the tests run pytest with. Missing is a failure, not a skip: these tests must
/// really run the fixture's tests.
pub fn python() -> PathBuf {
    let Some(p) = std::env::var_os("REPOHOP_TEST_PYTHON") else {
        panic!("REPOHOP_TEST_PYTHON is not set: run the tests through scripts/test.sh, which makes a venv with pytest and sets it");
    };
    let p = PathBuf::from(p);
    let ok = Command::new(&p)
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "REPOHOP_TEST_PYTHON={} cannot import pytest: run scripts/test.sh (it installs pytest==7.4.0 into target/test-venv)",
        p.display()
    );
    p
}

/// Copies a directory tree (plain files and folders only), e.g. a fixture a test may change.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

/// Every file under `dir` with its bytes, sorted: to prove a tree was not touched.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), bytes));
            }
        }
    }
    out.sort();
    out
}

/// Writes a DevEval completions file.
pub fn completions(dir: &Path, items: &[(&str, &str)]) -> PathBuf {
    let path = dir.join("completions.jsonl");
    let text: String = items
        .iter()
        .map(|(ns, c)| serde_json::json!({"namespace": ns, "completion": c}).to_string() + "\n")
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `repohop eval --json` on the fixture with extra arguments.
pub fn eval(out: &Path, extra: &[&str]) -> Output {
    eval_command(&fixture().join("Source_Code"), out, extra)
        .output()
        .unwrap()
}

/// `repohop eval --json` on the fixture's tasks with `source_root` (the fixture's
/// `Source_Code` or a copy of it) and extra arguments.
pub fn eval_command(source_root: &Path, out: &Path, extra: &[&str]) -> Command {
    tasks_command("tasks.jsonl", source_root, out, extra)
}

/// `repohop eval --json` on the fixture's task file `tasks`, as [`eval_command`].
pub fn tasks_command(tasks: &str, source_root: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_repohop"));
    cmd.arg("eval")
        .arg("--tasks")
        .arg(fixture().join(tasks))
        .arg("--source-root")
        .arg(source_root)
        .arg("--python")
        .arg(python())
        .arg("--out")
        .arg(out)
        .arg("--json")
        .args(extra);
    cmd
}

pub fn summary(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "eval failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn result(run: &Path, namespace: &str) -> serde_json::Value {
    let p = run.join("tasks").join(namespace).join("result.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// `repohop report` with extra arguments: (success, stdout, stderr).
pub fn report(args: &[&Path], extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("report")
        .args(args)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
