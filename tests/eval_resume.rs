//! Run directories resume: finished tasks are not run again.

mod eval_common;
use eval_common::*;

#[test]
fn interrupted_run_resumes_without_rerunning_finished_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let s = summary(&eval(&run, &["--method", "reference", "--limit", "2"]));
    assert_eq!((s["ran"].as_u64(), s["total"].as_u64()), (Some(2), Some(2)));
    let first = run.join("tasks/calc.ops.add/result.json");
    let stamp = std::fs::metadata(&first).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&first).unwrap();

    let s = summary(&eval(&run, &["--method", "reference"]));
    assert_eq!(
        (s["ran"].as_u64(), s["resumed"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(
        std::fs::metadata(&first).unwrap().modified().unwrap(),
        stamp
    );
    assert_eq!(std::fs::read_to_string(&first).unwrap(), text);
    let lines = std::fs::read_to_string(run.join("completions.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 4);

    // A third sitting with nothing left to run keeps the first two's wall time: `report`
    // counts both sittings, not the last invocation alone.
    let s = summary(&eval(&run, &["--method", "reference"]));
    assert_eq!(
        (s["ran"].as_u64(), s["resumed"].as_u64()),
        (Some(0), Some(4))
    );
    let sittings = s["sittings"].as_array().unwrap();
    assert_eq!(sittings.len(), 2);
    let walls: Vec<f64> = sittings
        .iter()
        .map(|x| x["wall_seconds"].as_f64().unwrap())
        .collect();
    assert!(walls.iter().all(|w| *w > 0.0));
    assert_eq!(
        sittings
            .iter()
            .map(|x| x["ran"].as_u64().unwrap())
            .sum::<u64>(),
        4
    );
    let (ok, out, err) = report(&[&run], &["--json"]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report[0]["ran"].as_u64(), report[0]["resumed"].as_u64()),
        (Some(4), Some(0))
    );
    let wall = report[0]["wall_seconds"].as_f64().unwrap();
    assert!(
        (wall - walls.iter().sum::<f64>()).abs() < 1e-6,
        "{wall} vs {walls:?}"
    );

    // A different method cannot reuse the directory.
    let out = eval(&run, &["--method", "not-implemented"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds a run of `reference`"));
}

#[test]
fn killed_run_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[
            ("calc.ops.add", "return a + b\n"),
            ("calc.ops.scale", "import time\ntime.sleep(30)\n"),
            (
                "calc.ops.Stack.push",
                "self.items.append(item)\nreturn len(self.items)\n",
            ),
            (
                "calc.ops.Stack.pop",
                "if not self.items:\n    return None\nreturn self.items.pop()\n",
            ),
        ],
    );
    let run = tmp.path().join("run");
    let fx = fixture();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("eval")
        .arg("--tasks")
        .arg(fx.join("tasks.jsonl"))
        .arg("--source-root")
        .arg(fx.join("Source_Code"))
        .arg("--python")
        .arg(python())
        .arg("--out")
        .arg(&run)
        .arg("--completions")
        .arg(&file)
        .arg("--quiet")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first task is finished (the second one sleeps), then interrupt.
    let first = run.join("tasks/calc.ops.add/result.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !first.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "first task never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("rerun the same command to resume"));
    assert!(!run.join("tasks/calc.ops.scale/result.json").exists());
    // No leftover test processes or temp copies hold the run up; resuming finishes it.
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--timeout", "8"],
    ));
    assert_eq!(
        (s["resumed"].as_u64(), s["ran"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(
        (s["passed"].as_u64(), s["total"].as_u64()),
        (Some(3), Some(4))
    );
}
