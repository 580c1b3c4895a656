//! `repohop`'s index finds every function and method Python's own `ast` finds, with the same
//! qualified name, kind, line range (decorators included), parameters, docstring and call sites
//! (callee text and line, compared sorted by line then callee).
//! The reference is `scripts/ast_functions.py`, which names things in repohop's scheme.
//!
//! The fixture package is checked on every run. Any other tree is checked with
//! `REPOHOP_AST_PARITY_ROOT=/path/to/repo cargo test --test ast_parity -- --ignored --nocapture`,
//! which prints the counts (used on boltons and bplustree).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use repohop::repo::{IndexOptions, Repository, SymbolKind};
use serde_json::Value;

/// What `ast` or we see of one definition: kind, end line, params, docstring, calls.
type Def = (
    String,
    usize,
    Vec<String>,
    Option<String>,
    Vec<(usize, String)>,
);
/// (path, qualname, start_line) → the definitions found there.
type Defs = BTreeMap<(String, String, usize), Vec<Def>>;

fn ast_reference(root: &Path) -> (Defs, Vec<String>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ast_functions.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(root)
        .output()
        .expect("python3 must be on PATH to run the ast parity check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("ast_functions.py prints JSON");
    let mut defs = Defs::new();
    for f in v["functions"].as_array().expect("functions list") {
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
        let mut calls: Vec<(usize, String)> = f["calls"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| {
                        let line = c[1].as_u64().unwrap_or_default() as usize;
                        (line, c[0].as_str().unwrap_or_default().to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        calls.sort();
        defs.entry((s("path"), s("qualname"), n("start_line")))
            .or_default()
            .push((
                s("kind"),
                n("end_line"),
                params,
                f["docstring"].as_str().map(String::from),
                calls,
            ));
    }
    let errors = v["syntax_errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (defs, errors)
}

fn ours(root: &Path, skip: &[String]) -> Defs {
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(root, &opts).expect("index the tree");
    let mut defs = Defs::new();
    for f in repo.functions() {
        if !f.path.ends_with(".py") || skip.contains(&f.path) {
            continue;
        }
        let kind = match f.kind {
            SymbolKind::Method => "method",
            _ => "function",
        };
        let mut calls: Vec<(usize, String)> =
            f.calls.iter().map(|c| (c.line, c.callee.clone())).collect();
        calls.sort();
        defs.entry((f.path.clone(), f.qualname.clone(), f.span.start_line))
            .or_default()
            .push((
                kind.to_string(),
                f.span.end_line,
                f.params.clone(),
                f.docstring.clone(),
                calls,
            ));
    }
    defs
}

/// Counts (ast, ours) and the differences, one line each.
fn compare(root: &Path) -> (usize, usize, Vec<String>) {
    let (reference, syntax_errors) = ast_reference(root);
    let got = ours(root, &syntax_errors);
    let count = |d: &Defs| d.values().map(Vec::len).sum::<usize>();
    let calls = |d: &Defs| d.values().flatten().map(|def| def.4.len()).sum::<usize>();
    println!(
        "{}: call sites: ast {}, repohop {}",
        root.display(),
        calls(&reference),
        calls(&got)
    );
    let mut diffs = Vec::new();
    for (key, want) in &reference {
        match got.get(key) {
            None => diffs.push(format!("missing {key:?}")),
            Some(have) if have != want => {
                diffs.push(format!("differs {key:?}: ast {want:?}, ours {have:?}"))
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
fn fixture_package_matches_python_ast() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pyproj");
    let (ast, us, diffs) = compare(&root);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert_eq!((ast, us), (16, 16));
}

#[test]
#[ignore = "set REPOHOP_AST_PARITY_ROOT to a Python repository"]
fn external_tree_matches_python_ast() {
    let Ok(root) = std::env::var("REPOHOP_AST_PARITY_ROOT") else {
        panic!("set REPOHOP_AST_PARITY_ROOT to the repository to compare");
    };
    let (ast, us, diffs) = compare(Path::new(&root));
    println!(
        "{root}: ast finds {ast} functions/methods, repohop {us}, {} differences",
        diffs.len()
    );
    for d in diffs.iter().take(20) {
        println!("  {d}");
    }
    assert!(diffs.is_empty());
}
