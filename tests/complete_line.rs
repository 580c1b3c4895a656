//! `repohop complete` with the real models: a line whose right completion needs the name of an
//! imported class's method, which only SaraCoder's context (the imported entity and the slices
//! of its file) shows.

use std::path::Path;
use std::process::Command;

const GEOMETRY: &str = "\
class Polygon:
    def __init__(self, sides):
        self.sides = sides

    def outline_span_total(self):
        return sum(self.sides)
";

const REPORT: &str = "\
from geometry import Polygon


def describe(sides):
    \"\"\"The total length around the polygon with these sides.\"\"\"
    shape = Polygon(sides)
    return shape.outline_span_total()
";

/// A folder holding the project `demo` (geometry.py and report.py), and that project's path.
fn demo_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("demo");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("geometry.py"), GEOMETRY).unwrap();
    std::fs::write(project.join("report.py"), REPORT).unwrap();
    (root, project)
}

fn complete(root: &Path, extra: &[&str]) -> serde_json::Value {
    complete_with(root, &["--file", "report.py", "--line", "7"], extra, None)
}

fn complete_with(
    root: &Path,
    cursor: &[&str],
    extra: &[&str],
    stdin: Option<&str>,
) -> serde_json::Value {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("complete")
        .arg(root)
        .arg("--json")
        .args(cursor)
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_imported_method_name_comes_from_saracoders_context() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("geometry.py"), GEOMETRY).unwrap();
    std::fs::write(dir.path().join("report.py"), REPORT).unwrap();

    let sara = complete(dir.path(), &[]);
    let line = sara["completion"].as_str().unwrap();
    assert!(line.contains("shape.outline_span_total()"), "{sara:#}");
    // The cursor's line and what follows were hidden from the prompt.
    let prompt = sara["prompt"]["text"].as_str().unwrap();
    assert!(prompt.ends_with("    shape = Polygon(sides)\n"), "{prompt}");
    assert!(!prompt.contains("return shape."));
    assert_eq!(sara["eaid"]["entities"][0]["qualname"], "geometry.Polygon");
    assert!(sara["retrieval"]["candidates"].as_u64().unwrap() > 0);
    // Without the model: the same prompt, no completion.
    let only = complete(dir.path(), &["--prompt-only"]);
    assert_eq!(only["prompt"]["text"], sara["prompt"]["text"]);
    assert_eq!(only["prompt_tokens"], sara["prompt_tokens"]);
    assert!(only.get("completion").is_none(), "{only:#}");
    // Generation stopped at the end of the statement, not at the token limit.
    assert!(sara["generated_tokens"].as_u64().unwrap() < 64, "{sara:#}");

    // The first call built and stored the codebase and the vectors it embedded.
    let store = &sara["store"];
    assert_eq!(
        (store["built"].as_u64(), store["written"].as_bool()),
        (Some(2), Some(true)),
        "{store:#}"
    );
    assert!(dir
        .path()
        .join(".repohop/saracoder-slices/codebase-slices.json")
        .is_file());

    // An editor sends the file up to the cursor: the same completion, from the stored codebase
    // and vectors.
    let above: String = REPORT.lines().take(6).map(|l| format!("{l}\n")).collect();
    let piped = complete_with(
        dir.path(),
        &["--file", "report.py", "--stdin"],
        &[],
        Some(&above),
    );
    assert_eq!(piped["completion"], sara["completion"], "{piped:#}");
    let store = &piped["store"];
    assert_eq!(
        (store["reused"].as_u64(), store["built"].as_u64()),
        (Some(2), Some(0)),
        "{store:#}"
    );
    assert!(store["vectors_read"].as_u64().unwrap() > 0, "{store:#}");
    assert!(store["problem"].is_null(), "{store:#}");

    // The unfinished code alone does not name the method.
    let none = complete(dir.path(), &["--method", "none"]);
    let line = none["completion"].as_str().unwrap();
    assert!(!line.contains("outline_span_total"), "{none:#}");
    assert!(none["retrieval"].is_null());
}

#[test]
fn the_baselines_complete_on_the_same_machinery() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("geometry.py"), GEOMETRY).unwrap();
    std::fs::write(dir.path().join("report.py"), REPORT).unwrap();
    for method in ["vanilla", "repocoder", "graphcoder"] {
        let r = complete(dir.path(), &["--method", method]);
        assert_eq!(r["method"], method);
        assert!(r["eaid"].is_null(), "{method}: EAID is SaraCoder's");
        assert!(r["retrieval"]["picks"].as_array().unwrap().len() <= 4);
        assert!(
            !r["completion"].as_str().unwrap().trim().is_empty(),
            "{r:#}"
        );
        // RepoCoder's second round searched with the first round's line.
        assert_eq!(r["first_round"].is_string(), method == "repocoder", "{r:#}");
    }
    let r = complete(dir.path(), &["--no-ccg", "--no-eaid"]);
    assert_eq!(r["method"], "saracoder-noeaid-noccg");
    assert!(r["retrieval"]["picks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["dsed"].is_null()));
}

#[test]
fn a_line_run_scores_resumes_and_refuses_other_settings() {
    let (root, project) = demo_project();
    let tasks = root.path().join("lines.jsonl");
    std::fs::write(
        &tasks,
        concat!(
            r#"{"repo": "demo", "file": "report.py", "line": 7, "ground_truth": "    return shape.outline_span_total()", "split": "cross_file"}"#,
            "\n",
            r#"{"repo": "demo", "file": "geometry.py", "line": 3, "ground_truth": "        self.sides = sides", "split": "in_file"}"#,
            "\n",
        ),
    )
    .unwrap();
    let out = root.path().join("run");
    let eval = |method: &str| {
        Command::new(env!("CARGO_BIN_EXE_repohop"))
            .args(["eval", "--json", "--quiet", "--method", method, "--tasks"])
            .arg(&tasks)
            .arg("--source-root")
            .arg(root.path())
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
    };
    let first = eval("graphcoder");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!((s["total"].as_u64(), s["ran"].as_u64()), (Some(2), Some(2)));
    assert_eq!(s["by_split"]["cross_file"]["tasks"], 1);
    assert_eq!(s["by_repo"]["demo"]["tasks"], 2);
    // `shape` and `outline_span_total`: the first is in the unfinished code.
    let recall = &s["by_split"]["cross_file"]["recall"];
    assert_eq!(recall["identifiers"], 2, "{s:#}");
    assert_eq!(recall["context"], 0.5, "{s:#}");
    for k in ["em", "es", "id_em", "id_f1"] {
        let v = s["all"]["cceval"][k].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&v), "{k} {v}");
    }
    // Nothing is written into the project.
    assert!(!project.join(".repohop").exists());

    let first_wall = s["wall_seconds"].as_f64().unwrap();
    let again = eval("graphcoder");
    let s: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (s["ran"].as_u64(), s["resumed"].as_u64()),
        (Some(0), Some(2))
    );
    // The resumed run that had nothing left keeps the first sitting's figures for `report`.
    assert_eq!(s["sittings"].as_array().map(Vec::len), Some(1), "{s}");
    let reported = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["report", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&reported.stdout).unwrap();
    assert_eq!(
        (r[0]["ran"].as_u64(), r[0]["resumed"].as_u64()),
        (Some(2), Some(0))
    );
    assert!(
        (r[0]["wall_seconds"].as_f64().unwrap() - first_wall).abs() < 1e-6,
        "{r}"
    );

    let other = eval("vanilla");
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("was made with graphcoder"), "{err}");

    // The two halves of a `none` run, merged, are one run of both cursors; each half alone
    // compares with the graphcoder run on its one cursor.
    let halves: Vec<_> = ["1/2", "2/2"]
        .iter()
        .map(|shard| {
            let dir = root.path().join(format!("none-{}", &shard[..1]));
            let run = Command::new(env!("CARGO_BIN_EXE_repohop"))
                .args([
                    "eval", "--quiet", "--method", "none", "--shard", shard, "--tasks",
                ])
                .arg(&tasks)
                .arg("--source-root")
                .arg(root.path())
                .arg("--out")
                .arg(&dir)
                .output()
                .unwrap();
            assert!(
                run.status.success(),
                "{}",
                String::from_utf8_lossy(&run.stderr)
            );
            dir
        })
        .collect();
    let report = |extra: &[&str], dirs: &[&std::path::Path]| {
        Command::new(env!("CARGO_BIN_EXE_repohop"))
            .arg("report")
            .args(extra)
            .args(dirs)
            .output()
            .unwrap()
    };
    let merged = report(&["--merge", "--json"], &[&halves[0], &halves[1]]);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&merged.stdout).unwrap();
    assert_eq!(m[0]["method"], "none");
    assert_eq!(m[0]["total"], 2);
    assert_eq!(m[0]["missing"].as_array().map(Vec::len), Some(0));
    // The halves ran one after the other: their wall times add up.
    let wall = |v: &serde_json::Value| v["wall_seconds"].as_f64().unwrap();
    let halves_wall: f64 = halves
        .iter()
        .map(|d| {
            let text = std::fs::read_to_string(d.join("summary.json")).unwrap();
            wall(&serde_json::from_str(&text).unwrap())
        })
        .sum();
    assert!((wall(&m[0]) - halves_wall).abs() < 1e-3, "{m}");
    let side = report(&[], &[&out, &halves[0]]);
    let table = String::from_utf8_lossy(&side.stdout);
    assert!(
        table.contains("on the 1 cursors every run finished"),
        "{table}"
    );
    assert!(table.contains("| run | graphcoder | 1 |"), "{table}");
    let overlap = report(&["--merge"], &[&halves[0], &halves[0]]);
    assert!(!overlap.status.success());
    assert!(String::from_utf8_lossy(&overlap.stderr).contains("finished in both"));
    let mixed = report(&["--merge"], &[&out, &halves[0]]);
    assert!(String::from_utf8_lossy(&mixed.stderr).contains("cannot merge"));
}

const POLYGON_JAVA: &str = "\
package geometry;

public class Polygon {
    private final int[] sides;

    public Polygon(int[] sides) {
        this.sides = sides;
    }

    public int outlineSpanTotal() {
        int total = 0;
        for (int s : sides) {
            total += s;
        }
        return total;
    }
}
";

const REPORT_JAVA: &str = "\
package report;

import geometry.Polygon;

public class Report {
    /** The total length around the polygon with these sides. */
    public static int describe(int[] sides) {
        Polygon shape = new Polygon(sides);
        return shape.outlineSpanTotal();
    }
}
";

#[test]
fn prompt_only_says_where_the_truths_names_are_without_the_model() {
    let (root, project) = demo_project();
    let tasks = root.path().join("lines.jsonl");
    std::fs::write(
        &tasks,
        r#"{"repo": "demo", "file": "report.py", "line": 7, "ground_truth": "    return shape.outline_span_total()", "split": "cross_file"}"#,
    )
    .unwrap();
    let prompts = |method: &str| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
            .args([
                "eval",
                "--json",
                "--quiet",
                "--prompt-only",
                "--method",
                method,
            ])
            .arg("--tasks")
            .arg(&tasks)
            .arg("--source-root")
            .arg(root.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The method name is only in the imported class, which SaraCoder's prompt shows.
    let sara = prompts("saracoder");
    let r = &sara["records"][0]["recall"];
    assert_eq!(
        (&r["identifiers"], &r["in_context"], &r["in_prompt"]),
        (&2.into(), &1.into(), &2.into()),
        "{sara:#}"
    );
    assert_eq!(sara["all"]["recall"]["added"], 0.5);
    assert!(sara["records"][0]["prompt_tokens"].as_u64().unwrap() > 0);
    let none = prompts("none");
    assert_eq!(none["all"]["recall"]["prompt"], 0.5, "{none:#}");
    assert_eq!(none["all"]["snippets_mean"], 0.0);
    // Nothing was written: no run directory, nothing in the project.
    assert!(!root.path().join("eval-runs").exists());
    assert!(!project.join(".repohop").exists());
    // Function tasks have no prompt-only mode.
    let functions = root.path().join("functions.jsonl");
    std::fs::write(
        &functions,
        r#"{"namespace": "report.describe", "type": "function", "project_path": "demo", "completion_path": "demo/report.py", "signature_position": [4, 4], "body_position": [5, 7], "dependency": {"intra_class": [], "intra_file": [], "cross_file": []}, "requirement": {"Functionality": "f", "Arguments": "a"}, "tests": ["t.py::t"], "indent": 4}"#,
    )
    .unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["eval", "--prompt-only", "--method", "dense", "--tasks"])
        .arg(&functions)
        .arg("--source-root")
        .arg(root.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--prompt-only applies to line tasks")
    );
}

#[test]
fn java_lines_complete_from_slices_and_the_imported_class() {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in [
        ("src/geometry/Polygon.java", POLYGON_JAVA),
        ("src/report/Report.java", REPORT_JAVA),
    ] {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let cursor = ["--file", "src/report/Report.java", "--line", "9"];
    let sara = complete_with(dir.path(), &cursor, &[], None);
    let line = sara["completion"].as_str().unwrap();
    assert!(line.contains("shape.outlineSpanTotal()"), "{sara:#}");
    assert!(line.trim_end().ends_with(';'), "one statement: {line:?}");
    let prompt = sara["prompt"]["text"].as_str().unwrap();
    assert!(
        prompt.contains("// the below code fragment can be found in:"),
        "{prompt}"
    );
    assert!(!prompt.contains("return shape."));
    assert_eq!(sara["eaid"]["entities"][0]["qualname"], "geometry.Polygon");
    let graph = complete_with(dir.path(), &cursor, &["--method", "graphcoder"], None);
    assert!(graph["retrieval"]["picks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["dsed"].is_number()));
}
