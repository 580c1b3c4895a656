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
    /// Run the local LLM on one prompt (chat template, optional one-of constraint).
    Llm(cli::llm::LlmArgs),
    /// Benchmark the local LLM: prefill/decode tokens/s, constraint overhead, prefix cache.
    LlmBench(cli::llm::BenchLlmArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(cmd) => cli::models::run(cmd),
        Command::Llm(args) => cli::llm::run(args),
        Command::LlmBench(args) => cli::llm::bench(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
