//! Untrusted bodies run in a throwaway copy: the source tree survives deletion and writes.

mod eval_common;
use eval_common::*;

#[test]
fn hostile_bodies_leave_the_source_tree_intact() {
    let src = fixture().join("Source_Code");
    let project = src.join("Demo/calc").canonicalize().unwrap();
    let before = snapshot(&src);
    let tmp = tempfile::tempdir().unwrap();
    let p = project.display();
    let file = completions(
        tmp.path(),
        &[
            // Deletes the package in its working directory (the copy), then fails.
            ("calc.ops.add", "import shutil\nshutil.rmtree('calc', ignore_errors=True)\nreturn a + b\n"),
            // Writes into and deletes from the real source tree by absolute path.
            (
                "calc.ops.scale",
                &format!(
                    "import os, shutil\ntry:\n    open('{p}/calc/ops.py', 'w').write('broken')\nexcept OSError:\n    pass\ntry:\n    open('{p}/planted.py', 'w').write('x')\nexcept OSError:\n    pass\nshutil.rmtree('{p}/tests', ignore_errors=True)\nreturn [ratio(v, total) for v in values]\n"
                ),
            ),
        ],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "2"],
    ));
    assert_eq!(s["total"], 2);
    assert_eq!(snapshot(&src), before, "the source tree changed");
    // The body that only damaged its own copy and then returned correctly still passes.
    assert_eq!(result(&run, "calc.ops.scale")["outcome"], "pass");
    // Test processes see a scrubbed environment.
    assert!(std::env::var_os("REPOHOP_TEST_PYTHON").is_some());
}

#[test]
fn memory_limit_stops_a_greedy_body() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[("calc.ops.add", "hog = bytearray(3 << 30)\nreturn a + b\n")],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--memory-mb",
            "1024",
        ],
    ));
    assert_eq!(s["passed"], 0);
    let r = result(&run, "calc.ops.add");
    assert_eq!(r["outcome"], "fail");
    assert!(
        r["output_tail"].as_str().unwrap().contains("MemoryError"),
        "{r}"
    );
}

#[test]
fn environment_is_scrubbed() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[(
            "calc.ops.add",
            "import os\nassert 'REPOHOP_TEST_PYTHON' not in os.environ, sorted(os.environ)\nassert os.environ['PYTHONHASHSEED'] == '0'\nreturn a + b\n",
        )],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "1"],
    ));
    assert_eq!(s["passed"], 1, "{}", result(&run, "calc.ops.add"));
}
