//! `repohop complete`: complete the line at a cursor (SaraCoder or the unfinished code alone).

use anyhow::{Context, Result};
use clap::Args;
use repohop::embed;
use repohop::generate::complete::{complete_line, CompleteOptions, LineMethod};
use repohop::llm::{CandleLlm, LlmOptions};
use repohop::models::DEFAULT_GENERATOR;
use repohop::retrieve::saracoder::Options;

use super::args::{EmbedArgs, RepoArgs};

#[derive(Args, Debug)]
pub struct CompleteArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The file, relative to the repository root.
    #[arg(long)]
    pub file: String,
    /// The line to complete (1-based): the code above it is the context, it and everything
    /// below are hidden.
    #[arg(long)]
    pub line: usize,
    #[arg(long, value_enum, default_value = "saracoder")]
    pub method: LineMethod,
    /// Snippets in the prompt.
    #[arg(long, default_value_t = 4)]
    pub top_k: usize,
    /// Leave out the imported entities and external names (the paper's "w/o EAID").
    #[arg(long)]
    pub no_eaid: bool,
    /// Keep the top-k slices by Jaccard similarity, without SAD, RAP, TPM and MMR.
    #[arg(long)]
    pub no_hfop: bool,
    /// Prompt tokens (the unfinished code takes at most half).
    #[arg(long, default_value_t = 2048)]
    pub budget: usize,
    #[arg(long, default_value = DEFAULT_GENERATOR)]
    pub model: String,
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Print the completion with the retrieval at each stage, the prompt and timings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CompleteArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let embedder = match args.method {
        LineMethod::Saracoder => {
            let device = embed::parse_device(&args.embed.device)?;
            Some(embed::load(&args.embed.embed_model, &device)?)
        }
        LineMethod::None => None,
    };
    let mut llm = CandleLlm::load(&args.model, &LlmOptions::default())
        .with_context(|| format!("cannot load the model {}", args.model))?;
    let opts = CompleteOptions {
        method: args.method,
        retrieval: Options {
            top_k: args.top_k,
            hfop: !args.no_hfop,
            ..Options::default()
        },
        eaid: !args.no_eaid,
        budget: args.budget,
        ..CompleteOptions::default()
    };
    let done = complete_line(
        &mut llm,
        embedder.as_ref().map(|e| e as &dyn embed::Embedder),
        &repo,
        &args.file,
        args.line,
        &opts,
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(());
    }
    if let Some(r) = &done.retrieval {
        eprintln!(
            "retrieval: {} candidates, SAD kept {}, RAP dropped {}, {} in the prompt ({:.0} ms)",
            r.candidates, r.sad_kept, r.rap_dropped, done.prompt.snippets_shown, done.retrieve_ms
        );
    }
    eprintln!(
        "prompt {} tokens, {} generated in {:.0} ms",
        done.prompt_tokens, done.generated_tokens, done.generate_ms
    );
    println!("{}", done.completion);
    Ok(())
}
