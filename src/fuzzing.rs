//! The bodies of the fuzz targets (`fuzz/fuzz_targets/`), one per kind of untrusted input. They
//! live in the library so that each target is one call and `tests/fuzz_regressions.rs` replays
//! the same code on stable. Each body feeds the bytes to the real parser or loader and then uses
//! what it returns the way the product does: an error is a fine outcome, a panic or an abort is
//! a bug. Nothing here catches panics.
//!
//! Inputs made of two files (a config and its weights, a task file and its source file, …)
//! start with the first part's length as a little-endian `u16` (see [`join`]).

use std::io::Cursor;
use std::path::Path;

use candle_core::Device;

use crate::eval::body::{body_text, is_trivial, locate, splice};
use crate::eval::locate::locate_in_repository;
use crate::eval::tasks::{parse_tasks, Task};
use crate::generate::{LocalView, Target};
use crate::index::vectors::{Row, VectorIndex};
use crate::llm::qwen::QwenModel;
use crate::repo::cache::{check_symbols, content_hash, SymbolCache};
use crate::repo::{resolve_target, MaskedView, Repository, TreeOptions};

/// The two parts of a two-file input: a `u16` (little-endian) length of the first part, the
/// first part, the rest. A length past the end takes everything.
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return (data, &[]);
    };
    rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()))
}

/// The input [`split`] parts into `first` and `second` (for seeds and tests).
pub fn join(first: &[u8], second: &[u8]) -> Vec<u8> {
    let len = u16::try_from(first.len()).expect("a first part under 64 KiB");
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(first);
    out.extend_from_slice(second);
    out
}

const PYTHON_FILE: &str = "pkg/mod.py";
const JAVA_FILE: &str = "src/main/java/p/A.java";

/// A Python file, indexed and masked as a file of a repository.
pub fn python_repo(data: &[u8]) {
    source_file(PYTHON_FILE, data);
}

/// A Java file, indexed and masked as a file of a repository.
pub fn java_repo(data: &[u8]) {
    source_file(JAVA_FILE, data);
}

fn source_file(path: &str, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let repo = Repository::from_sources(&[("pkg/__init__.py", ""), (path, &*text)]);
    exercise_repository(&repo, path, &text);
}

/// What the retrievers do with a repository file: resolve targets (found or not), mask each
/// function in turn, read the masked view, render the target's file as the prompt shows it.
fn exercise_repository(repo: &Repository, path: &str, text: &str) {
    let file = repo.file_id(path).expect("the file is in the repository");
    if let Some(symbols) = repo.file_symbols(file) {
        // The symbol cache refuses symbols that do not fit their file: parsing must not
        // produce any.
        if let Err(why) = check_symbols(symbols, path, text) {
            panic!("parsed symbols do not fit their file: {why}");
        }
    }
    let first_line: String = text.lines().next().unwrap_or("").chars().take(80).collect();
    for target in [
        format!("{path}::zz_absent"),
        "zz_absent".to_string(),
        format!("{path}::{first_line}"),
        first_line,
    ] {
        let _ = resolve_target(repo, &target);
    }
    let tree = TreeOptions {
        budget: 2000,
        functions: true,
    };
    let _ = MaskedView::new(repo, None, false).tree(tree);
    for &id in repo.functions_in(file).iter().take(16) {
        let f = repo.function(id);
        let _ = resolve_target(repo, &f.qualname);
        let _ = resolve_target(
            repo,
            &format!("{path}::{}@{}", f.qualname, f.span.start_line),
        );
        let view = MaskedView::new(repo, Some(id), false);
        let _ = view.file_text(path);
        let _ = view.tree(tree);
        for (other, _) in view.functions() {
            let _ = view.function_code(other);
            let _ = view.signature_text(other);
        }
        if let Ok(target) = Target::of(repo, id) {
            if let Some(local) = LocalView::new(&view, &target) {
                let _ = local.render(1500);
            }
        }
    }
}

/// The GGUF loader: header, tensor infos, the configuration, every tensor, then one token.
pub fn gguf_header(data: &[u8]) {
    let path = Path::new("model.gguf");
    let mut reader = Cursor::new(data);
    let Ok(content) = crate::llm::read_gguf(path, &mut reader) else {
        return;
    };
    if let Ok(mut model) = QwenModel::from_gguf(path, &content, &mut reader, &Device::Cpu) {
        let _ = model.forward(&[0], false);
    }
}

/// `config.json` and a safetensors file, through the generator's loader and the embedders'.
pub fn safetensors_header(data: &[u8]) {
    let (config, weights) = split(data);
    let config = String::from_utf8_lossy(config);
    let device = Device::Cpu;
    if let Ok(mut model) =
        QwenModel::from_safetensors_bytes(Path::new("config.json"), &config, weights, &device)
    {
        let _ = model.forward(&[0], false);
    }
    let _ = crate::embed::network_from_bytes(&config, weights, &[0, 1], &device);
}

/// A `tokenizer.json`: loading, then what the runtime does with a tokenizer (encode with
/// special tokens, decode, the per-token byte table).
pub fn tokenizer_json(data: &[u8]) {
    let Ok(tok) = crate::llm::tokenizer_from_bytes(Path::new("tokenizer.json"), data) else {
        return;
    };
    let text = "def f(x):\n    return x  # héllo 你好 <|endoftext|> [CLS] \u{1F600}";
    if let Ok(enc) = tok.encode(text, true) {
        let _ = tok.decode(enc.get_ids(), false);
        let _ = tok.decode(enc.get_ids(), true);
    }
    let _ = tok.encode((text, "x = 1"), true);
    let vocab = tok.get_vocab_size(true).min(4096);
    let ids: Vec<u32> = (0..vocab as u32).collect();
    for id in &ids {
        let _ = tok.decode(&[*id], false);
    }
    let _ = tok.decode(&ids, true);
    let _ = crate::llm::TokenBytes::new(&tok, vocab);
}

/// A DevEval task file and the source file its first tasks point at: parsing, locating each
/// body (by recorded lines, else through the repository model), reading and splicing it.
pub fn task_jsonl(data: &[u8]) {
    let (tasks, source) = split(data);
    let tasks = String::from_utf8_lossy(tasks);
    let file_text = String::from_utf8_lossy(source);
    let Ok(tasks) = parse_tasks(&tasks, Path::new("tasks.jsonl")) else {
        return;
    };
    for task in tasks.iter().take(8) {
        let Task::Function(t) = task else { continue };
        let _ = t.dependency.kinds();
        let span = match locate(t, &file_text) {
            Ok(span) => Some(span),
            Err(_) => {
                let repo = Repository::from_sources(&[(t.file_in_project(), &*file_text)]);
                locate_in_repository(t, &repo, &file_text).ok()
            }
        };
        if let Some(span) = span {
            let body = body_text(&file_text, span);
            let _ = is_trivial(&body);
            let _ = splice(&file_text, span, &body);
            let requirement = t.requirement.as_ref().map(|r| r.functionality.as_str());
            let _ = splice(&file_text, span, requirement.unwrap_or("pass"));
        }
    }
}

/// The symbol cache file and the source file it describes (`pkg/mod.py`), read as indexing
/// reads them; the cached symbols then serve the repository model.
///
/// A fuzzer cannot forge a sha256 or guess the version string: a header whose `repohop` is
/// `"*"` gets this version's, and an entry whose `hash` is `"*"` gets the source's, so that
/// entries reach the checks that guard their use.
pub fn symbol_cache(data: &[u8]) {
    let (cache, source) = split(data);
    let text = String::from_utf8_lossy(source);
    let cache = with_wildcards_filled(cache, &text);
    let (mut cache, _) = SymbolCache::from_bytes(Path::new(".repohop"), &cache);
    let repo = Repository::from_sources_cached(
        &[("pkg/__init__.py", ""), (PYTHON_FILE, &*text)],
        &mut cache,
    );
    exercise_repository(&repo, PYTHON_FILE, &text);
}

/// The cache file `bytes` with its `"*"` version and hashes filled in (see [`symbol_cache`]).
fn with_wildcards_filled(bytes: &[u8], text: &str) -> Vec<u8> {
    let (head, body) = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => return bytes.to_vec(),
    };
    let star = |v: &serde_json::Value| v.as_str() == Some("*");
    let mut head = head.to_vec();
    if let Ok(serde_json::Value::Object(mut h)) = serde_json::from_slice(&head) {
        if h.get("repohop").is_some_and(star) {
            h.insert("repohop".into(), env!("CARGO_PKG_VERSION").into());
            head = serde_json::to_vec(&h).expect("JSON values serialize");
        }
    }
    let mut body = body.to_vec();
    if let Ok(serde_json::Value::Object(mut entries)) = serde_json::from_slice(&body) {
        let hash = content_hash(text.as_bytes());
        for entry in entries.values_mut().filter_map(|e| e.as_object_mut()) {
            if entry.get("hash").is_some_and(star) {
                entry.insert("hash".into(), hash.clone().into());
            }
        }
        body = serde_json::to_vec(&entries).expect("JSON values serialize");
    }
    head.push(b'\n');
    head.extend_from_slice(&body);
    head
}

/// The vector index's sidecar and matrix, read as `search` reads them, then searched.
///
/// The sidecar's dimension is taken as the expected one when it is small, and a
/// `matrix_sha256` of `"fuzz"` is replaced by the checksum of the matrix, which a fuzzer
/// cannot forge.
pub fn vector_sidecar(data: &[u8]) {
    let (side, matrix) = split(data);
    let mut side = side.to_vec();
    let mut dim = 4;
    if let Ok(serde_json::Value::Object(mut v)) = serde_json::from_slice(&side) {
        if let Some(d) = v.get("dim").and_then(|d| d.as_u64()).filter(|&d| d <= 64) {
            dim = d as usize;
        }
        if v.get("matrix_sha256").and_then(|s| s.as_str()) == Some("fuzz") {
            let sum = safetensors::SafeTensors::deserialize(matrix)
                .ok()
                .and_then(|st| st.tensor("vectors").ok().map(|t| sha256_hex(t.data())));
            if let Some(sum) = sum {
                v.insert("matrix_sha256".into(), sum.into());
                side = serde_json::to_vec(&v).expect("JSON values serialize");
            }
        }
    }
    let Ok(index) = VectorIndex::from_bytes(
        (Path::new("vectors-m.json"), &side[..]),
        (Path::new("vectors-m.safetensors"), matrix),
        "m",
        dim,
    ) else {
        return;
    };
    for i in 0..index.len() {
        let _ = index.vector(i);
    }
    let query: Vec<f32> = (0..dim).map(|i| i as f32 - 1.5).collect();
    let _ = index.scores(&query);
    for k in [0, 1, 3, usize::MAX] {
        let _ = index.search(&query, k, &|r: &Row| !r.path.is_empty());
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
