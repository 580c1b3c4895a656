//! `repohop generate`: regenerate a function of a repository from its signature and docstring,
//! with the target masked from every retriever.

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::generate::pipeline::{self, Embeddings, Method, PipelineOptions};
use repohop::generate::{GenerateOptions, Target};
use repohop::llm::{CandleLlm, LlmOptions};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, FnId, Repository};
use repohop::retrieve::dyretriever::DyOptions;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

use super::repo::RepoArgs;
use super::search::{index_embeddings, EmbedArgs};

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

    let started = Instant::now();
    let embedded = if args.method.uses_dense() {
        let (model, index, _) = index_embeddings(&repo, &args.repo, &args.embed)?;
        Some((model, index))
    } else {
        None
    };
    let index_s = started.elapsed().as_secs_f64();
    let embeddings = embedded.as_ref().map(|(model, index)| Embeddings {
        embedder: model,
        index,
    });
    let opts = PipelineOptions {
        method: args.method,
        dy: DyOptions {
            max_hop: args.max_hop,
            multihop: !args.no_multihop,
            top_k: args.top_rel,
            ..DyOptions::default()
        },
        top_sim: args.top_sim,
        generation: GenerateOptions {
            prompt_budget: args.prompt_budget,
            max_new_tokens: args.max_tokens,
        },
    };
    let run = pipeline::run(&mut llm, &view, &target, embeddings.as_ref(), &opts)?;
    let generation = &run.generation;
    let dy_trace = &run.dyretriever;

    if args.write {
        write_back(&repo, id, &generation.completion.function)?;
    }
    let f = repo.function(id);
    if args.json {
        let r = &generation.response;
        let out = json!({
            "target": f.qualname,
            "path": f.path,
            "method": args.method.name(),
            "function": generation.completion.function,
            "body": generation.completion.body,
            "context": run.context,
            "trace": {
                "dyretriever": dy_trace,
                "dense": run.dense,
                "prompt": generation.prompt,
                "raw_answer": generation.raw_answer,
                "body_source": generation.completion.source,
                "dropped_context": generation.dropped,
                "finish_reason": r.finish_reason,
            },
            "timings": {
                "model_load_s": load_s, "embedding_index_s": index_s, "dense_s": run.dense_s,
                "dyretriever_s": run.dyretriever_s, "generation_s": run.generation_s,
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
    for c in &run.context {
        eprintln!("  context [{}] {} ({})", c.source, c.qualname, c.path);
    }
    eprintln!(
        "retrieval: dense {:.1} s, DyRetriever {:.1} s ({} LLM calls, {} prompt tokens of which \
         {} cached); generation {:.1} s ({} prompt tokens, {} generated)",
        run.dense_s,
        run.dyretriever_s,
        dy_trace.calls.len(),
        dy_trace.prompt_tokens(),
        dy_trace.cached_tokens(),
        run.generation_s,
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
