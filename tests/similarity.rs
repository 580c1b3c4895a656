//! The similarity baselines on the DyCoder code path: BM25 functions (`--sparse bm25`),
//! SimpleRAG slices, and `repohop generate --signature-file` writing a new function.

use std::path::Path;
use std::process::Command;

mod eval_common;

use repohop::embed;
use repohop::generate::pipeline::{self, Corpus, Embeddings, Method, PipelineOptions, Similarity};
use repohop::generate::Target;
use repohop::index::vectors::VectorIndex;
use repohop::llm::{FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError, Prompt};
use repohop::repo::mask::MaskedView;
use repohop::repo::pystr::without_docstring;
use repohop::repo::{resolve_target, IndexOptions, Repository};
use repohop::retrieve::slices;

fn fixture_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dyproj")
}

fn fixture() -> Repository {
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    Repository::open(&fixture_root(), &opts).expect("fixture opens")
}

/// Generation only: answers every request with the same function.
struct FixedAnswer;

impl Llm for FixedAnswer {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        let text = "```python\ndef iteratepath(path):\n    return path.split('/')\n```".to_string();
        Ok(GenerateResponse {
            prompt_tokens: self.count_tokens(&request.prompt)?,
            generated_tokens: 10,
            ..GenerateResponse::new(text, FinishReason::Stop)
        })
    }
    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
        Ok(match prompt {
            Prompt::Chat(m) => m.iter().map(|m| m.content.len() / 4).sum(),
            _ => 0,
        })
    }
    fn context_window(&self) -> usize {
        32_768
    }
    fn name(&self) -> &str {
        "fixed"
    }
}

#[test]
fn bm25_similarity_needs_no_embeddings_and_ranks_shared_identifiers_first() {
    let repo = fixture();
    let id = resolve_target(&repo, "fspath.path.iteratepath").unwrap();
    let view = MaskedView::new(&repo, Some(id), false);
    let target = Target::of(&repo, id).unwrap();
    let opts = PipelineOptions {
        similarity: Similarity::Bm25,
        top_sim: 3,
        ..PipelineOptions::new(Method::Dense)
    };
    assert_eq!(Method::Dense.corpus(Similarity::Bm25), None);
    let run = pipeline::run(&mut FixedAnswer, &view, &target, None, &opts, None).unwrap();
    assert_eq!(run.context.len(), 3);
    assert!(run.context.iter().all(|c| c.source == "bm25"));
    assert!(run
        .context
        .iter()
        .all(|c| c.qualname != "fspath.path.iteratepath"));
    // Like dense retrieval, BM25 ranks the look-alikes of the other modules (shared words:
    // iterate, components, path) above the unlike helper `normpath`.
    let names: Vec<&str> = run.context.iter().map(|c| c.qualname.as_str()).collect();
    assert_eq!(
        names,
        [
            "fspath.text.iterate_words",
            "fspath.url.path_components",
            "fspath.url.iterate_url_path"
        ]
    );
    assert!(run.similar.windows(2).all(|w| w[0].score >= w[1].score));
    assert_eq!(run.generation.completion.body, "return path.split('/')\n");
}

#[test]
fn simplerag_serves_slices_but_none_that_shows_the_masked_target() {
    let repo = fixture();
    let id = resolve_target(&repo, "fspath.path.iteratepath").unwrap();
    let span = repo.function(id).span;
    let target = Target::of(&repo, id).unwrap();
    let embedder = embed::load(embed::DEFAULT_MODEL, &embed::parse_device("cpu").unwrap())
        .expect("default embedder (run `repohop models fetch`)");
    let dir = tempfile::tempdir().unwrap();
    let items = Corpus::Slices.items(&repo);
    assert!(items.iter().all(|i| i.key.contains('#')));
    let (index, _) = VectorIndex::update(dir.path(), &embedder, &items).unwrap();
    let query = embed::text::query_text(&target.signature, target.docstring.as_deref());
    let overlaps = |s: &slices::Slice| {
        s.path == "fspath/path.py" && s.start_line <= span.end_line && s.end_line >= span.start_line
    };

    // Without a mask the best slice is the one holding the target itself...
    let open = MaskedView::new(&repo, None, false);
    let hits = slices::top_k(&open, &embedder, &index, &query, 3).unwrap();
    assert!(overlaps(&hits[0]), "{hits:?}");
    // ...with the mask no slice overlaps its lines, and each slice carries its file's lines.
    let view = MaskedView::new(&repo, Some(id), false);
    let hits = slices::top_k(&view, &embedder, &index, &query, 5).unwrap();
    assert_eq!(hits.len(), 5);
    assert!(hits.iter().all(|s| !overlaps(s)), "{hits:?}");
    let text = std::fs::read_to_string(fixture_root().join(&hits[0].path)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        hits[0].code.trim_end(),
        lines[hits[0].start_line - 1..hits[0].end_line]
            .join("\n")
            .trim_end()
    );

    let opts = PipelineOptions {
        top_sim: 4,
        ..PipelineOptions::new(Method::Simplerag)
    };
    let e = Embeddings {
        embedder: &embedder,
        index: &index,
    };
    let run = pipeline::run(&mut FixedAnswer, &view, &target, Some(&e), &opts, None).unwrap();
    assert_eq!(run.context.len(), 4);
    assert!(run.context.iter().all(|c| c.source == "simplerag"));
    assert!(!run
        .generation
        .prompt
        .contains("for component in _path.strip"));
}

/// The real default models: a new function from a signature file, appended with `--write`.
#[test]
fn generate_writes_a_new_function_from_a_signature_file() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("repo");
    std::fs::create_dir_all(root.join("fspath")).unwrap();
    for f in ["__init__.py", "path.py", "text.py", "url.py"] {
        std::fs::copy(
            fixture_root().join("fspath").join(f),
            root.join("fspath").join(f),
        )
        .unwrap();
    }
    let sig = work.path().join("sig.py");
    std::fs::write(
        &sig,
        "def depth(path):\n    \"\"\"Return how many components the normalized path has.\"\"\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["generate", "--repo"])
        .arg(&root)
        .arg("--signature-file")
        .arg(&sig)
        .args([
            "--file",
            "fspath/path.py",
            "--method",
            "dense",
            "--sparse",
            "bm25",
        ])
        .args(["--top-sim", "3", "--max-tokens", "160", "--write", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let function = v["function"].as_str().unwrap();
    assert!(function.starts_with("def depth(path):\n"), "{function}");
    assert_eq!(v["similarity"], "bm25");
    assert!(v["context"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["source"] == "bm25"));
    // The generation phase step by step: the greedy answer first, and every answer's tokens
    // in the totals.
    let steps = v["trace"]["steps"].as_array().unwrap();
    assert_eq!(steps[0]["step"], "first", "{steps:?}");
    let sum = |key: &str| -> u64 { steps.iter().map(|s| s[key].as_u64().unwrap()).sum() };
    let tokens = &v["tokens"]["generation"];
    assert_eq!(sum("prompt_tokens"), tokens["in"].as_u64().unwrap(), "{v}");
    assert_eq!(
        sum("generated_tokens"),
        tokens["out"].as_u64().unwrap(),
        "{v}"
    );
    assert_eq!(
        sum("cached_prompt_tokens"),
        tokens["cached"].as_u64().unwrap()
    );

    let original = std::fs::read_to_string(fixture_root().join("fspath/path.py")).unwrap();
    let written = std::fs::read_to_string(root.join("fspath/path.py")).unwrap();
    assert!(written.starts_with(original.trim_end()));
    // The function under the signature file's own docstring, not the model's version of it.
    let code = without_docstring(v["body"].as_str().unwrap());
    let code: String = code
        .lines()
        .map(|l| match l {
            "" => "\n".to_string(),
            l => format!("    {l}\n"),
        })
        .collect();
    let doc = "\"\"\"Return how many components the normalized path has.\"\"\"";
    assert_eq!(
        &written[original.trim_end().len()..],
        format!("\n\n\ndef depth(path):\n    {doc}\n{}\n", code.trim_end()),
        "{function}"
    );
    let backup = std::fs::read_to_string(root.join("fspath/path.py.repohop.bak")).unwrap();
    assert_eq!(backup, original);
    // The written file still parses, with the new function in it.
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(&root, &opts).unwrap();
    assert!(resolve_target(&repo, "fspath.path.depth").is_ok());

    // A file outside the repository model is refused before any model loads.
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["generate", "--repo"])
        .arg(&root)
        .arg("--signature-file")
        .arg(&sig)
        .args(["--file", "fspath/missing.py"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a parsed source file"));
}

/// `generate --targets`: a JSON line per target; run two at a time on one engine, the same
/// functions as one after another. A bad line is refused before any model loads.
#[test]
fn many_targets_give_one_line_each_and_the_same_functions_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let targets = tmp.path().join("targets.jsonl");
    std::fs::write(
        &targets,
        "{\"target\": \"fspath.path.parts\"}\n\
         \n\
         {\"target\": \"fspath.path.join\"}\n\
         {\"signature\": \"def depth(path):\\n    \\\"\\\"\\\"How many components the path has.\\\"\\\"\\\"\\n\", \"file\": \"fspath/path.py\"}\n",
    )
    .unwrap();
    let run = |extra: &[&str]| -> Vec<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
            .args(["generate", "--repo"])
            .arg(fixture_root())
            .arg("--targets")
            .arg(&targets)
            .args(["--method", "direct", "--no-grounding", "--max-tokens", "96"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.sort_by_key(|v| v["line"].as_u64());
        lines
    };
    let one = run(&[]);
    assert_eq!(
        one.iter()
            .map(|v| v["line"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3, 4]
    );
    assert!(one[0]["function"]
        .as_str()
        .unwrap()
        .starts_with("def parts(path)"));
    assert!(one[2]["function"]
        .as_str()
        .unwrap()
        .starts_with("def depth(path)"));
    let two = run(&["--concurrency", "2"]);
    let functions = |v: &[serde_json::Value]| -> Vec<String> {
        v.iter()
            .map(|x| x["function"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(functions(&two), functions(&one));

    std::fs::write(
        &targets,
        "{\"target\": \"fspath.path.parts\"}\n{\"file\": \"x.py\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["generate", "--repo"])
        .arg(fixture_root())
        .arg("--targets")
        .arg(&targets)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2: give either"), "{stderr}");
}

/// `--select tests` with the real default model: it writes tests for the target from its file,
/// every answer a selection may keep runs them under the given Python in a copy of the
/// repository, and the trace says how many each passed. The flags it needs are checked first.
/// It works on its own copy of the fixture: the other tests here write its symbol cache.
#[test]
fn generate_keeps_the_answer_passing_most_of_the_models_tests() {
    let cache = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    eval_common::copy_dir(&fixture_root().join("fspath"), &repo.path().join("fspath"));
    let generate = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_repohop"))
            .args(["generate", "--repo"])
            .arg(repo.path())
            .arg("--cache-dir")
            .arg(cache.path())
            .args(["--target", "fspath.path.iteratepath", "--method", "direct"])
            .args(["--max-tokens", "160", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = |extra: &[&str], why: &str| {
        let out = generate(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why), "{stderr}");
    };
    refused(&["--select", "tests"], "give the Python that runs them");
    refused(
        &["--python", "python3", "--no-grounding"],
        "needs a choice among answers",
    );

    let python = eval_common::python();
    let before = eval_common::snapshot(repo.path());
    let out = generate(&["--select", "tests", "--python", python.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        eval_common::snapshot(repo.path()),
        before,
        "answers ran in copies"
    );
    let steps = v["trace"]["steps"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["step"], "tests", "{steps:?}");
    let g = &v["trace"]["grounding"];
    let candidates = g["candidates"].as_array().unwrap();
    let fewest = candidates
        .iter()
        .map(|c| c["problems"].as_u64().unwrap())
        .min()
        .unwrap();
    let mut eligible: Vec<&str> = candidates
        .iter()
        .filter(|c| c["problems"].as_u64() == Some(fewest))
        .map(|c| c["body"].as_str().unwrap())
        .collect();
    eligible.sort_unstable();
    eligible.dedup();
    if eligible.len() < 2 {
        // Nothing to choose: no tests are written.
        assert_eq!(
            g["tests"]["error"], "one answer to choose from: no tests needed",
            "{g}"
        );
        return;
    }
    let names = g["tests"]["written"]["names"]
        .as_array()
        .expect("tests written");
    assert!(!names.is_empty(), "{}", g["tests"]);
    assert!(g["tests"]["error"].is_null(), "{}", g["tests"]);
    for c in candidates {
        let passed = c["tests_passed"].as_u64();
        match c["problems"].as_u64().unwrap() == fewest {
            true => assert!(passed.is_some_and(|n| n as usize <= names.len()), "{c}"),
            false => assert!(passed.is_none(), "{c}"),
        }
    }
}
