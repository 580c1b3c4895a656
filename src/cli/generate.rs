//! `repohop generate`: regenerate a function of a repository from its signature and docstring,
//! with the target masked from every retriever.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use repohop::generate::{self, GenerateOptions, Target};
use repohop::llm::{CandleLlm, LlmOptions};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::{resolve_target, FnId, Repository};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

use super::repo::RepoArgs;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Method {
    /// No retrieved context: the signature and docstring only (the papers' Direct baseline).
    Direct,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The function to regenerate: `path/to/file.py::Class.method` or a dotted name.
    #[arg(long)]
    pub target: String,
    #[arg(long, value_enum, default_value = "direct")]
    pub method: Method,
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

    let options = GenerateOptions {
        prompt_budget: args.prompt_budget,
        max_new_tokens: args.max_tokens,
    };
    let started = Instant::now();
    let generation = generate::generate(&mut llm, &target, &[], &options)?;
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
            "context": [],
            "trace": {
                "prompt": generation.prompt,
                "raw_answer": generation.raw_answer,
                "body_source": generation.completion.source,
                "dropped_context": generation.dropped,
                "finish_reason": r.finish_reason,
            },
            "timings": {"model_load_s": load_s, "generation_s": generation_s},
            "tokens": {"generation": {
                "in": r.prompt_tokens, "out": r.generated_tokens, "cached": r.cached_prompt_tokens,
            }},
            "written": args.write,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    eprintln!(
        "{} ({}:{}), method {:?}: {} prompt tokens, {} generated, {:.1} s",
        f.qualname,
        f.path,
        f.span.start_line,
        args.method,
        generation.response.prompt_tokens,
        generation.response.generated_tokens,
        generation_s
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
