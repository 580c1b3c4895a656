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
    /// Find the functions most similar to a query (dense embeddings, cosine).
    Search(cli::search::SearchArgs),
    /// Benchmark embedding throughput and top-k latency (against sentence-transformers).
    EmbedBench(cli::search::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(cmd) => cli::models::run(cmd),
        Command::Index(args) => cli::repo::index(args),
        Command::Symbols(args) => cli::repo::symbols(args),
        Command::Tree(args) => cli::repo::tree(args),
        Command::Show(args) => cli::repo::show(args),
        Command::Bench(cmd) => cli::bench::run(cmd),
        Command::Search(args) => cli::search::search(args),
        Command::EmbedBench(args) => cli::search::bench(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
