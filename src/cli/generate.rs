//! `repohop generate`: regenerate a function of a repository from its signature and docstring,
//! with the target masked from every retriever; or write a new function for a signature given
//! in a file, in the context of one of the repository's files.

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::eval::runner::{check_python, RunnerConfig, TaskTests};
use repohop::eval::tasks::FunctionTask;
use repohop::generate::grounding;
use repohop::generate::model_tests::{ModelTests, TestOutcome, TestRunner};
use repohop::generate::pipeline::{self, Method, PipelineOptions, Similarity};
use repohop::generate::select::Select;
use repohop::generate::session::{Session, SessionOptions, SessionRun, VectorPlace};
use repohop::generate::{GenerateOptions, PromptFormat, Target};
use repohop::llm::{Engine, FinishReason, LlmOptions};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::mask::MaskedView;
use repohop::repo::write::{write_function, Placement, WriteOptions};
use repohop::repo::{resolve_target, FnId, Repository};
use repohop::retrieve::dyretriever::{DyOptions, ExpandMode};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use super::args::{EmbedArgs, RemoteArgs, RepoArgs};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Sparse {
    Bm25,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// The function to regenerate: `path/to/file.py::Class.method` or a dotted name.
    #[arg(
        long,
        required_unless_present_any = ["signature_file", "targets"],
        conflicts_with_all = ["signature_file", "targets"]
    )]
    pub target: Option<String>,
    /// A new function: its signature (and docstring or Javadoc) in this file...
    #[arg(
        long,
        value_name = "FILE",
        requires = "file",
        conflicts_with = "targets"
    )]
    pub signature_file: Option<PathBuf>,
    /// ...written for this repository file (`--write` appends it there).
    #[arg(long, value_name = "PATH", requires = "signature_file")]
    pub file: Option<String>,
    /// The pipeline. `dense` by default: with the target's file and the names check it is the
    /// one measured on the whole development set; `dycoder` costs about twice the time per
    /// target and has not yet been measured better with the default 1.5B model.
    #[arg(long, value_enum, default_value = "dense")]
    pub method: Method,
    /// The similarity part: BM25 instead of dense embeddings (`--sparse bm25`).
    #[arg(long, value_enum, value_name = "KIND")]
    pub sparse: Option<Sparse>,
    /// DyRetriever: select/visit/expand rounds.
    #[arg(long, default_value_t = 10)]
    pub max_hop: usize,
    /// DyRetriever: use the entry points as the result, without the multi-hop walk.
    #[arg(long)]
    pub no_multihop: bool,
    /// Similar functions (dense or BM25), or slices for `--method simplerag`.
    #[arg(long, default_value_t = 10)]
    pub top_sim: usize,
    /// DyRetriever: where `expand` gets callees (the LLM, the parsed call sites, or both).
    #[arg(long, value_enum, default_value = "static")]
    pub expand: ExpandMode,
    /// DyRetriever as in the paper: the LLM's entry points only (no start from the target's
    /// neighbours and the dense hits) and `--expand llm`.
    #[arg(long)]
    pub paper_walk: bool,
    /// Functions DyRetriever's extract step keeps.
    #[arg(long, default_value_t = 5)]
    pub top_rel: usize,
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Generator model: a built-in alias, a local path, or a Hugging Face repo id.
    #[arg(long, default_value = DEFAULT_GENERATOR)]
    pub model: String,
    /// Most prompt tokens (context that does not fit is dropped and reported).
    #[arg(long, default_value_t = 6144)]
    pub prompt_budget: usize,
    /// Most tokens of the answer.
    #[arg(long, default_value_t = repohop::generate::MAX_NEW_TOKENS)]
    pub max_tokens: usize,
    /// Leave the target's own file (imports, class, neighbouring code) out of the prompt, as in
    /// the papers' layout.
    #[arg(long)]
    pub no_local: bool,
    /// Don't check the answer's names against the repository (and don't repair).
    #[arg(long)]
    pub no_grounding: bool,
    /// Answers sampled: every time with `review`/`central`; with `first`, when the checked
    /// answer still names what doesn't exist, and the first with fewer problems replaces it
    /// (0: none).
    #[arg(long, default_value_t = pipeline::SAMPLES)]
    pub samples: usize,
    /// Which checked answer is kept. `review` (the default with the names check) and `central`
    /// draw samples and the infilled answer every time and keep, of those with the fewest
    /// problems, the one closest to all the others (`central`) plus the one whose code best
    /// explains the docstring (`review`); `first` (the default without it) keeps the greedy
    /// answer unless another has fewer problems; `tests` also runs, with `--python`, a few
    /// tests the model writes from the target's file against the answers with the fewest
    /// problems and keeps the one passing the most (a tie: as `review`). With `--python`, an
    /// answer passing the examples of the target's docstring (`>>>`) comes first in any of
    /// them but `first`.
    #[arg(long, value_enum)]
    pub select: Option<Select>,
    /// The Python (with pytest and the repository's dependencies) that runs the examples of the
    /// target's docstring and, with `--select tests`, the model's tests against the answers,
    /// each in a sandboxed copy of the repository (an existing target only).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Most tokens of the target's own file in the prompt.
    #[arg(long, default_value_t = 2048)]
    pub local_budget: usize,
    /// The prompt's layout: a chat request for the whole function, or the model's
    /// fill-in-the-middle repository layout where it writes the body (Python).
    #[arg(long, value_enum, default_value = "chat")]
    pub prompt_format: PromptFormat,
    /// Replace the function in its file, or append the new one (atomically, keeping a
    /// `.repohop.bak` copy). A Python target keeps the docstring it was given. A generation
    /// cut off by --max-tokens, or one that does not parse, is not written.
    #[arg(long)]
    pub write: bool,
    /// With --write: write a read-only file too (it stays read-only).
    #[arg(long, requires = "write")]
    pub force: bool,
    /// Print the whole run as JSON.
    #[arg(long)]
    pub json: bool,
    /// Many targets: a JSONL file, one per line, `{"target": "path.py::Class.method"}` or
    /// `{"signature": "def f(x):...", "file": "path.py"}`. Each result is printed as one JSON
    /// line as it finishes (with its line number); nothing is written to the repository.
    #[arg(long, value_name = "FILE", conflicts_with = "write")]
    pub targets: Option<PathBuf>,
    /// With --targets: targets generated at the same time, their LLM calls decoded together
    /// by one engine.
    #[arg(long, default_value_t = 1, requires = "targets")]
    pub concurrency: usize,
    /// Compute every prompt whole instead of reusing the prefix computed for an earlier call:
    /// slower, but each function is bit for bit the same whatever ran before or beside it.
    #[arg(long)]
    pub no_prefix_reuse: bool,
    /// With --targets: most MiB the keys and values of the answers decoded together may take;
    /// an answer past it waits, in order, for others to end (see `eval --kv-budget-mb`).
    #[arg(long, value_name = "MIB", requires = "targets")]
    pub kv_budget_mb: Option<usize>,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    super::args::check_select(args.select, args.no_grounding)?;
    let select = Select::or_default(args.select, !args.no_grounding);
    match (select, &args.python) {
        (Select::Tests, None) => bail!(
            "--select tests runs the tests the model writes: give the Python that runs them \
             (--python /path/to/venv/bin/python, with pytest and the repository's dependencies)"
        ),
        (Select::First, Some(_)) => bail!(
            "--python runs answers against the docstring's examples and the model's tests: it \
             needs a choice among answers (not --select first or --no-grounding)"
        ),
        (_, Some(python)) => check_python(python)?,
        _ => {}
    }
    let repo = args.repo.open()?;
    if let Some(file) = &args.targets {
        return super::generate_many::run(&args, &repo, file);
    }
    let (target, id) = match (&args.target, &args.signature_file, &args.file) {
        (Some(t), _, _) => {
            let id = resolve_target(&repo, t)?;
            (Target::of(&repo, id)?, Some(id))
        }
        (None, Some(signature), Some(file)) => (new_target(&repo, signature, file)?, None),
        _ => bail!("give --target, or --signature-file with --file"),
    };
    let similarity = similarity(&args);
    let view = MaskedView::new(&repo, id, false);
    let engine = args.remote.connect()?.map(Engine::Remote);
    let mut session = Session::load(session_options(&args, engine))?;
    let load_s = session.load_s;
    let tests = ModelTestsRun::new(&args, &repo, id)?;
    let SessionRun {
        run,
        indexing_s: index_s,
        index_report,
    } = session.run(&repo, &view, &target, tests.as_ref().map(|t| t as _))?;
    if let Some(why) = index_report.and_then(|r| r.rebuilt) {
        eprintln!("warning: embedding cache was unusable and is rebuilt: {why}");
    }
    let generation = &run.generation;
    let dy_trace = &run.dyretriever;
    let function = &generation.completion.function;

    // A refusal is reported after the function is printed: the generated code is never lost.
    let written = args.write.then(|| {
        let placement = match id {
            Some(id) => Placement::Replace(id),
            None => Placement::Append {
                path: &target.path,
                name: &target.name,
                docstring: target.docstring_literal.as_deref(),
            },
        };
        let opts = WriteOptions { force: args.force };
        write_function(
            &repo,
            placement,
            function,
            generation.response.finish_reason == FinishReason::Length,
            opts,
        )
    });
    let (written, refused) = match written {
        Some(Ok(w)) => (Some(w), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let name = match id {
        Some(id) => repo.function(id).qualname.clone(),
        None => target.name.clone(),
    };
    if args.json {
        let r = &generation.response;
        let (tokens_in, tokens_out) = run.generation_tokens();
        let out = json!({
            "target": name,
            "path": target.path,
            "method": args.method.name(),
            "model": session.llm.name(),
            "similarity": similarity,
            "function": function,
            "body": generation.completion.body,
            "context": run.context,
            "trace": {
                "dyretriever": dy_trace,
                "similar": run.similar,
                "prompt": generation.prompt,
                "raw_answer": generation.raw_answer,
                "body_source": generation.completion.source,
                "dropped_context": generation.dropped,
                "local": generation.local,
                "grounding": run.grounding,
                "steps": run.steps,
                "finish_reason": r.finish_reason,
            },
            "timings": {
                "model_load_s": load_s, "embedding_index_s": index_s,
                "similarity_s": run.similarity_s, "dyretriever_s": run.dyretriever_s,
                "generation_s": run.generation_s,
            },
            "tokens": {
                "dyretriever": {
                    "in": dy_trace.prompt_tokens(), "out": dy_trace.generated_tokens(),
                    "cached": dy_trace.cached_tokens(), "calls": dy_trace.calls.len(),
                },
                "generation": {
                    "in": tokens_in, "out": tokens_out,
                    "cached": run.generation_cached(),
                },
            },
            "written": written.as_ref().map(|w| &w.path),
            "backup": written.as_ref().map(|w| &w.backup),
            "not_written": refused.as_ref().map(|e| e.to_string()),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return match refused {
            Some(e) => Err(e.into()),
            None => Ok(()),
        };
    }
    eprintln!("{name} ({}), method {}", target.path, args.method.name());
    if let Some(l) = &generation.local {
        eprintln!(
            "  local: {} lines of {} shown from {}{}",
            l.lines_shown,
            l.lines_total,
            l.path,
            l.class
                .as_ref()
                .map(|c| format!(" (class {c})"))
                .unwrap_or_default()
        );
    }
    for u in generation.local.iter().flat_map(|l| &l.usages) {
        eprintln!("  called from {}:{} ({})", u.path, u.line, u.caller);
    }
    for c in &run.context {
        eprintln!("  context [{}] {} ({})", c.source, c.qualname, c.path);
    }
    if let Some(first) = &run.grounding.first {
        let problems: Vec<String> = first
            .problems
            .iter()
            .map(|p| format!("{:?} {}", p.kind, p.name))
            .collect();
        let g = &run.grounding;
        let outcome = match (&g.repaired, g.kept_repair, g.kept_sample) {
            (_, _, Some(seed)) => format!("sampled candidate {seed} of {} kept", g.samples.len()),
            (_, true, None) => "repaired".to_string(),
            (Some(_), false, None) if g.samples.is_empty() => {
                "repair not better, first answer kept".to_string()
            }
            (Some(_), false, None) => format!(
                "neither the repair nor {} sampled candidates better, first answer kept",
                g.samples.len()
            ),
            (None, _, None) => "no repair needed".to_string(),
        };
        eprintln!(
            "  names: {} checked{}; {outcome}",
            first.checked.len(),
            if problems.is_empty() {
                String::new()
            } else {
                format!(", unresolved: {}", problems.join(", "))
            }
        );
        if let Some(kept) = &g.kept_selected {
            let pool: Vec<String> = g
                .candidates
                .iter()
                .map(|c| {
                    let review = c
                        .review
                        .map_or(String::new(), |r| format!(" review {r:.1}"));
                    let likely = c
                        .likelihood
                        .map_or(String::new(), |l| format!(" likelihood {l:.3}"));
                    let problems = if c.problems >= grounding::SYNTAX_WEIGHT {
                        "syntax error".to_string()
                    } else {
                        c.problems.to_string()
                    };
                    format!("{} {:.2}/{problems}{review}{likely}", c.label, c.centrality)
                })
                .collect();
            eprintln!(
                "  selection: {kept} kept (centrality/problems: {})",
                pool.join(", ")
            );
            if let Some(e) = &g.review_error {
                eprintln!("  not scored ({e}): centrality alone chose");
            }
        }
    }
    let (tokens_in, tokens_out) = run.generation_tokens();
    eprintln!(
        "retrieval: similarity {:.1} s, DyRetriever {:.1} s ({} LLM calls, {} prompt tokens of \
         which {} cached); generation {:.1} s ({}; {} prompt tokens of which {} cached, {} \
         generated)",
        run.similarity_s,
        run.dyretriever_s,
        dy_trace.calls.len(),
        dy_trace.prompt_tokens(),
        dy_trace.cached_tokens(),
        run.generation_s,
        run.steps
            .iter()
            .map(|s| format!("{} {:.1} s", s.step, s.seconds))
            .collect::<Vec<_>>()
            .join(", "),
        tokens_in,
        run.generation_cached(),
        tokens_out
    );
    print!("{function}");
    if let Some(w) = written {
        eprintln!(
            "written to {} (the original is in {})",
            w.path.display(),
            w.backup.display()
        );
    }
    match refused {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

pub(super) fn similarity(args: &GenerateArgs) -> Similarity {
    match args.sparse {
        Some(Sparse::Bm25) => Similarity::Bm25,
        None => Similarity::Dense,
    }
}

pub(super) fn llm_options(args: &GenerateArgs) -> LlmOptions {
    LlmOptions {
        prefix_reuse: !args.no_prefix_reuse,
        kv_budget_bytes: args.kv_budget_mb.map(|m| m << 20),
        ..LlmOptions::default()
    }
}

/// The session the options describe, on `engine` when one is shared.
pub(super) fn session_options(args: &GenerateArgs, engine: Option<Engine>) -> SessionOptions {
    let pipeline = PipelineOptions {
        method: args.method,
        similarity: similarity(args),
        dy: DyOptions {
            max_hop: args.max_hop,
            multihop: !args.no_multihop,
            top_k: args.top_rel,
            expand: if args.paper_walk {
                ExpandMode::Llm
            } else {
                args.expand
            },
            anchored: !args.paper_walk,
            ..DyOptions::default()
        },
        top_sim: args.top_sim,
        local: !args.no_local,
        grounding: !args.no_grounding,
        samples: args.samples,
        select: Select::or_default(args.select, !args.no_grounding),
        generation: GenerateOptions {
            prompt_budget: args.prompt_budget,
            local_budget: args.local_budget,
            max_new_tokens: args.max_tokens,
            format: args.prompt_format,
            ..GenerateOptions::default()
        },
    };
    SessionOptions {
        model: args.model.clone(),
        llm: llm_options(args),
        engine,
        embed_model: args.embed.embed_model.clone(),
        embed_device: args.embed.device.clone(),
        vectors: VectorPlace::Repository,
        pipeline,
    }
}

/// A new function from its signature `text`, for `file`: a parsed file of the repository.
pub(super) fn new_target_text(repo: &Repository, file: &str, text: &str) -> Result<Target> {
    let parsed = repo
        .file_id(file)
        .is_some_and(|id| repo.file(id).text.is_some());
    if !parsed {
        bail!(
            "{file} is not a parsed source file of {}",
            repo.root().display()
        );
    }
    Ok(Target::from_signature(file, text)?)
}

/// The target of `--signature-file S --file F`: F must be a parsed file of the repository.
fn new_target(repo: &Repository, signature: &Path, file: &str) -> Result<Target> {
    let text = std::fs::read_to_string(signature)
        .with_context(|| format!("cannot read {}", signature.display()))?;
    new_target_text(repo, file, &text)
}

/// `--python`: the docstring's examples and `--select tests`' tests of target `id`, run in a
/// sandboxed copy of the repository per answer. `None` without `--python`, or for a new
/// function (nothing to run it in) unless `--select tests` asks (an error).
pub(super) struct ModelTestsRun {
    task: FunctionTask,
    root: PathBuf,
    cfg: RunnerConfig,
    cancel: AtomicBool,
}

impl ModelTestsRun {
    pub(super) fn new(
        args: &GenerateArgs,
        repo: &Repository,
        id: Option<FnId>,
    ) -> Result<Option<ModelTestsRun>> {
        let Some(python) = args.python.clone() else {
            return Ok(None);
        };
        let Some(id) = id else {
            if args.select == Some(Select::Tests) {
                bail!("--select tests runs answers in the target's place: it needs an existing target (--target), not a new function");
            }
            return Ok(None);
        };
        let f = repo.function(id);
        Ok(Some(ModelTestsRun {
            task: FunctionTask::in_repository(&f.qualname, &f.path),
            root: repo.root().to_path_buf(),
            cfg: RunnerConfig {
                python,
                ..RunnerConfig::default()
            },
            cancel: AtomicBool::new(false),
        }))
    }

    /// The runner of the target's task.
    fn tests(&self) -> TaskTests<'_> {
        TaskTests {
            task: &self.task,
            source_root: &self.root,
            cfg: &self.cfg,
            cancel: &self.cancel,
        }
    }
}

impl TestRunner for ModelTestsRun {
    fn run(&self, body: &str, tests: &ModelTests) -> std::result::Result<Vec<TestOutcome>, String> {
        self.tests().run(body, tests)
    }

    fn failure(
        &self,
        body: &str,
        tests: &ModelTests,
    ) -> std::result::Result<Option<String>, String> {
        self.tests().failure(body, tests)
    }
}
