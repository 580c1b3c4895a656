//! Model manifests, the models directory, and resolution of a model name to files on disk.

mod manifest;

pub use manifest::{ModelKind, ModelSpec, Source, DEFAULT_EMBEDDER, DEFAULT_GENERATOR, MODELS};

use std::path::PathBuf;

/// Where fetched weights live: `$REPOHOP_MODELS`, else `$XDG_CACHE_HOME/repohop/models`, else
/// `~/.cache/repohop/models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("REPOHOP_MODELS").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("repohop").join("models")
}

/// The built-in model with this alias, if any.
pub fn spec(alias: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| m.alias == alias)
}
