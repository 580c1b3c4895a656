//! DyRetriever on the scenario fixture (tests/fixtures/dyproj): the DyCoder paper's
//! `iteratepath` → `normpath` shape, where the target's only helper is an in-file function that
//! does not resemble it, and distractors in another module that do.

use std::path::Path;

use repohop::embed;
use repohop::generate::pipeline::{self, Embeddings, Method, PipelineOptions};
use repohop::generate::{GenerateOptions, Target};
use repohop::index::vectors::VectorIndex;
use repohop::llm::{
    CandleLlm, Constraint, FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError,
    LlmOptions, Prompt,
};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, IndexOptions, Repository};
use repohop::retrieve::dense;
use repohop::retrieve::dyretriever::{self, DyOptions};

const HELPER: &str = "fspath/path.py::normpath";

fn fixture() -> Repository {
    open_fixture("dyproj")
}

fn open_fixture(name: &str) -> Repository {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    Repository::open(&root, &opts).expect("fixture opens")
}

/// The scenario's target and the view that hides it.
fn masked_target(repo: &Repository) -> (MaskedView<'_>, Target) {
    let id = resolve_target(repo, "fspath.path.iteratepath").unwrap();
    (
        MaskedView::new(repo, Some(id), false),
        Target::of(repo, id).unwrap(),
    )
}

/// The default embedder and the fixture's vectors (kept in a temporary folder).
fn embeddings_of(repo: &Repository) -> (embed::LocalEmbedder, VectorIndex, tempfile::TempDir) {
    let embedder = embed::load(embed::DEFAULT_MODEL, &embed::parse_device("cpu").unwrap())
        .expect("default embedder (run `repohop models fetch`)");
    let dir = tempfile::tempdir().unwrap();
    let (index, _) =
        VectorIndex::update(dir.path(), &embedder, &dense::function_items(repo)).unwrap();
    (embedder, index, dir)
}

/// Answers each step from a script: the first choice of a one-of, the given picks for a subset
/// (members only), and fixed callee names for the expand step.
struct Scripted {
    subset_picks: Vec<&'static str>,
    callees: &'static str,
}

impl Llm for Scripted {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        let text = match &request.constraint {
            Some(Constraint::OneOf(items)) => items[0].clone(),
            Some(Constraint::Subset { items, .. }) => {
                let picks: Vec<&String> = items
                    .iter()
                    .filter(|i| self.subset_picks.iter().any(|p| i.ends_with(p)))
                    .collect();
                serde_json::to_string(&picks).unwrap()
            }
            Some(Constraint::IdentArray { .. }) => self.callees.to_string(),
            None => "```python\ndef iteratepath(p):\n    return normpath(p).split('/')\n```".into(),
        };
        Ok(GenerateResponse {
            prompt_tokens: 10,
            generated_tokens: 1,
            ..GenerateResponse::new(text, FinishReason::Constraint)
        })
    }
    fn count_tokens(&self, _prompt: &Prompt) -> Result<usize, LlmError> {
        Ok(10)
    }
    fn context_window(&self) -> usize {
        32_768
    }
    fn name(&self) -> &str {
        "scripted"
    }
}

#[test]
fn expand_keeps_repository_callees_and_drops_stdlib_and_unknown_names_with_reasons() {
    let repo = fixture();
    let (view, target) = masked_target(&repo);
    let mut llm = Scripted {
        subset_picks: vec!["fspath/path.py", "::join"],
        callees: r#"["normpath", "re.sub", "no_such_helper"]"#,
    };
    let opts = DyOptions {
        max_hop: 2,
        ..DyOptions::paper()
    };
    let result = dyretriever::retrieve(
        &mut llm,
        &view,
        &target.prompt_text(),
        &target.path,
        &[],
        &opts,
    )
    .unwrap();
    let t = &result.trace;
    assert_eq!(t.entry_files, vec!["fspath/path.py"]);
    assert_eq!(t.entry_functions, vec!["fspath/path.py::join"]);
    // The target itself is never a candidate.
    assert!(t.hops[0]
        .candidates
        .iter()
        .all(|c| !c.ends_with("::iteratepath")));
    let hop = &t.hops[0];
    assert_eq!(hop.selected, "fspath/path.py::join");
    assert_eq!(hop.kept.len(), 1);
    assert_eq!(hop.kept[0].candidate, HELPER);
    let reasons: Vec<(&str, &str)> = hop
        .dropped
        .iter()
        .map(|d| (d.name.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("re.sub", "outside the repository (re)"),
            ("no_such_helper", "not defined in the repository"),
        ]
    );
    assert_eq!(t.hops[1].selected, HELPER);
    assert_eq!(t.trajectory, vec!["fspath/path.py::join", HELPER]);
    assert_eq!(t.extracted, t.trajectory);
    assert_eq!(result.functions.len(), 2);
}

#[test]
fn anchored_entry_points_and_static_expand_need_no_expand_call() {
    let repo = fixture();
    let (view, target) = masked_target(&repo);
    // The model picks a distractor; the walk still starts next to the target.
    let mut llm = Scripted {
        subset_picks: vec!["fspath/text.py", "::iterate_words"],
        callees: r#"["should_not_be_asked"]"#,
    };
    let seed = resolve_target(&repo, "fspath.url.path_components").unwrap();
    let opts = DyOptions {
        max_hop: 3,
        neighbours: 3,
        ..DyOptions::default()
    };
    let result = dyretriever::retrieve(
        &mut llm,
        &view,
        &target.prompt_text(),
        &target.path,
        &[seed],
        &opts,
    )
    .unwrap();
    let t = &result.trace;
    // The target's file neighbours (nearest first), the seed, then the model's pick.
    assert_eq!(
        t.entry_functions,
        vec![
            "fspath/path.py::parts",
            "fspath/path.py::join",
            HELPER,
            "fspath/url.py::path_components",
            "fspath/text.py::iterate_words"
        ]
    );
    assert!(t.calls.iter().all(|c| c.step != "expand"), "{:?}", t.calls);
    // Callees come from the parsed call sites: `parts` calls `normpath`, resolved in its file;
    // `re.sub` in normpath is dropped as outside the repository.
    let normpath_hop = t.hops.iter().find(|h| h.selected == HELPER).unwrap();
    assert!(normpath_hop
        .dropped
        .iter()
        .any(|d| d.name == "re.sub" && d.reason.contains("outside")));
}

#[test]
fn without_multihop_the_entry_points_are_the_result() {
    let repo = fixture();
    let (view, target) = masked_target(&repo);
    let mut llm = Scripted {
        subset_picks: vec!["fspath/text.py", "::iterate_words", "::parts"],
        callees: "[]",
    };
    let opts = DyOptions {
        multihop: false,
        ..DyOptions::paper()
    };
    let result = dyretriever::retrieve(
        &mut llm,
        &view,
        &target.prompt_text(),
        &target.path,
        &[],
        &opts,
    )
    .unwrap();
    let t = &result.trace;
    // The target's own file is added to the model's pick.
    assert_eq!(t.entry_files, vec!["fspath/text.py", "fspath/path.py"]);
    assert_eq!(
        t.extracted,
        vec!["fspath/text.py::iterate_words", "fspath/path.py::parts"]
    );
    assert!(t.hops.is_empty());
}

#[test]
fn dycoder_context_is_dyretriever_first_then_dense_without_duplicates() {
    let repo = fixture();
    let (view, target) = masked_target(&repo);
    let (embedder, index, _dir) = embeddings_of(&repo);
    let embeddings = Embeddings {
        embedder: &embedder,
        index: &index,
    };
    let mut llm = Scripted {
        subset_picks: vec!["fspath/path.py", "::join"],
        callees: r#"["normpath"]"#,
    };
    let mut opts = PipelineOptions::new(Method::Dycoder);
    opts.top_sim = 4;
    opts.dy = DyOptions::paper();
    let run = pipeline::run(&mut llm, &view, &target, Some(&embeddings), &opts, None).unwrap();
    let sources: Vec<(&str, &str)> = run
        .context
        .iter()
        .map(|c| (c.source, c.qualname.as_str()))
        .collect();
    assert_eq!(
        &sources[..2],
        &[
            ("dyretriever", "fspath.path.join"),
            ("dyretriever", "fspath.path.normpath")
        ]
    );
    assert!(sources[2..].iter().all(|(s, _)| *s == "dense"));
    let mut names: Vec<&str> = sources.iter().map(|(_, q)| *q).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "duplicates in {sources:?}");
    assert!(!names.contains(&"fspath.path.iteratepath"));
    assert_eq!(run.similar.len(), 4);
    assert_eq!(
        run.generation.completion.function,
        "def iteratepath(path):\n    return normpath(p).split('/')\n"
    );
    // Dense methods refuse to run without embeddings.
    let err = pipeline::run(
        &mut llm,
        &view,
        &target,
        None,
        &PipelineOptions::new(Method::Dense),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("needs embeddings"), "{err}");
}

/// The real default models: DyRetriever finds the unlike helper that dense retrieval ranks
/// below look-alike distractors.
#[test]
fn dyretriever_finds_the_helper_that_dense_top_k_misses() {
    let repo = fixture();
    let (view, target) = masked_target(&repo);

    let (embedder, index, _dir) = embeddings_of(&repo);
    let query = embed::text::query_text(&target.signature, target.docstring.as_deref());
    let hits = dense::top_k(&view, &embedder, &index, &query, 3).unwrap();
    let dense_names: Vec<&str> = hits
        .iter()
        .map(|h| repo.function(h.id).name.as_str())
        .collect();
    assert_eq!(dense_names.len(), 3);
    assert!(!dense_names.contains(&"normpath"), "{dense_names:?}");

    let mut llm = CandleLlm::load(DEFAULT_GENERATOR, &LlmOptions::default())
        .expect("default generator (run `repohop models fetch`)");
    let opts = DyOptions {
        max_hop: 4,
        ..DyOptions::paper()
    };
    let result = dyretriever::retrieve(
        &mut llm,
        &view,
        &target.prompt_text(),
        &target.path,
        &[],
        &opts,
    )
    .unwrap();
    let t = &result.trace;
    assert!(
        t.extracted.iter().any(|n| n == HELPER),
        "extracted {:?}; trace {}",
        t.extracted,
        serde_json::to_string_pretty(t).unwrap()
    );
    assert!(t.calls.iter().all(|c| c.generated_tokens <= 64));
    // Every model call after the first reuses the shared system prompt from the prefix cache
    // (a one-of with a single candidate is answered without running the model).
    let ran: Vec<_> = t.calls.iter().filter(|c| c.generated_tokens > 0).collect();
    assert!(ran.len() >= 3, "{:?}", t.calls);
    assert!(
        ran[1..].iter().all(|c| c.cached_prompt_tokens > 0),
        "{:?}",
        t.calls
    );
}

/// The same scenario in Java (tests/fixtures/dyjava), through the whole DyCoder pipeline with
/// the real default models: the unlike helper reaches the context through DyRetriever (dense
/// top-2 misses it), and the output is the target method, nested in its class.
#[test]
fn dycoder_on_java_finds_the_helper_and_writes_the_method() {
    let repo = open_fixture("dyjava");
    let id = resolve_target(&repo, "org.fspath.PathOps.iteratePath").unwrap();
    let view = MaskedView::new(&repo, Some(id), false);
    let target = Target::of(&repo, id).unwrap();
    let (embedder, index, _dir) = embeddings_of(&repo);
    let mut llm = CandleLlm::load(DEFAULT_GENERATOR, &LlmOptions::default())
        .expect("default generator (run `repohop models fetch`)");
    let opts = PipelineOptions {
        dy: DyOptions {
            max_hop: 4,
            ..DyOptions::default()
        },
        top_sim: 2,
        generation: GenerateOptions {
            max_new_tokens: 200,
            ..GenerateOptions::default()
        },
        ..PipelineOptions::new(Method::Dycoder)
    };
    let e = Embeddings {
        embedder: &embedder,
        index: &index,
    };
    let run = pipeline::run(&mut llm, &view, &target, Some(&e), &opts, None).unwrap();
    let from = |source: &str| -> Vec<&str> {
        run.context
            .iter()
            .filter(|c| c.source == source)
            .map(|c| c.qualname.as_str())
            .collect()
    };
    let helper = "org.fspath.PathOps.normalize";
    assert!(
        !run.similar.iter().any(|s| s.qualname == helper),
        "{:?}",
        run.similar
    );
    assert!(
        from("dyretriever").contains(&helper),
        "context {:?}; trace {}",
        run.context,
        serde_json::to_string_pretty(&run.dyretriever).unwrap()
    );
    let function = &run.generation.completion.function;
    assert!(
        function.starts_with("    public static List<String> iteratePath(String path) {"),
        "{function}"
    );
    assert!(function.trim_end().ends_with('}'), "{function}");
}
