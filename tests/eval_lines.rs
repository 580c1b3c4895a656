//! `repohop eval` on line tasks: both metric definitions, computed by hand below.

mod eval_common;
use eval_common::*;

#[test]
fn line_tasks_score_in_both_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    let preds = tmp.path().join("preds.jsonl");
    std::fs::write(
        &preds,
        concat!(
            "{\"id\": \"add-return\", \"completion\": \"return a + b\\nprint(1)\"}\n",
            "{\"id\": \"scale-return\", \"completion\": \"return [ratio(v, whole) for v in values]\"}\n",
        ),
    )
    .unwrap();
    let fx = fixture();
    let score = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
            .arg("eval")
            .arg("--tasks")
            .arg(fx.join("lines.jsonl"))
            .arg("--source-root")
            .arg(fx.join("Source_Code"))
            .arg("--completions")
            .arg(&preds)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = score(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let close = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;
    // add-return: exact in both (cut after the first statement / truncated to one line).
    // scale-return: `total` → `whole`, 40 chars each: LCS 37 → Indel 1 − 6/80; Levenshtein 5
    // → 1 − 5/40; identifier sets share 3 of 4 → F1 0.75.
    assert_eq!(
        (s["total"].as_u64(), s["missing"].as_u64()),
        (Some(2), Some(0))
    );
    for def in ["cceval", "graphcoder"] {
        assert!(close(&s[def]["em"], 0.5), "{s}");
        assert!(close(&s[def]["id_em"], 0.5), "{s}");
        assert!(close(&s[def]["id_f1"], (1.0 + 0.75) / 2.0), "{s}");
    }
    assert!(close(&s["cceval"]["es"], (1.0 + 74.0 / 80.0) / 2.0), "{s}");
    assert!(
        close(&s["graphcoder"]["es"], (1.0 + 35.0 / 40.0) / 2.0),
        "{s}"
    );
    // Line tasks run one at a time: a concurrency for them is refused, not ignored.
    let out = score(&["--concurrency", "2"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--concurrency applies to function tasks"),
        "{stderr}"
    );
}
