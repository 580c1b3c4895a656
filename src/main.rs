#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

use clap::{Parser, Subcommand};

mod cli;

/// Offline repository-level code generation with local models.
#[derive(Parser)]
#[command(name = "repohop", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Obtain and list the models repohop runs.
    #[command(subcommand)]
    Models(cli::models::Cmd),
    /// Index a repository: walk, parse, cache the symbols; print counts and diagnostics.
    Index(cli::repo::IndexArgs),
    /// List the functions, methods and classes found, with locations.
    Symbols(cli::repo::SymbolsArgs),
    /// Print the repository tree as the LLM sees it (test files excluded by default).
    Tree(cli::repo::TreeArgs),
    /// Show a target's signature, docstring, body and call sites, and what masking hides.
    Show(cli::repo::ShowArgs),
    /// Measure throughput on generated or real inputs.
    #[command(subcommand)]
    Bench(cli::bench::Cmd),
    /// Regenerate a repository function from its signature and docstring (target masked).
    Generate(cli::generate::GenerateArgs),
    /// Complete the line at a cursor (SaraCoder: graph slices, external identifiers).
    Complete(cli::complete::CompleteArgs),
    /// Check a function's names against its repository (what generation's repair round sees).
    Check(cli::check::CheckArgs),
    /// Run the local LLM on one prompt (chat template, optional one-of constraint).
    Llm(cli::llm::LlmArgs),
    /// Score completions by running each task's tests (DevEval Pass@1), or generate and score.
    Eval(cli::eval::EvalArgs),
    /// Draw line-completion cursors from repositories (RepoEval style) as line tasks.
    SampleLines(cli::eval::SampleArgs),
    /// Compare run directories side by side (markdown or JSON) and chart them.
    Report(cli::eval::ReportArgs),
    /// Find the functions most similar to a query (dense embeddings, cosine).
    Search(cli::search::SearchArgs),
}

fn main() {
    cli::quiet_process_setup();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(cmd) => cli::models::run(cmd),
        Command::Index(args) => cli::repo::index(args),
        Command::Symbols(args) => cli::repo::symbols(args),
        Command::Tree(args) => cli::repo::tree(args),
        Command::Show(args) => cli::repo::show(args),
        Command::Bench(cmd) => cli::bench::run(cmd),
        Command::Generate(args) => cli::generate::run(args),
        Command::Llm(args) => cli::llm::run(args),
        Command::Check(args) => cli::check::run(args),
        Command::Complete(args) => cli::complete::run(args),
        Command::Eval(args) => cli::eval::run_eval(args),
        Command::Report(args) => cli::eval::run_report(args),
        Command::SampleLines(args) => cli::eval::run_sample(args),
        Command::Search(args) => cli::search::search(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
