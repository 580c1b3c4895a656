//! `repohop report`: runs side by side as markdown, JSON and an SVG chart.

mod eval_common;
use eval_common::*;
use std::path::Path;

#[test]
fn report_compares_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("ref"), tmp.path().join("ni"));
    summary(&eval(&a, &["--method", "reference", "--limit", "2"]));
    summary(&eval(&b, &["--method", "not-implemented", "--limit", "2"]));
    let chart = tmp.path().join("chart.svg");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
            .arg("report")
            .arg(&a)
            .arg(&b)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    assert_eq!(json[0]["method"], "reference");
    assert_eq!(json[0]["pass_at_1"], 1.0);
    assert!(json[0]["wall_seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(json[0]["ran"], 2);
    assert_eq!(json[1]["method"], "not-implemented");
    assert_eq!(
        (json[1]["passed"].as_u64(), json[1]["total"].as_u64()),
        (Some(0), Some(2))
    );
    assert_eq!(json[1]["phases"][0]["name"], "test");
    assert_eq!(json[0]["phases"][0]["name"], "read");

    let md = run(&["--chart", chart.to_str().unwrap()]);
    assert!(
        md.contains("| reference | 2 | 2 | 100.0 | 100.0 (1) | – | – | 100.0 (1) | – |"),
        "{md}"
    );
    assert!(md.contains("| not-implemented | 2 | 0 | 0.0 |"), "{md}");
    // Failures counted by the exception their test ended with.
    assert_eq!(json[1]["causes"]["NotImplementedError"], 2);
    assert_eq!(json[0]["causes"], serde_json::json!({}));
    assert!(
        md.contains("| not-implemented | 2 | NotImplementedError 2 |"),
        "{md}"
    );
    assert!(md.contains("| reference | 0 | – |"), "{md}");
    let failed: serde_json::Value = serde_json::from_str(&run(&["--failures", "--json"])).unwrap();
    let failed = failed.as_array().unwrap();
    assert_eq!(failed.len(), 2, "{failed:?}");
    for f in failed {
        assert_eq!(f["method"], "not-implemented");
        assert_eq!(f["cause"], "NotImplementedError");
        assert!(
            f["detail"]
                .as_str()
                .unwrap()
                .starts_with("NotImplementedError"),
            "{f}"
        );
    }
    let listing = run(&["--failures"]);
    assert_eq!(
        listing.matches("| NotImplementedError |").count(),
        2,
        "{listing}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(">reference<") && svg.contains(">not-implemented<"));
    assert!(svg.contains("100.0 (2/2)") && svg.contains("0.0 (0/2)"));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["report", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a run directory written by `repohop eval`")
    );
}

#[test]
fn merge_reports_shards_as_one_run_and_refuses_what_does_not_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| tmp.path().join(name);
    let whole = summary(&eval(&dir("whole"), &["--method", "reference"]));
    let s1 = summary(&eval(
        &dir("s1"),
        &["--method", "reference", "--shard", "1/2"],
    ));
    let s2 = summary(&eval(
        &dir("s2"),
        &["--method", "reference", "--shard", "2/2"],
    ));

    // Two halves merge into the whole run's figures; nothing is missing.
    let (ok, out, err) = report(&[&dir("s1"), &dir("s2")], &["--merge", "--json"]);
    assert!(ok, "{err}");
    let merged: serde_json::Value = serde_json::from_str(&out).unwrap();
    let merged = &merged[0];
    assert_eq!(merged["method"], "reference");
    assert_eq!(merged["total"], whole["total"]);
    assert_eq!(merged["passed"], whole["passed"]);
    assert_eq!(merged["by_kind"], whole["by_kind"]);
    assert_eq!(merged["shards"].as_array().unwrap().len(), 2);
    assert_eq!(merged["missing"], serde_json::json!([]));
    assert_eq!(merged["ran"], whole["total"]);
    // The halves ran one after the other: their wall times add up.
    let wall = |v: &serde_json::Value| v["wall_seconds"].as_f64().unwrap();
    assert!(
        (wall(merged) - (wall(&s1) + wall(&s2))).abs() < 1e-3,
        "{merged} {s1} {s2}"
    );

    // One half alone: the other half's tasks are named as missing.
    let (ok, out, err) = report(&[&dir("s1")], &["--merge", "--json"]);
    assert!(ok, "{err}");
    let half: serde_json::Value = serde_json::from_str(&out).unwrap();
    let missing = half[0]["missing"].as_array().unwrap().len() as u64;
    assert!(missing > 0);
    assert_eq!(
        half[0]["total"].as_u64().unwrap() + missing,
        whole["total"].as_u64().unwrap()
    );
    assert!(err.contains("in no shard"), "{err}");

    // Overlapping shards, another method, another task file: refused, with the reason.
    let (ok, _, err) = report(&[&dir("s1"), &dir("whole")], &["--merge"]);
    assert!(!ok && err.contains("finished in both"), "{err}");
    summary(&eval(
        &dir("ni"),
        &["--method", "not-implemented", "--shard", "2/2"],
    ));
    let (ok, _, err) = report(&[&dir("s1"), &dir("ni")], &["--merge"]);
    assert!(
        !ok && err.contains("method `reference` vs `not-implemented`"),
        "{err}"
    );
    let tasks = dir("tasks.jsonl");
    let text = std::fs::read_to_string(fixture().join("tasks.jsonl")).unwrap();
    let last = text.lines().last().unwrap();
    std::fs::write(&tasks, format!("{last}\n")).unwrap();
    let eval_other = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
            .arg("eval")
            .arg("--tasks")
            .arg(&tasks)
            .arg("--source-root")
            .arg(fixture().join("Source_Code"))
            .arg("--python")
            .arg(python())
            .args(["--method", "reference", "--json", "--out"])
            .arg(dir("other"))
            .output()
            .unwrap()
    };
    summary(&eval_other());
    let (ok, _, err) = report(&[&dir("s1"), &dir("other")], &["--merge"]);
    assert!(
        !ok && err.contains("task files with different contents"),
        "{err}"
    );

    // Resuming a run after its task file changed is refused too.
    std::fs::write(&tasks, &text).unwrap();
    let resumed = eval_other();
    assert!(!resumed.status.success());
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("another version of the task file"));
}

#[test]
fn by_task_compares_runs_and_shards_on_the_tasks_all_finished() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| tmp.path().join(name);
    for half in ["1/2", "2/2"] {
        let out = dir(&format!("ref{}", &half[..1]));
        summary(&eval(&out, &["--method", "reference", "--shard", half]));
    }
    // Two tasks: `add` right, `scale` wrong.
    let file = completions(
        tmp.path(),
        &[
            ("calc.ops.add", "return a + b\n"),
            ("calc.ops.scale", "return values\n"),
        ],
    );
    let file = file.to_str().unwrap();
    summary(&eval(
        &dir("mixed"),
        &["--completions", file, "--limit", "2"],
    ));
    summary(&eval(
        &dir("ni"),
        &["--method", "not-implemented", "--limit", "2"],
    ));
    let shards = format!("{},{}", dir("ref1").display(), dir("ref2").display());
    let runs = [Path::new(&shards), &dir("mixed"), &dir("ni")];

    let (ok, out, err) = report(&runs, &["--by-task", "--json"]);
    assert!(ok, "{err}");
    let c: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The reference's other two tasks are in no other run.
    assert_eq!(
        (c["compared"].as_u64(), c["left_out"].as_u64()),
        (Some(2), Some(2))
    );
    let figures = |i: usize| {
        (
            c["runs"][i]["passed"].as_u64(),
            c["runs"][i]["only_here"].as_u64(),
        )
    };
    assert_eq!(figures(0), (Some(2), Some(1)), "{c}");
    assert_eq!(figures(1), (Some(1), Some(0)), "{c}");
    assert_eq!(figures(2), (Some(0), Some(0)), "{c}");
    assert_eq!(c["runs"][0]["dirs"].as_array().unwrap().len(), 2);
    assert_eq!(c["runs"][2]["method"], "not-implemented");
    assert_eq!(
        (
            c["pass_in_every_run"].as_u64(),
            c["pass_in_some_run"].as_u64()
        ),
        (Some(0), Some(2))
    );
    let rows = c["differing"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{c}");
    assert_eq!(rows[1]["namespace"], "calc.ops.scale");
    assert_eq!(
        rows[1]["outcomes"],
        serde_json::json!(["pass", "AssertionError", "NotImplementedError"])
    );

    let (ok, md, err) = report(&runs, &["--by-task"]);
    assert!(ok, "{err}");
    assert!(
        md.contains("on the 2 tasks every run finished (2 finished by only some are left out)"),
        "{md}"
    );
    assert!(
        md.contains("pass in every run: 0 · in some run: 2 · in none: 0"),
        "{md}"
    );
    assert!(
        md.contains(" | pass | AssertionError | NotImplementedError |"),
        "{md}"
    );

    // One run is nothing to compare; shards that are not one run's are refused as by --merge.
    let (ok, _, err) = report(&[&dir("ni")], &["--by-task"]);
    assert!(!ok && err.contains("two runs or more"), "{err}");
    let wrong = format!("{},{}", dir("ref1").display(), dir("ni").display());
    let (ok, _, err) = report(&[Path::new(&wrong), &dir("mixed")], &["--by-task"]);
    assert!(!ok && err.contains("cannot merge"), "{err}");
}

/// A pool as a run's trace records it: `(label, problems, centrality, review, likelihood,
/// body)`, the review and likelihood only for answers without problems.
type Answer<'a> = (&'a str, usize, f64, f64, f64, &'a str);

fn pool_trace(run: &Path, namespace: &str, kept: &str, pool: &[Answer]) {
    let candidates: Vec<_> = pool
        .iter()
        .map(|(label, problems, centrality, review, likelihood, body)| {
            let clean = *problems == 0;
            serde_json::json!({"label": label, "problems": problems, "centrality": centrality,
                "review": clean.then_some(*review), "likelihood": clean.then_some(*likelihood),
                "likelihood_tokens": clean.then_some(3), "body": body})
        })
        .collect();
    let trace = serde_json::json!({"grounding": {"candidates": candidates, "kept_selected": kept}});
    let path = run.join("tasks").join(namespace).join("trace.json");
    std::fs::write(path, trace.to_string()).unwrap();
}

#[test]
fn candidates_of_a_run_are_each_tested_and_the_selections_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let file = completions(
        tmp.path(),
        &[
            ("calc.ops.add", "return a + b\n"),
            ("calc.ops.scale", "return values\n"),
            (
                "calc.ops.Stack.push",
                "self.items.append(item)\nreturn len(self.items)\n",
            ),
        ],
    );
    summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "3"],
    ));
    // `add`: the most central answer is wrong; the review lifts the right one above it, the
    // likelihood does not. A second copy of the right answer has a problem, so no selection may
    // keep it.
    pool_trace(
        &run,
        "calc.ops.add",
        "sample1",
        &[
            ("first", 0, 0.5, -10.0, -0.2, "return a - b\n"),
            ("sample1", 0, 0.45, -1.0, -0.9, "return a + b\n"),
            ("sample2", 1, 0.45, 0.0, 0.0, "return a + b\n"),
            ("sample3", 0, 0.2, -9.0, -0.5, "return b - a\n"),
        ],
    );
    // `scale`: the run kept the wrong answer; the infilled one passes and is the likeliest.
    // `Stack.push` has no pool.
    pool_trace(
        &run,
        "calc.ops.scale",
        "first",
        &[
            ("first", 0, 0.7, -1.0, -1.0, "return values\n"),
            (
                "infill",
                0,
                0.3,
                -3.0,
                -0.3,
                "return [ratio(v, total) for v in values]\n",
            ),
        ],
    );
    let out = tmp.path().join("study");
    let study = |extra: &[&str]| {
        let mut args = vec!["--candidates-of", run.to_str().unwrap()];
        args.extend_from_slice(extra);
        eval(&out, &args)
    };
    let s = summary(&study(&[]));
    let figures = [
        "tasks",
        "without_pool",
        "bodies_tested",
        "kept",
        "kept_disagrees",
        "central",
        "review",
        "some",
        "some_fewest",
        "likely",
    ]
    .map(|k| s[k].as_u64().unwrap_or(99));
    assert_eq!(figures, [2, 1, 5, 1, 0, 0, 1, 2, 2, 1], "{s}");
    let label = |l: &str| {
        (
            s["by_label"][l]["offered"].as_u64(),
            s["by_label"][l]["passed"].as_u64(),
        )
    };
    assert_eq!(label("first"), (Some(2), Some(0)), "{s}");
    assert_eq!(label("sample2"), (Some(1), Some(1)), "{s}");
    assert_eq!(label("infill"), (Some(1), Some(1)), "{s}");
    let add = std::fs::read_to_string(out.join("tasks/calc.ops.add/candidates.json")).unwrap();
    let add: serde_json::Value = serde_json::from_str(&add).unwrap();
    let outcomes: Vec<&str> = add["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["AssertionError", "pass", "pass", "AssertionError"],
        "{add}"
    );

    // Run again: the tasks' verdicts are read back, the study is the same.
    let again = eval(&out, &["--candidates-of", run.to_str().unwrap()]);
    let again = summary(&again);
    assert_eq!(again["review"], s["review"]);
    assert_eq!(again["bodies_tested"], s["bodies_tested"]);
    // Markdown names the replays; without --out there is nowhere to keep the verdicts.
    let plain = |out: Option<&Path>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"));
        cmd.args(["eval", "--quiet", "--tasks"])
            .arg(fixture().join("tasks.jsonl"))
            .arg("--source-root")
            .arg(fixture().join("Source_Code"))
            .arg("--python")
            .arg(python())
            .arg("--candidates-of")
            .arg(&run);
        if let Some(out) = out {
            cmd.arg("--out").arg(out);
        }
        cmd.output().unwrap()
    };
    let md = plain(Some(&out));
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains("kept by the run: 1 · replayed `central`: 0 · replayed `review`: 1"),
        "{md}"
    );
    assert!(md.contains("| first | 2 | 0 |"), "{md}");
    assert!(md.contains("replayed `likely`: 1"), "{md}");
    let no_out = plain(None);
    assert!(!no_out.status.success());
    assert!(String::from_utf8_lossy(&no_out.stderr).contains("--candidates-of needs --out"));

    // `tests` replayed with tests kept from an earlier study (no test is written again): both
    // pools are split, and the tests keep the right answer of each, `scale`'s against the
    // review.
    let kept = tmp.path().join("model-tests");
    std::fs::create_dir_all(&kept).unwrap();
    let keep = |ns: &str, code: &str, names: &[&str]| {
        let tests = serde_json::json!({"code": code, "names": names});
        std::fs::write(kept.join(format!("{ns}.json")), tests.to_string()).unwrap();
    };
    keep(
        "calc.ops.add",
        "from calc.ops import add\n\ndef test_generated_1():\n    assert add(1, 2) == 3\n\n\
         def test_generated_2():\n    assert add(2, 0) == 2\n\n\
         def test_generated_3():\n    assert {3: 'three'}[add(1, 2)] == 'three'\n",
        &["test_generated_1", "test_generated_2", "test_generated_3"],
    );
    keep(
        "calc.ops.scale",
        "from calc.ops import scale\n\ndef test_generated_1():\n    assert scale([1, 3], 4) == [0.25, 0.75]\n",
        &["test_generated_1"],
    );
    let s = summary(&study(&["--model-tests", kept.to_str().unwrap()]));
    assert_eq!(
        (s["tests"].as_u64(), s["review"].as_u64()),
        (Some(2), Some(1)),
        "{s}"
    );
    assert_eq!(s["tests_told_apart"], 2, "{s}");
    let add = std::fs::read_to_string(out.join("tasks/calc.ops.add/candidates.json")).unwrap();
    let add: serde_json::Value = serde_json::from_str(&add).unwrap();
    let tally: Vec<(Option<u64>, Option<u64>)> = add["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["tests_passed"].as_u64(), c["tests_raised"].as_u64()))
        .collect();
    // The wrong answers miss the third test's key (a KeyError: raised, not failed).
    let (p, r) = (Some, Some);
    assert_eq!(
        tally,
        [(p(1), r(1)), (p(3), r(0)), (None, None), (p(0), r(1))],
        "{add}"
    );
    assert_eq!(add["tests_run"], true);
}
