//! `repohop`'s index finds every method and constructor javac's own parser finds, with the same
//! qualified name, enclosing class, line range (annotations included) and parameters. The
//! reference is `scripts/JavaMethods.java`, which names things in repohop's scheme.
//!
//! Needs a JDK (11+) on PATH, so both checks are opt-in:
//! `cargo test --test java_parity -- --ignored --nocapture` checks the fixture project, and
//! with `REPOHOP_JAVA_PARITY_ROOT=/path/to/tree` that tree as well, printing the counts.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use repohop::repo::{IndexOptions, Repository};
use serde_json::Value;

/// (path, qualname, start_line) → (class, end_line, params) for each definition there.
type Defs = BTreeMap<(String, String, usize), Vec<(Option<String>, usize, Vec<String>)>>;

fn javac_reference(root: &Path) -> Defs {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/JavaMethods.java");
    let out = Command::new("java")
        .arg(&script)
        .arg(root)
        .output()
        .expect("a JDK (java 11+) must be on PATH for the Java parity check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JavaMethods.java prints JSON");
    let mut defs = Defs::new();
    for f in v.as_array().expect("a JSON list") {
        let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
        let n = |k: &str| f[k].as_u64().unwrap_or_default() as usize;
        let params = f["params"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        defs.entry((s("path"), s("qualname"), n("start_line")))
            .or_default()
            .push((f["class"].as_str().map(String::from), n("end_line"), params));
    }
    defs
}

fn ours(root: &Path) -> Defs {
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(root, &opts).expect("index the tree");
    let mut defs = Defs::new();
    for f in repo.functions().filter(|f| f.path.ends_with(".java")) {
        defs.entry((f.path.clone(), f.qualname.clone(), f.span.start_line))
            .or_default()
            .push((f.class.clone(), f.span.end_line, f.params.clone()));
    }
    defs
}

fn compare(root: &Path) -> (usize, usize, Vec<String>) {
    let reference = javac_reference(root);
    let got = ours(root);
    let count = |d: &Defs| d.values().map(Vec::len).sum::<usize>();
    let mut diffs = Vec::new();
    for (key, want) in &reference {
        match got.get(key) {
            None => diffs.push(format!("missing {key:?}")),
            Some(have) if have != want => {
                diffs.push(format!("differs {key:?}: javac {want:?}, ours {have:?}"))
            }
            Some(_) => {}
        }
    }
    for key in got.keys().filter(|k| !reference.contains_key(*k)) {
        diffs.push(format!("extra {key:?}"));
    }
    (count(&reference), count(&got), diffs)
}

#[test]
#[ignore = "needs a JDK on PATH"]
fn fixture_project_matches_javac() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/javaproj");
    let (javac, us, diffs) = compare(&root);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert_eq!((javac, us), (14, 14));
}

#[test]
#[ignore = "needs a JDK on PATH and REPOHOP_JAVA_PARITY_ROOT"]
fn external_tree_matches_javac() {
    let Ok(root) = std::env::var("REPOHOP_JAVA_PARITY_ROOT") else {
        panic!("set REPOHOP_JAVA_PARITY_ROOT to the Java tree to compare");
    };
    let (javac, us, diffs) = compare(Path::new(&root));
    println!(
        "{root}: javac finds {javac} methods/constructors, repohop {us}, {} differences",
        diffs.len()
    );
    for d in diffs.iter().take(20) {
        println!("  {d}");
    }
    assert!(diffs.is_empty());
}
