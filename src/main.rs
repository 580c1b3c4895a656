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
    /// Benchmark embedding throughput and top-k latency (against sentence-transformers).
    EmbedBench(cli::search::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(cmd) => cli::models::run(cmd),
        Command::EmbedBench(args) => cli::search::bench(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
