//! `repohop index --embed` and `repohop search` on a fixture repository, with the tiny
//! RoBERTa checkpoint as the embedder (fast; the numerics are checked in embed_models.rs).

use std::path::{Path, PathBuf};
use std::process::Command;

mod eval_common;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn model() -> String {
    fixtures()
        .join("embed/tiny-roberta")
        .to_string_lossy()
        .into_owned()
}

fn repohop(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(args)
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
fn index_embed_is_incremental_and_search_prints_ranked_json() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("pyproj");
    eval_common::copy_dir(&fixtures().join("pyproj"), &repo);
    let r = repo.to_str().unwrap();
    let m = model();

    let first = repohop(&["index", r, "--embed", "--embed-model", &m, "--json"]);
    let e = &first["embeddings"];
    let rows = e["rows"].as_u64().unwrap();
    assert!(rows >= 10, "{e}");
    assert_eq!(e["embedded"], rows);

    let again = repohop(&["index", r, "--embed", "--embed-model", &m, "--json"]);
    assert_eq!(again["embeddings"]["embedded"], 0);
    assert_eq!(again["embeddings"]["reused"], rows);

    // Edit every function header of pathops.py (3 functions): exactly those are re-embedded.
    let file = repo.join("walkway/pathops.py");
    let text = std::fs::read_to_string(&file).unwrap();
    let edited: String = text
        .lines()
        .map(|l| {
            if l.starts_with("def ") && l.ends_with(':') {
                format!("{l}  # edited\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&file, edited).unwrap();
    let after = repohop(&["index", r, "--embed", "--embed-model", &m, "--json"]);
    assert_eq!(
        after["embeddings"]["embedded"], 3,
        "{}",
        after["embeddings"]
    );
    assert_eq!(after["embeddings"]["reused"].as_u64().unwrap(), rows - 3);

    let hits = repohop(&[
        "search",
        r,
        "def join_path(*paths):",
        "-k",
        "4",
        "--embed-model",
        &m,
        "--json",
    ]);
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 4);
    for h in hits {
        for field in ["qualname", "path", "start_line", "score"] {
            assert!(!h[field].is_null(), "{field} missing in {h}");
        }
        // Test files are hidden from retrieval.
        assert!(!h["path"].as_str().unwrap().starts_with("tests/"), "{h}");
    }
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[test]
fn search_reports_a_missing_model_clearly() {
    // The cache goes to a temporary folder: tests never write into the fixtures.
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args([
            "search",
            fixtures().join("pyproj").to_str().unwrap(),
            "x",
            "--embed-model",
            "/no/such/dir",
            "--cache-dir",
            cache.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/no/such/dir") && err.contains("not a built-in alias"),
        "{err}"
    );
}
