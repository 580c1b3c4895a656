//! `repohop models`: list the built-in models and where they live.

use anyhow::Result;
use clap::Subcommand;
use repohop::models;

#[derive(Subcommand)]
pub enum Cmd {
    /// List the built-in models, their folders, and whether they are present.
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::List { json } => list(json),
    }
}

fn list(json: bool) -> Result<()> {
    let dir = models::models_dir();
    let rows: Vec<serde_json::Value> = models::MODELS
        .iter()
        .map(|m| {
            let path = dir.join(m.dir);
            let present = m.files.iter().all(|f| path.join(f).is_file());
            serde_json::json!({
                "alias": m.alias,
                "kind": m.kind,
                "description": m.description,
                "path": path,
                "present": present,
            })
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("models directory: {}", dir.display());
    for (m, row) in models::MODELS.iter().zip(&rows) {
        let state = if row["present"] == true {
            "present"
        } else {
            "missing"
        };
        println!(
            "  {:<20} {:<8} {}  ({})",
            m.alias, state, m.description, m.dir
        );
    }
    Ok(())
}
