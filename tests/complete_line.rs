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

fn complete(root: &Path, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("complete")
        .arg(root)
        .args(["--file", "report.py", "--line", "7", "--json"])
        .args(extra)
        .output()
        .unwrap();
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

    // The unfinished code alone does not name the method.
    let none = complete(dir.path(), &["--method", "none"]);
    let line = none["completion"].as_str().unwrap();
    assert!(!line.contains("outline_span_total"), "{none:#}");
    assert!(none["retrieval"].is_null());
}
