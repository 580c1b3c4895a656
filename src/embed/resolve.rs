//! From a model name to a directory holding `config.json`, `model.safetensors` and
//! `tokenizer.json`: a built-in alias, a local directory, or a Hugging Face repo id found in the
//! local `hf-hub` cache (downloaded only when `HF_HUB_OFFLINE` is not `1` and a hub answers).

use std::path::{Path, PathBuf};

use super::EmbedError;
use crate::models::{self, ModelKind};

/// Files every embedding model directory must hold.
pub const REQUIRED: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];
/// sentence-transformers files read when present.
pub const OPTIONAL: [&str; 4] = [
    "modules.json",
    "1_Pooling/config.json",
    "config_sentence_transformers.json",
    "sentence_bert_config.json",
];

/// Where a resolved model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A built-in alias from `repohop::models::MODELS`.
    Alias(&'static str),
    Dir,
    Hub,
}

#[derive(Debug, Clone)]
pub struct ModelDir {
    /// The name as given by the user.
    pub name: String,
    pub path: PathBuf,
    pub origin: Origin,
}

/// Resolve `name`: a built-in embedder alias first, then an existing directory, then a
/// Hugging Face repo id (`owner/name`).
pub fn resolve(name: &str) -> Result<ModelDir, EmbedError> {
    if let Some(spec) = models::spec(name) {
        if spec.kind != ModelKind::Embedder {
            return Err(EmbedError::ModelNotFound {
                name: name.into(),
                hint: format!("`{name}` is a generator model, not an embedder"),
            });
        }
        // Fetches the model (with progress on stderr) when it is missing.
        let path = models::ensure(name).map_err(|e| EmbedError::ModelNotFound {
            name: name.into(),
            hint: format!("{e}; run `repohop models fetch {name}` or set REPOHOP_MODELS"),
        })?;
        check_dir(&path)?;
        return Ok(ModelDir {
            name: name.into(),
            path,
            origin: Origin::Alias(spec.alias),
        });
    }
    let as_path = Path::new(name);
    if as_path.is_dir() {
        check_dir(as_path)?;
        return Ok(ModelDir {
            name: name.into(),
            path: as_path.to_path_buf(),
            origin: Origin::Dir,
        });
    }
    if is_repo_id(name) {
        return from_hub(name);
    }
    let aliases: Vec<&str> = models::MODELS
        .iter()
        .filter(|m| m.kind == ModelKind::Embedder)
        .map(|m| m.alias)
        .collect();
    Err(EmbedError::ModelNotFound {
        name: name.into(),
        hint: format!(
            "not a built-in alias ({}), an existing directory, or a Hugging Face repo id `owner/name`",
            aliases.join(", ")
        ),
    })
}

/// The required files of a model directory, each reported by name when missing.
fn check_dir(dir: &Path) -> Result<(), EmbedError> {
    for f in REQUIRED {
        let p = dir.join(f);
        if !p.is_file() {
            return Err(EmbedError::MissingFile {
                path: p,
                what: format!("an embedding model directory needs {}", REQUIRED.join(", ")),
            });
        }
    }
    Ok(())
}

fn is_repo_id(name: &str) -> bool {
    let mut parts = name.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

fn hub_offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// A repo id through the `hf-hub` cache (`$HF_HOME/hub`); downloads missing files only when
/// online mode is allowed.
fn from_hub(repo: &str) -> Result<ModelDir, EmbedError> {
    let cache = hf_hub::Cache::from_env();
    let cached = cache.model(repo.to_string());
    let mut paths = Vec::new();
    for f in REQUIRED {
        let path = match cached.get(f) {
            Some(p) => p,
            None if hub_offline() => {
                return Err(EmbedError::ModelNotFound {
                    name: repo.into(),
                    hint: format!(
                        "{f} is not in the Hugging Face cache {} and HF_HUB_OFFLINE=1; copy the model there or pass its directory",
                        cache.path().display()
                    ),
                })
            }
            None => download(repo, f)?,
        };
        paths.push(path);
    }
    for f in OPTIONAL {
        if cached.get(f).is_none() && !hub_offline() {
            // Optional files: absence on the hub is normal.
            let _ = download(repo, f);
        }
    }
    let dir = paths[0].parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(ModelDir {
        name: repo.into(),
        path: dir,
        origin: Origin::Hub,
    })
}

fn download(repo: &str, file: &str) -> Result<PathBuf, EmbedError> {
    let fail = |e: String| {
        EmbedError::ModelNotFound {
        name: repo.into(),
        hint: format!(
            "{file} is not in the Hugging Face cache and downloading it failed ({e}); on an offline machine copy the model into the cache or pass its directory"
        ),
    }
    };
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(false)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    api.model(repo.to_string())
        .get(file)
        .map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        assert!(is_repo_id("sentence-transformers/all-MiniLM-L6-v2"));
        assert!(is_repo_id("Qwen/Qwen3-Embedding-0.6B"));
        assert!(!is_repo_id("minilm"));
        assert!(!is_repo_id("a/b/c"));
        assert!(!is_repo_id("/abs/path"));
    }
}
