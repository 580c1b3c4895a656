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
    /// Score completions by running each task's tests (DevEval Pass@1), or generate and score.
    Eval(cli::eval::EvalArgs),
    /// Compare run directories side by side (markdown or JSON) and chart them.
    Report(cli::eval::ReportArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(cmd) => cli::models::run(cmd),
        Command::Eval(args) => cli::eval::run_eval(args),
        Command::Report(args) => cli::eval::run_report(args),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
