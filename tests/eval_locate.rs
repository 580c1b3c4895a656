//! Targets whose recorded positions don't match the file, or that have none, are found by
//! namespace through the repository model.

mod eval_common;
use eval_common::*;

fn run_reference(tasks: &str) -> (serde_json::Value, std::path::PathBuf, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let fx = fixture();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("eval")
        .arg("--tasks")
        .arg(fx.join(tasks))
        .arg("--source-root")
        .arg(fx.join("Source_Code"))
        .arg("--python")
        .arg(python())
        .args(["--method", "reference", "--json", "--quiet", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    (summary(&out), run, tmp)
}

fn completion(run: &std::path::Path, namespace: &str) -> String {
    let p = run.join("tasks").join(namespace).join("completion.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["completion"].as_str().unwrap().to_string()
}

#[test]
fn shifted_and_missing_positions_fall_back_to_the_namespace() {
    let before = snapshot(&fixture().join("Source_Code"));
    for tasks in ["shifted-tasks.jsonl", "native-tasks.jsonl"] {
        let (s, run, _tmp) = run_reference(tasks);
        assert_eq!(
            (s["passed"].as_u64(), s["total"].as_u64()),
            (Some(4), Some(4)),
            "{tasks}"
        );
        // The body after the docstring, exactly the lines DevEval records.
        assert_eq!(completion(&run, "calc.ops.add"), "    return a + b\n");
        assert_eq!(
            completion(&run, "calc.ops.Stack.pop"),
            "        if not self.items:\n            return None\n        return self.items.pop()\n"
        );
    }
    // Indexing for the fallback wrote nothing into the source tree (no symbol cache there).
    assert_eq!(snapshot(&fixture().join("Source_Code")), before);
}

#[test]
fn unknown_namespace_is_a_task_error_naming_both_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"repo\": \"Demo/calc\", \"file\": \"calc/ops.py\", \"target\": \"calc.ops.nothere\", \"tests\": [\"tests/test_ops.py::test_add\"]}\n",
    )
    .unwrap();
    let fx = fixture();
    let run = tmp.path().join("run");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("eval")
        .arg("--tasks")
        .arg(&tasks)
        .arg("--source-root")
        .arg(fx.join("Source_Code"))
        .arg("--python")
        .arg(python())
        .args(["--completions"])
        .arg(completions(
            tmp.path(),
            &[("calc.ops.nothere", "return 1\n")],
        ))
        .args(["--json", "--quiet", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    let s = summary(&out);
    assert_eq!(s["outcomes"]["error"], 1);
    let msg = result(&run, "calc.ops.nothere")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.starts_with("task calc.ops.nothere: no recorded line positions in Demo/calc/calc/ops.py; by namespace: "), "{msg}");
    assert!(msg.contains("no function or method of that name"), "{msg}");
}
