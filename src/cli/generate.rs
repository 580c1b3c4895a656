//! `repohop generate`: regenerate a function of a repository from its signature and docstring,
//! with the target masked from every retriever.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use repohop::embed::text;
use repohop::generate::{self, ContextSnippet, GenerateOptions, Target};
use repohop::llm::{CandleLlm, LlmOptions};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, FnId, Repository};
use repohop::retrieve::dense::{self, DenseHit};
use repohop::retrieve::dyretriever::{self, DyOptions, DyTrace};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

use super::repo::RepoArgs;
use super::search::{index_embeddings, EmbedArgs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// DyRetriever's extracted functions plus the dense top-k (the paper's DyCoder).
    Dycoder,
    /// DyRetriever's extracted functions only (the paper's "w/o similarity").
    Dyretriever,
    /// The dense top-k only (the paper's "w/o DyRetriever").
    Dense,
    /// No retrieved context: the signature and docstring only (the papers' Direct baseline).
    Direct,
}

impl Method {
    fn uses_dense(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dense)
    }
    fn uses_dyretriever(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dyretriever)
    }
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The function to regenerate: `path/to/file.py::Class.method` or a dotted name.
    #[arg(long)]
    pub target: String,
    #[arg(long, value_enum, default_value = "dycoder")]
    pub method: Method,
    /// DyRetriever: select/visit/expand rounds.
    #[arg(long, default_value_t = 10)]
    pub max_hop: usize,
    /// DyRetriever: use the entry points as the result, without the multi-hop walk.
    #[arg(long)]
    pub no_multihop: bool,
    /// Functions from dense similarity retrieval.
    #[arg(long, default_value_t = 10)]
    pub top_sim: usize,
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
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Replace the function in its file (atomically, keeping a `.repohop.bak` copy).
    #[arg(long)]
    pub write: bool,
    /// Print the whole run as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let id = resolve_target(&repo, &args.target)?;
    let target = Target::of(&repo, id)?;

    let started = Instant::now();
    let mut llm = CandleLlm::load(&args.model, &LlmOptions::default())
        .with_context(|| format!("cannot load generator model {}", args.model))?;
    let load_s = started.elapsed().as_secs_f64();
    let view = MaskedView::new(&repo, Some(id), false);

    let mut dense_hits: Vec<DenseHit> = Vec::new();
    let mut dense_s = 0.0;
    if args.method.uses_dense() {
        let started = Instant::now();
        let (model, index, _) = index_embeddings(&repo, &args.repo, &args.embed)?;
        let query = text::query_text(&target.signature, target.docstring.as_deref());
        dense_hits = dense::top_k(&view, &model, &index, &query, args.top_sim)?;
        dense_s = started.elapsed().as_secs_f64();
    }
    let mut dy_trace = DyTrace::default();
    let mut dy_functions = Vec::new();
    let mut dy_s = 0.0;
    if args.method.uses_dyretriever() {
        let started = Instant::now();
        let opts = DyOptions {
            max_hop: args.max_hop,
            multihop: !args.no_multihop,
            top_k: args.top_rel,
            ..DyOptions::default()
        };
        let result =
            dyretriever::retrieve(&mut llm, &view, &target.prompt_text(), &target.path, &opts)?;
        dy_functions = result.functions;
        dy_trace = result.trace;
        dy_s = started.elapsed().as_secs_f64();
    }

    // One deduplicated context: DyRetriever's picks first, then the similar functions.
    let mut seen = std::collections::HashSet::new();
    let mut context = Vec::new();
    let sources = dy_functions
        .iter()
        .map(|&f| (f, "dyretriever"))
        .chain(dense_hits.iter().map(|h| (h.id, "dense")));
    for (fid, source) in sources {
        let (Some(f), Some(code)) = (view.function(fid), view.function_code(fid)) else {
            continue;
        };
        if seen.insert(fid) {
            context.push((source, f, code.into_owned()));
        }
    }
    let snippets: Vec<ContextSnippet> = context
        .iter()
        .map(|(_, f, code)| ContextSnippet {
            qualname: f.qualname.clone(),
            path: f.path.clone(),
            code: code.clone(),
        })
        .collect();

    let options = GenerateOptions {
        prompt_budget: args.prompt_budget,
        max_new_tokens: args.max_tokens,
    };
    let started = Instant::now();
    let generation = generate::generate(&mut llm, &target, &snippets, &options)?;
    let generation_s = started.elapsed().as_secs_f64();

    if args.write {
        write_back(&repo, id, &generation.completion.function)?;
    }
    let f = repo.function(id);
    if args.json {
        let r = &generation.response;
        let out = json!({
            "target": f.qualname,
            "path": f.path,
            "method": format!("{:?}", args.method).to_lowercase(),
            "function": generation.completion.function,
            "body": generation.completion.body,
            "context": context.iter().map(|(source, f, code)| json!({
                "qualname": f.qualname, "path": f.path, "start_line": f.span.start_line,
                "source": source, "code": code,
            })).collect::<Vec<_>>(),
            "trace": {
                "dyretriever": dy_trace,
                "dense": dense_hits.iter().filter_map(|h| view.function(h.id).map(|f| json!({
                    "qualname": f.qualname, "path": f.path, "score": h.score,
                }))).collect::<Vec<_>>(),
                "prompt": generation.prompt,
                "raw_answer": generation.raw_answer,
                "body_source": generation.completion.source,
                "dropped_context": generation.dropped,
                "finish_reason": r.finish_reason,
            },
            "timings": {
                "model_load_s": load_s, "dense_s": dense_s, "dyretriever_s": dy_s,
                "generation_s": generation_s,
            },
            "tokens": {
                "dyretriever": {
                    "in": dy_trace.prompt_tokens(), "out": dy_trace.generated_tokens(),
                    "cached": dy_trace.cached_tokens(), "calls": dy_trace.calls.len(),
                },
                "generation": {
                    "in": r.prompt_tokens, "out": r.generated_tokens,
                    "cached": r.cached_prompt_tokens,
                },
            },
            "written": args.write,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    eprintln!(
        "{} ({}:{}), method {:?}",
        f.qualname, f.path, f.span.start_line, args.method
    );
    for (source, f, _) in &context {
        eprintln!("  context [{source}] {} ({})", f.qualname, f.path);
    }
    eprintln!(
        "retrieval: dense {:.1} s, DyRetriever {:.1} s ({} LLM calls, {} prompt tokens of which \
         {} cached); generation {:.1} s ({} prompt tokens, {} generated)",
        dense_s,
        dy_s,
        dy_trace.calls.len(),
        dy_trace.prompt_tokens(),
        dy_trace.cached_tokens(),
        generation_s,
        generation.response.prompt_tokens,
        generation.response.generated_tokens
    );
    print!("{}", generation.completion.function);
    if args.write {
        eprintln!("written to {}", repo.root().join(&f.path).display());
    }
    Ok(())
}

/// Replaces the target's definition in its file: backup first, then temp file + rename.
fn write_back(repo: &Repository, id: FnId, function: &str) -> Result<()> {
    let f = repo.function(id);
    let path = repo.root().join(&f.path);
    let original = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if repo.file(repo.function_file(id)).text.as_deref() != Some(original.as_str()) {
        bail!(
            "{} changed while generating; nothing written",
            path.display()
        );
    }
    let line_start = original[..f.span.start_byte]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let updated = format!(
        "{}{}{}",
        &original[..line_start],
        function.trim_end(),
        &original[f.span.end_byte..]
    );
    let backup = path.with_extension(backup_extension(&path));
    std::fs::write(&backup, &original)
        .with_context(|| format!("cannot write backup {}", backup.display()))?;
    let tmp = path.with_extension("repohop.tmp");
    std::fs::write(&tmp, updated).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot replace {}", path.display()))
}

fn backup_extension(path: &Path) -> String {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) => format!("{ext}.repohop.bak"),
        None => "repohop.bak".into(),
    }
}
