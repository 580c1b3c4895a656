//! `repohop report`: runs side by side as markdown, JSON and an SVG chart.

mod eval_common;
use eval_common::*;

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
