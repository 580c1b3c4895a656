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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(cmd) => cli::models::run(cmd),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
