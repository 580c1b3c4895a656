//! `repohop generate`: regenerate a function of a repository from its signature and docstring,
//! with the target masked from every retriever; or write a new function for a signature given
//! in a file, in the context of one of the repository's files.

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::generate::pipeline::{self, Embeddings, Method, PipelineOptions, Similarity};
use repohop::generate::{GenerateOptions, Target};
use repohop::llm::{CandleLlm, LlmOptions};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, FnId, Lang, Repository};
use repohop::retrieve::dyretriever::{DyOptions, ExpandMode};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::repo::RepoArgs;
use super::search::{index_embeddings, EmbedArgs};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Sparse {
    Bm25,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The function to regenerate: `path/to/file.py::Class.method` or a dotted name.
    #[arg(
        long,
        required_unless_present = "signature_file",
        conflicts_with = "signature_file"
    )]
    pub target: Option<String>,
    /// A new function: its signature (and docstring or Javadoc) in this file...
    #[arg(long, value_name = "FILE", requires = "file")]
    pub signature_file: Option<PathBuf>,
    /// ...written for this repository file (`--write` appends it there).
    #[arg(long, value_name = "PATH", requires = "signature_file")]
    pub file: Option<String>,
    #[arg(long, value_enum, default_value = "dycoder")]
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
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Leave the target's own file (imports, class, neighbouring code) out of the prompt, as in
    /// the papers' layout.
    #[arg(long)]
    pub no_local: bool,
    /// Don't check the answer's names against the repository (and don't repair).
    #[arg(long)]
    pub no_grounding: bool,
    /// Most tokens of the target's own file in the prompt.
    #[arg(long, default_value_t = 2048)]
    pub local_budget: usize,
    /// Replace the function in its file, or append the new one (atomically, keeping a
    /// `.repohop.bak` copy).
    #[arg(long)]
    pub write: bool,
    /// Print the whole run as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let (target, id) = match (&args.target, &args.signature_file, &args.file) {
        (Some(t), _, _) => {
            let id = resolve_target(&repo, t)?;
            (Target::of(&repo, id)?, Some(id))
        }
        (None, Some(signature), Some(file)) => (new_target(&repo, signature, file)?, None),
        _ => bail!("give --target, or --signature-file with --file"),
    };
    let similarity = match args.sparse {
        Some(Sparse::Bm25) => Similarity::Bm25,
        None => Similarity::Dense,
    };

    let started = Instant::now();
    let mut llm = CandleLlm::load(&args.model, &LlmOptions::default())
        .with_context(|| format!("cannot load generator model {}", args.model))?;
    let load_s = started.elapsed().as_secs_f64();
    let view = MaskedView::new(&repo, id, false);

    let started = Instant::now();
    let embedded = match args.method.corpus(similarity) {
        Some(corpus) => {
            let (model, index, _) = index_embeddings(&repo, &args.repo, &args.embed, corpus)?;
            Some((model, index))
        }
        None => None,
    };
    let index_s = started.elapsed().as_secs_f64();
    let embeddings = embedded.as_ref().map(|(model, index)| Embeddings {
        embedder: model,
        index,
    });
    let opts = PipelineOptions {
        method: args.method,
        similarity,
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
        generation: GenerateOptions {
            prompt_budget: args.prompt_budget,
            local_budget: args.local_budget,
            max_new_tokens: args.max_tokens,
        },
    };
    let run = pipeline::run(&mut llm, &view, &target, embeddings.as_ref(), &opts)?;
    let generation = &run.generation;
    let dy_trace = &run.dyretriever;
    let function = &generation.completion.function;

    let written = match (args.write, id) {
        (false, _) => None,
        (true, Some(id)) => Some(replace_function(&repo, id, function)?),
        (true, None) => Some(append_function(&repo, &target, function)?),
    };
    let name = match id {
        Some(id) => repo.function(id).qualname.clone(),
        None => target.name.clone(),
    };
    if args.json {
        let r = &generation.response;
        let out = json!({
            "target": name,
            "path": target.path,
            "method": args.method.name(),
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
                    "in": r.prompt_tokens, "out": r.generated_tokens,
                    "cached": r.cached_prompt_tokens,
                },
            },
            "written": written,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
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
    for c in &run.context {
        eprintln!("  context [{}] {} ({})", c.source, c.qualname, c.path);
    }
    if let Some(first) = &run.grounding.first {
        let problems: Vec<String> = first
            .problems
            .iter()
            .map(|p| format!("{:?} {}", p.kind, p.name))
            .collect();
        let outcome = match (&run.grounding.repaired, run.grounding.kept_repair) {
            (_, true) => "repaired",
            (Some(_), false) => "repair not better, first answer kept",
            (None, _) => "no repair needed",
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
    }
    eprintln!(
        "retrieval: similarity {:.1} s, DyRetriever {:.1} s ({} LLM calls, {} prompt tokens of \
         which {} cached); generation {:.1} s ({} prompt tokens, {} generated)",
        run.similarity_s,
        run.dyretriever_s,
        dy_trace.calls.len(),
        dy_trace.prompt_tokens(),
        dy_trace.cached_tokens(),
        run.generation_s,
        generation.response.prompt_tokens,
        generation.response.generated_tokens
    );
    print!("{function}");
    if let Some(path) = written {
        eprintln!("written to {}", path.display());
    }
    Ok(())
}

/// The target of `--signature-file S --file F`: F must be a parsed file of the repository.
fn new_target(repo: &Repository, signature: &Path, file: &str) -> Result<Target> {
    let parsed = repo
        .file_id(file)
        .is_some_and(|id| repo.file(id).text.is_some());
    if !parsed {
        bail!(
            "{file} is not a parsed source file of {}",
            repo.root().display()
        );
    }
    let text = std::fs::read_to_string(signature)
        .with_context(|| format!("cannot read {}", signature.display()))?;
    Ok(Target::from_signature(file, &text)?)
}

/// Replaces the target's definition in its file.
fn replace_function(repo: &Repository, id: FnId, function: &str) -> Result<PathBuf> {
    let f = repo.function(id);
    let original = unchanged_text(repo, &f.path)?;
    let line_start = original[..f.span.start_byte]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let updated = format!(
        "{}{}{}",
        &original[..line_start],
        function.trim_end(),
        &original[f.span.end_byte..]
    );
    write_back(repo, &f.path, &original, &updated)
}

/// Adds a new function to its file: Python at the end, Java before the closing brace of the
/// file's last type.
fn append_function(repo: &Repository, target: &Target, function: &str) -> Result<PathBuf> {
    let original = unchanged_text(repo, &target.path)?;
    let function = function.trim_end();
    let updated = match target.lang {
        Lang::Python => format!("{}\n\n\n{function}\n", original.trim_end()),
        Lang::Java => {
            let Some(close) = original.rfind('}') else {
                bail!("{} has no class to add a method to", target.path);
            };
            let before = original[..close].trim_end();
            format!("{before}\n\n{function}\n{}", &original[close..])
        }
    };
    write_back(repo, &target.path, &original, &updated)
}

/// The file's text, provided it is still what was indexed.
fn unchanged_text(repo: &Repository, rel: &str) -> Result<String> {
    let path = repo.root().join(rel);
    let original = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let indexed = repo
        .file_id(rel)
        .and_then(|id| repo.file(id).text.as_deref());
    if indexed != Some(original.as_str()) {
        bail!(
            "{} changed while generating; nothing written",
            path.display()
        );
    }
    Ok(original)
}

/// Writes `updated` over the file: a backup of `original` first, then temp file + rename.
fn write_back(repo: &Repository, rel: &str, original: &str, updated: &str) -> Result<PathBuf> {
    let path = repo.root().join(rel);
    let backup = path.with_extension(backup_extension(&path));
    std::fs::write(&backup, original)
        .with_context(|| format!("cannot write backup {}", backup.display()))?;
    let tmp = path.with_extension("repohop.tmp");
    std::fs::write(&tmp, updated).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(path)
}

fn backup_extension(path: &Path) -> String {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) => format!("{ext}.repohop.bak"),
        None => "repohop.bak".into(),
    }
}
