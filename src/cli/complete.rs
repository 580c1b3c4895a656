//! `repohop complete`: complete the line at a cursor (SaraCoder, its baselines, or the
//! unfinished code alone).

use std::io::Read;

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::embed;
use repohop::generate::complete::{Completer, LineMethod};
use repohop::models::DEFAULT_GENERATOR;
use repohop::retrieve::saracoder::StoreReport;

use super::args::{EmbedArgs, LineArgs, RemoteArgs, RepoArgs};

#[derive(Args, Debug)]
pub struct CompleteArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The file, relative to the repository root.
    #[arg(long)]
    pub file: String,
    /// The line to complete (1-based): the code above it is the context, it and everything
    /// below are hidden.
    #[arg(long, required_unless_present = "stdin")]
    pub line: Option<usize>,
    /// Read the unfinished file from standard input, as an editor sends it: the cursor is at
    /// its end (`--file` names it; imported entities come from the repository's copy).
    #[arg(long, conflicts_with = "line")]
    pub stdin: bool,
    #[arg(long, value_enum, default_value = "saracoder")]
    pub method: LineMethod,
    #[command(flatten)]
    pub line_args: LineArgs,
    #[arg(long, default_value = DEFAULT_GENERATOR)]
    pub model: String,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Print the completion with the retrieval at each stage, the prompt and timings as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the prompt the model would be given and stop (with `--json`: the prompt, the
    /// retrieval and the imported entities); RepoCoder's first round.
    #[arg(long)]
    pub prompt_only: bool,
}

pub fn run(args: CompleteArgs) -> Result<()> {
    let opts = args.line_args.options(args.method);
    let unfinished = if args.stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the unfinished file from standard input")?;
        if text.trim().is_empty() {
            bail!("--stdin: standard input is empty; send the file's text up to the cursor");
        }
        Some(text)
    } else {
        None
    };
    let repo = args.repo.open()?;
    let embedder = if opts.needs_embedder() {
        let device = embed::parse_device(&args.embed.device)?;
        Some(embed::load(&args.embed.embed_model, &device)?)
    } else {
        None
    };
    let mut llm = args.remote.llm_or(&args.model)?;
    let embedder = embedder.as_ref().map(|e| e as &dyn embed::Embedder);
    let store = repo.cache_dir().to_path_buf();
    let mut completer = Completer::with_store(std::sync::Arc::new(repo), store);
    if args.prompt_only {
        let context = match (&unfinished, args.line) {
            (Some(text), _) => {
                completer.prompt_unfinished(llm.as_ref(), embedder, &args.file, text, &opts)?
            }
            (None, Some(line)) => {
                completer.prompt_line(llm.as_ref(), embedder, &args.file, line, &opts)?
            }
            (None, None) => bail!("give --line N or --stdin"),
        };
        store_note(context.store.as_ref());
        save_vectors(&completer, embedder);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&context)?);
        } else {
            eprintln!(
                "{}: prompt {} tokens, {} snippets",
                context.method, context.prompt_tokens, context.prompt.snippets_shown
            );
            print!("{}", context.prompt.text);
        }
        return Ok(());
    }
    let done = match (&unfinished, args.line) {
        (Some(text), _) => {
            completer.complete_unfinished(llm.as_mut(), embedder, &args.file, text, &opts)?
        }
        (None, Some(line)) => {
            completer.complete_line(llm.as_mut(), embedder, &args.file, line, &opts)?
        }
        (None, None) => bail!("give --line N or --stdin"),
    };
    store_note(done.store.as_ref());
    save_vectors(&completer, embedder);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(());
    }
    if let Some(r) = &done.retrieval {
        eprintln!(
            "{}: {} candidates, SAD kept {}, RAP dropped {}, {} in the prompt ({:.0} ms retrieval, {:.0} ms opening the codebase)",
            done.method,
            r.candidates,
            r.sad_kept,
            r.rap_dropped,
            done.prompt.snippets_shown,
            done.retrieve_ms,
            done.codebase_ms
        );
    }
    eprintln!(
        "prompt {} tokens, {} generated in {:.0} ms",
        done.prompt_tokens, done.generated_tokens, done.generate_ms
    );
    println!("{}", done.completion);
    Ok(())
}

/// Says what went wrong with the stored codebase, if anything did.
fn store_note(store: Option<&StoreReport>) {
    if let Some(problem) = store.and_then(|s| s.problem.as_deref()) {
        eprintln!("note: stored codebase: {problem}");
    }
}

/// Stores the key vectors embedded for this cursor: the next process re-embeds none of them.
fn save_vectors(completer: &Completer, embedder: Option<&dyn embed::Embedder>) {
    if let Some(e) = embedder {
        if let Err(err) = completer.save_vectors(e) {
            eprintln!("note: the key vectors were not stored ({err})");
        }
    }
}
