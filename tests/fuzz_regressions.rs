//! Replays every fuzz target's inputs under `tests/fixtures/fuzz/<target>/` on stable: the
//! seeds (`seed-*`, written by `scripts/fuzz_seeds.py`) and every input that crashed a target
//! before its fix (`crash-*`). Each must run to the end without a panic or an abort. The
//! bodies are the fuzz targets' own (`repohop::fuzzing`). `FUZZ_REPLAY_ONLY=<part of a file
//! name>` replays only the matching files (to check one input against an older build).

use std::path::{Path, PathBuf};

use repohop::fuzzing;

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    let name = |p: &PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        files.iter().any(|p| name(p).starts_with("seed-")),
        "{target} has no seed input"
    );
    match std::env::var("FUZZ_REPLAY_ONLY") {
        Ok(only) => files
            .into_iter()
            .filter(|p| name(p).contains(&only))
            .collect(),
        Err(_) => files,
    }
}

fn replay(target: &str, body: fn(&[u8])) {
    for path in inputs(target) {
        // Named before it runs: an abort leaves no other trace of which input it was.
        eprintln!("replaying {}", path.display());
        body(&std::fs::read(&path).expect("a readable input"));
    }
}

#[test]
fn python_repo() {
    replay("python_repo", fuzzing::python_repo);
}

#[test]
fn java_repo() {
    replay("java_repo", fuzzing::java_repo);
}

#[test]
fn gguf_header() {
    replay("gguf_header", fuzzing::gguf_header);
}

#[test]
fn safetensors_header() {
    replay("safetensors_header", fuzzing::safetensors_header);
}

#[test]
fn tokenizer_json() {
    replay("tokenizer_json", fuzzing::tokenizer_json);
}

#[test]
fn task_jsonl() {
    replay("task_jsonl", fuzzing::task_jsonl);
}

#[test]
fn symbol_cache() {
    replay("symbol_cache", fuzzing::symbol_cache);
}

#[test]
fn vector_sidecar() {
    replay("vector_sidecar", fuzzing::vector_sidecar);
}

// What each crash input gives now: a clear error where the input is unusable, a working
// result where it is usable.

fn input(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn gguf_crash_inputs_are_load_errors_or_load() {
    use repohop::llm::qwen::QwenModel;
    let read = |name: &str| {
        let bytes = input("gguf_header", name);
        let mut reader = std::io::Cursor::new(bytes);
        repohop::llm::read_gguf(Path::new(name), &mut reader).map(|c| (c, reader))
    };
    for (name, want) in [
        ("crash-offset-overflow.gguf", "ends past any file size"),
        ("crash-elem-count-overflow.gguf", "too many elements"),
        ("crash-zero-size-tensor.gguf", "no elements"),
        ("crash-zero-alignment.gguf", "general.alignment is 0"),
    ] {
        let e = read(name).expect_err(name).to_string();
        assert!(e.contains(want), "{name}: {e}");
    }
    // A context window of 2^32 - 1 positions loads and runs: the rotary tables cover the
    // positions in use.
    let (content, mut reader) = read("crash-huge-context.gguf").expect("a readable header");
    let path = Path::new("crash-huge-context.gguf");
    let device = candle_core::Device::Cpu;
    let mut model = QwenModel::from_gguf(path, &content, &mut reader, &device).expect("loads");
    assert_eq!(model.config().context_length, u32::MAX as usize);
    let tokens: Vec<u32> = (0..300).map(|i| i % 16).collect();
    let logits = model
        .forward(&tokens, false)
        .expect("runs past the first tables");
    assert_eq!(logits.dims(), [1, 16]);
}

#[test]
fn safetensors_crash_inputs_are_load_errors_or_load() {
    use repohop::llm::qwen::QwenModel;
    let device = candle_core::Device::Cpu;
    for (name, want) in [
        ("crash-roberta-pad-overflow.bin", "pad_token_id 4294967295"),
        ("crash-embed-huge-layers.bin", "encoder.layer.1."),
        ("crash-embed-huge-head-dim.bin", "has shape"),
    ] {
        let data = input("safetensors_header", name);
        let (config, weights) = fuzzing::split(&data);
        let config = std::str::from_utf8(config).expect("UTF-8 config");
        let e = repohop::embed::network_from_bytes(config, weights, &[0, 1], &device)
            .expect_err(name)
            .to_string();
        assert!(e.contains(want), "{name}: {e}");
    }
    let data = input("safetensors_header", "crash-huge-context.bin");
    let (config, weights) = fuzzing::split(&data);
    let config = std::str::from_utf8(config).expect("UTF-8 config");
    let mut model =
        QwenModel::from_safetensors_bytes(Path::new("config.json"), config, weights, &device)
            .expect("loads");
    assert_eq!(model.config().context_length, 1 << 40);
    assert_eq!(
        model.forward(&[1, 2, 3], false).expect("runs").dims(),
        [1, 16]
    );
}

#[test]
fn tokenizer_crash_inputs_are_refused_with_the_reason() {
    for (name, want) in [
        (
            "crash-strip-decoder.json",
            "Strip decoder strips 3 character(s)",
        ),
        (
            "crash-template-undefined-token.json",
            "uses the special token \"[SEP]\", which it does not define",
        ),
        (
            "crash-template-single-reads-pair.json",
            "single-sequence template reads the second sequence",
        ),
    ] {
        let e = repohop::llm::tokenizer_from_bytes(Path::new(name), &input("tokenizer_json", name))
            .expect_err(name)
            .to_string();
        assert!(e.contains(want), "{name}: {e}");
    }
    for name in ["seed-byte-level-bpe.json", "seed-wordpiece-template.json"] {
        let tok =
            repohop::llm::tokenizer_from_bytes(Path::new(name), &input("tokenizer_json", name))
                .expect(name);
        assert!(!tok
            .encode("def f(x):", true)
            .expect(name)
            .get_ids()
            .is_empty());
    }
}

#[test]
fn task_crash_inputs_are_refused_or_spliced() {
    use repohop::eval::body::{locate, splice};
    use repohop::eval::tasks::{parse_tasks, Task};
    let data = input("task_jsonl", "crash-huge-indent.bin");
    let (tasks, _) = fuzzing::split(&data);
    let e = parse_tasks(std::str::from_utf8(tasks).unwrap(), Path::new("t.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("indent 1152921504606846976 is over 1024 spaces"),
        "{e}"
    );

    // Lines indented with U+2000 and U+2001 share no margin (textwrap counts only spaces and
    // tabs); each is indented to the body's place, whole.
    let data = input("task_jsonl", "crash-reindent-multibyte.bin");
    let (tasks, source) = fuzzing::split(&data);
    let source = std::str::from_utf8(source).unwrap();
    let tasks = parse_tasks(std::str::from_utf8(tasks).unwrap(), Path::new("t.jsonl")).unwrap();
    let Task::Function(task) = &tasks[0] else {
        panic!("a function task")
    };
    let span = locate(task, source).expect("located");
    assert_eq!(
        splice(source, span, "\u{2000}y = 2\n\u{2001}return y\n"),
        "def greet(name):\n\n    \u{2000}y = 2\n    \u{2001}return y\n\n"
    );
}

#[test]
fn a_missing_target_lists_candidates_whatever_its_characters() {
    let text = "#\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\ndef f():\n    pass\n";
    let repo =
        repohop::repo::Repository::from_sources(&[("pkg/__init__.py", ""), ("pkg/mod.py", text)]);
    let e = repohop::repo::resolve_target(&repo, "#\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("close candidates:\n  pkg.mod.f (pkg/mod.py:2)"),
        "{e}"
    );
}
