//! Embedders against the reference implementation (sentence-transformers) on fixed texts,
//! batching invariance, and bad model directories / inputs.
//! Golden files: `scripts/golden_embed.py` → `tests/fixtures/embed/`.

use std::path::{Path, PathBuf};

use repohop::embed::{self, EmbedError, Embedder, LocalEmbedder, ModelDir, TextKind};

mod eval_common;
mod test_device;
use test_device::test_device;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed")
}

fn golden(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn vectors(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

fn tiny(name: &str) -> LocalEmbedder {
    let dir = fixtures().join(name);
    embed::load(dir.to_str().unwrap(), &test_device()).unwrap()
}

/// The default model, from the models directory (`REPOHOP_MODELS`; fetched by the test script).
fn minilm() -> LocalEmbedder {
    embed::load("minilm", &candle_core::Device::Cpu).unwrap_or_else(|e| {
        panic!("all-MiniLM-L6-v2 is needed for this test ({e}); run `repohop models fetch minilm` or set REPOHOP_MODELS")
    })
}

fn assert_matches(e: &dyn Embedder, texts: &[String], want: &[Vec<f32>], kind: TextKind) -> usize {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got = e.embed(&refs, kind).unwrap();
    assert_eq!(got.len(), want.len());
    let mut worst = 1f32;
    for (i, w) in want.iter().enumerate() {
        let c = cosine(got.row(i), w);
        worst = worst.min(c);
        assert!(c >= 0.9999, "text #{i}: cosine {c} to the reference");
        // Normalised as the reference (its modules.json has a Normalize step).
        let norm: f32 = got.row(i).iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "text #{i}: norm {norm}");
    }
    eprintln!(
        "{} ({kind:?}) on {:?}: lowest cosine to the reference {worst}",
        e.info().name,
        test_device().location()
    );
    got.stats.truncated
}

fn count_over(g: &serde_json::Value, limit: u64) -> usize {
    g["full_token_counts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.as_u64().unwrap() > limit)
        .count()
}

#[test]
fn minilm_matches_sentence_transformers() {
    let g = golden("minilm.json");
    let e = minilm();
    assert_eq!(e.info().dim, 384);
    assert_eq!(
        e.info().max_tokens,
        256,
        "sentence_bert_config.json sets 256"
    );
    assert_eq!(e.info().pooling, embed::Pooling::Mean);
    let truncated = assert_matches(
        &e,
        &strings(&g["texts"]),
        &vectors(&g["vectors"]),
        TextKind::Document,
    );
    // One text is longer than 512 tokens (and so than 256).
    assert_eq!(truncated, count_over(&g, 256));
    assert_eq!(truncated, 1);
}

#[test]
fn tiny_roberta_matches_reference() {
    let g = golden("tiny-roberta.json");
    let e = tiny("tiny-roberta");
    assert_eq!(e.info().pooling, embed::Pooling::Cls);
    assert_eq!(e.info().max_tokens, 38);
    let truncated = assert_matches(
        &e,
        &strings(&g["texts"]),
        &vectors(&g["vectors"]),
        TextKind::Document,
    );
    assert_eq!(truncated, count_over(&g, 38));
}

#[test]
fn tiny_qwen3_matches_reference_for_documents_and_queries() {
    let g = golden("tiny-qwen3.json");
    let e = tiny("tiny-qwen3");
    assert_eq!(e.info().pooling, embed::Pooling::LastToken);
    let truncated = assert_matches(
        &e,
        &strings(&g["texts"]),
        &vectors(&g["vectors"]),
        TextKind::Document,
    );
    assert_eq!(truncated, count_over(&g, 64));
    assert_matches(
        &e,
        &strings(&g["queries"]),
        &vectors(&g["query_vectors"]),
        TextKind::Query,
    );
    // The query prompt matters: the same text as a document embeds differently.
    let q = strings(&g["queries"]);
    let as_doc = e.embed(&[q[0].as_str()], TextKind::Document).unwrap();
    let as_query = e.embed(&[q[0].as_str()], TextKind::Query).unwrap();
    assert!(cosine(as_doc.row(0), as_query.row(0)) < 0.999);
}

/// 64 texts of varied length, then each alone: the same vectors.
fn assert_batch_invariant(e: &mut LocalEmbedder) {
    let texts: Vec<String> = (0..64)
        .map(|i| {
            let body = "value = compute(value, step)\n    ".repeat(1 + (i * 7) % 9);
            format!("def f_{i}(value, step={i}):\n    {body}return value")
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    e.set_token_budget(1 << 20);
    let together = e.embed(&refs, TextKind::Document).unwrap();
    assert_eq!(together.stats.batches, 1, "all 64 in one padded batch");
    for (i, t) in refs.iter().enumerate() {
        let alone = e.embed(&[t], TextKind::Document).unwrap();
        let c = cosine(alone.row(0), together.row(i));
        assert!(
            c >= 0.9999,
            "text #{i}: cosine {c} between batch of 1 and batch of 64"
        );
    }
}

#[test]
fn minilm_vectors_do_not_depend_on_batch_neighbours() {
    assert_batch_invariant(&mut minilm());
}

#[test]
fn roberta_and_qwen3_vectors_do_not_depend_on_batch_neighbours() {
    assert_batch_invariant(&mut tiny("tiny-roberta"));
    assert_batch_invariant(&mut tiny("tiny-qwen3"));
}

#[test]
fn token_budget_splits_batches_without_changing_vectors() {
    let mut e = tiny("tiny-roberta");
    let texts = [
        "a = 1",
        "def add(a, b):\n    return a + b",
        "x",
        "class LRUCache:",
    ];
    let big = e.embed(&texts, TextKind::Document).unwrap();
    e.set_token_budget(16);
    let small = e.embed(&texts, TextKind::Document).unwrap();
    assert!(small.stats.batches > big.stats.batches);
    assert_eq!(small.stats.tokens, big.stats.tokens);
    for i in 0..texts.len() {
        assert!(cosine(big.row(i), small.row(i)) >= 0.9999);
    }
}

// ---- bad input -------------------------------------------------------------------------

#[test]
fn empty_and_whitespace_texts_are_errors_not_zero_vectors() {
    let e = tiny("tiny-roberta");
    for bad in ["", "   \n\t "] {
        match e.embed(&["fine", bad], TextKind::Document) {
            Err(EmbedError::EmptyText { index: 1 }) => {}
            other => panic!("{bad:?}: expected EmptyText, got {other:?}"),
        }
    }
}

#[test]
fn a_one_megabyte_function_is_truncated_and_counted() {
    let e = tiny("tiny-qwen3");
    let huge = format!("def huge():\n{}", "    x = x + 1\n".repeat(1 << 16));
    assert!(huge.len() > 900_000);
    let got = e.embed(&[huge.as_str(), "x"], TextKind::Document).unwrap();
    assert_eq!(got.stats.truncated, 1);
    assert_eq!(got.stats.tokens, 64 + 2);
    assert!(got.row(0).iter().all(|x| x.is_finite()) && got.row(0).iter().any(|x| *x != 0.0));
}

/// A copy of a tiny model folder to break.
fn broken_copy(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    eval_common::copy_dir(&fixtures().join(name), tmp.path());
    tmp
}

fn load_dir(dir: &Path) -> Result<LocalEmbedder, EmbedError> {
    embed::load(dir.to_str().unwrap(), &candle_core::Device::Cpu)
}

#[test]
fn a_model_dir_without_config_json_names_the_file() {
    let dir = broken_copy("tiny-roberta");
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    let err = load_dir(dir.path()).err().unwrap();
    assert!(
        matches!(err, EmbedError::MissingFile { ref path, .. } if path.ends_with("config.json")),
        "{err}"
    );
    assert!(err.to_string().contains("config.json"));
}

#[test]
fn truncated_safetensors_is_reported_with_its_path() {
    let dir = broken_copy("tiny-roberta");
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_dir(dir.path()).err().unwrap();
    assert!(
        matches!(err, EmbedError::BadFile { ref path, .. } if path.ends_with("model.safetensors")),
        "{err}"
    );
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn a_tokenizer_from_another_model_is_rejected() {
    let Ok(minilm_dir) = embed::resolve("minilm") else {
        panic!("all-MiniLM-L6-v2 is needed for this test; run `repohop models fetch minilm`")
    };
    let dir = broken_copy("tiny-roberta");
    // MiniLM's 30,522-token vocabulary against a 400-row embedding table.
    std::fs::copy(
        minilm_dir.path.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    match load_dir(dir.path()) {
        Err(EmbedError::TokenizerMismatch {
            tokenizer, rows, ..
        }) => {
            assert_eq!((tokenizer, rows), (30522, 400));
        }
        other => panic!("expected TokenizerMismatch, got {:?}", other.err()),
    }
}

#[test]
fn corrupt_config_and_unknown_names_are_clear_errors() {
    let dir = broken_copy("tiny-qwen3");
    std::fs::write(dir.path().join("config.json"), "{ not json").unwrap();
    let err = load_dir(dir.path()).err().unwrap();
    assert!(
        matches!(err, EmbedError::BadFile { ref path, .. } if path.ends_with("config.json")),
        "{err}"
    );

    let dir = broken_copy("tiny-qwen3");
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let err = load_dir(dir.path()).err().unwrap();
    assert!(
        matches!(err, EmbedError::MissingFile { ref path, .. } if path.ends_with("tokenizer.json")),
        "{err}"
    );

    let err = embed::resolve("no-such-model").err().unwrap();
    assert!(err.to_string().contains("minilm"), "{err}");
    let err = embed::resolve("qwen2.5-coder-1.5b").err().unwrap();
    assert!(err.to_string().contains("not an embedder"), "{err}");
}

/// The load error of a tiny model whose config.json was edited: it must name config.json
/// and `expected`.
fn config_error(name: &str, edit: impl FnOnce(&mut serde_json::Value), expected: &str) {
    let dir = broken_copy(name);
    let path = dir.path().join("config.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut c);
    std::fs::write(&path, c.to_string()).unwrap();
    let Some(err) = load_dir(dir.path()).err() else {
        panic!("{name} loaded; expected an error naming {expected:?}")
    };
    assert!(
        matches!(err, EmbedError::BadFile { ref path, .. } if path.ends_with("config.json")),
        "{err}"
    );
    assert!(err.to_string().contains(expected), "{err}");
}

#[test]
fn configs_the_kernels_cannot_run_are_rejected() {
    // Each loaded before, into NaN or meaningless vectors.
    config_error(
        "tiny-qwen3",
        |c| c["rope_parameters"]["rope_theta"] = 0.0.into(),
        "rope_theta 0",
    );
    config_error(
        "tiny-qwen3",
        |c| c["rms_norm_eps"] = (-1.0).into(),
        "rms_norm_eps -1",
    );
    config_error(
        "tiny-roberta",
        |c| c["layer_norm_eps"] = (-1.0).into(),
        "layer_norm_eps -1",
    );
    // Rejected before too, now with the field's own message.
    config_error(
        "tiny-qwen3",
        |c| c["num_key_value_heads"] = 0.into(),
        "num_key_value_heads",
    );
    config_error("tiny-qwen3", |c| c["head_dim"] = 15.into(), "head_dim 15");
}

#[test]
fn hub_repo_ids_resolve_from_the_local_cache_offline() {
    // A fake HF cache holding the tiny model as `acme/tiny-roberta`.
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("hub/models--acme--tiny-roberta");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    eval_common::copy_dir(
        &fixtures().join("tiny-roberta"),
        &repo.join("snapshots").join(commit),
    );
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    std::env::set_var("HF_HOME", home.path());
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let dir: ModelDir = embed::resolve("acme/tiny-roberta").unwrap();
    assert_eq!(dir.path, repo.join("snapshots").join(commit));
    let e = LocalEmbedder::from_dir(&dir, &candle_core::Device::Cpu).unwrap();
    assert_eq!(e.info().dim, 32);
    let err = embed::resolve("acme/absent").err().unwrap();
    assert!(err.to_string().contains("HF_HUB_OFFLINE=1"), "{err}");
}

#[test]
fn devices_parse_and_cuda_needs_the_feature() {
    assert!(matches!(
        embed::parse_device("cpu"),
        Ok(candle_core::Device::Cpu)
    ));
    assert!(embed::parse_device("gpu").is_err());
    assert!(embed::parse_device("cuda:x").is_err());
    if !cfg!(feature = "cuda") {
        let err = embed::parse_device("cuda:0").err().unwrap();
        assert!(err.to_string().contains("--features cuda"), "{err}");
    } else if test_device().is_cuda() {
        assert!(embed::parse_device("cuda").unwrap().is_cuda());
        assert!(embed::parse_device("cuda:0").unwrap().is_cuda());
        assert!(embed::parse_device("cuda:99").is_err());
    } else {
        assert!(embed::parse_device("cuda:0").is_err(), "no GPU here");
    }
}
