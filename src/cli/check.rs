//! `repohop check`: the names check of a function against its repository, without running it —
//! what generation's repair round sees.

use anyhow::{Context, Result};
use clap::Args;
use repohop::generate::{complete_function, grounding, Target};
use repohop::repo::mask::MaskedView;
use repohop::repo::resolve_target;
use std::path::PathBuf;

use super::args::RepoArgs;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The function the code is for: `path/to/file.py::Class.method` or a dotted name. Its
    /// current definition is hidden, as from a generator.
    #[arg(long)]
    pub target: String,
    /// The code: the whole function, or its body alone (`-` reads standard input).
    #[arg(long, value_name = "FILE")]
    pub function: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Exits with status 1 when the check finds problems (like a linter).
pub fn run(args: CheckArgs) -> Result<()> {
    let code = if args.function.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read the code from stdin")?
    } else {
        std::fs::read_to_string(&args.function)
            .with_context(|| format!("cannot read {}", args.function.display()))?
    };
    let repo = args.repo.open()?;
    let id = resolve_target(&repo, &args.target)?;
    let target = Target::of(&repo, id)?;
    let view = MaskedView::new(&repo, Some(id), false);
    let completion = complete_function(&code, &target.shape())
        .with_context(|| format!("{}: no code", args.function.display()))?;
    let g = grounding::check(&view, &target, &completion.function);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&g)?);
    } else {
        println!("{} names checked", g.checked.len());
        for p in &g.problems {
            let hint = if p.suggestions.is_empty() {
                String::new()
            } else {
                format!(" (close: {})", p.suggestions.join(", "))
            };
            println!("{:?}: {}{hint}", p.kind, p.name);
        }
    }
    if !g.problems.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
