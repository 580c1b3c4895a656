//! Model resolution (alias, local path, hf-hub cache) and the checks made before loading:
//! a GGUF must be complete, a tokenizer must fit the model.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;

use super::LlmError;

/// The files of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    Gguf {
        model: PathBuf,
        tokenizer: PathBuf,
    },
    Safetensors {
        config: PathBuf,
        weights: Vec<PathBuf>,
        tokenizer: PathBuf,
    },
}

impl ModelFiles {
    pub fn tokenizer(&self) -> &Path {
        match self {
            ModelFiles::Gguf { tokenizer, .. } | ModelFiles::Safetensors { tokenizer, .. } => {
                tokenizer
            }
        }
    }
}

fn not_found(name: &str, hint: impl Into<String>) -> LlmError {
    LlmError::ModelNotFound {
        name: name.to_string(),
        hint: hint.into(),
    }
}

fn require(path: PathBuf, name: &str) -> Result<PathBuf, LlmError> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(not_found(name, format!("{} is missing", path.display())))
    }
}

/// Files of a folder holding `model.gguf` or `*.safetensors` + `config.json`, with `tokenizer.json`.
fn from_dir(dir: &Path, name: &str) -> Result<ModelFiles, LlmError> {
    // The tokenizer is checked at load time, after the model's architecture.
    let tokenizer = dir.join("tokenizer.json");
    let gguf = dir.join("model.gguf");
    if gguf.is_file() {
        return Ok(ModelFiles::Gguf {
            model: gguf,
            tokenizer,
        });
    }
    let config = require(dir.join("config.json"), name)?;
    let mut weights: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| not_found(name, format!("cannot list {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    weights.sort();
    if weights.is_empty() {
        return Err(not_found(
            name,
            format!(
                "{} holds neither model.gguf nor *.safetensors",
                dir.display()
            ),
        ));
    }
    Ok(ModelFiles::Safetensors {
        config,
        weights,
        tokenizer,
    })
}

/// Resolves `name`: a built-in alias (see `repohop models list`; fetched if missing), a path to a `.gguf` file
/// (with `tokenizer.json` beside it) or to a model folder, or a Hugging Face repo id already in
/// the local hf-hub cache (offline; never downloads).
pub fn resolve(name: &str) -> Result<ModelFiles, LlmError> {
    if crate::models::spec(name).is_some() {
        // A missing built-in model is fetched once, with progress on stderr.
        let dir = crate::models::ensure(name).map_err(|e| not_found(name, e.to_string()))?;
        return from_dir(&dir, name);
    }
    let path = Path::new(name);
    if path.is_file() {
        return Ok(ModelFiles::Gguf {
            model: path.to_path_buf(),
            tokenizer: path.with_file_name("tokenizer.json"),
        });
    }
    if path.is_dir() {
        return from_dir(path, name);
    }
    let looks_like_path = name.starts_with(['/', '.', '~']) || name.ends_with(".gguf");
    if looks_like_path {
        return Err(not_found(name, "no such file or folder"));
    }
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() == 2 && parts.iter().all(|p| !p.is_empty()) {
        let repo = hf_hub::Cache::from_env().model(name.to_string());
        let get = |f: &str| {
            repo.get(f).ok_or_else(|| {
                not_found(name, format!("{f} is not in the local Hugging Face cache"))
            })
        };
        let tokenizer = get("tokenizer.json")?;
        let config = get("config.json")?;
        let weights = match repo.get("model.safetensors") {
            Some(w) => vec![w],
            None => {
                let index = get("model.safetensors.index.json")?;
                let text = std::fs::read_to_string(&index)
                    .map_err(|e| not_found(name, format!("{}: {e}", index.display())))?;
                let json: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| not_found(name, format!("{}: {e}", index.display())))?;
                let mut files: Vec<String> = json["weight_map"]
                    .as_object()
                    .map(|m| {
                        m.values()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                files.sort();
                files.dedup();
                files.iter().map(|f| get(f)).collect::<Result<_, _>>()?
            }
        };
        return Ok(ModelFiles::Safetensors {
            config,
            weights,
            tokenizer,
        });
    }
    let aliases: Vec<&str> = crate::models::MODELS
        .iter()
        .filter(|m| m.kind == crate::models::ModelKind::Generator)
        .map(|m| m.alias)
        .collect();
    Err(not_found(
        name,
        format!(
            "not a built-in alias ({}), an existing path, or a cached Hugging Face repo id",
            aliases.join(", ")
        ),
    ))
}

/// Reads a GGUF header and checks that the file holds every tensor it lists.
pub fn read_gguf<R: Read + Seek>(
    path: &Path,
    reader: &mut R,
) -> Result<gguf_file::Content, LlmError> {
    let content = gguf_file::Content::read(reader).map_err(|e| LlmError::Load {
        path: path.to_path_buf(),
        reason: format!("not a readable GGUF file ({e})"),
    })?;
    let expected = content
        .tensor_infos
        .values()
        .map(|t| {
            let dt = t.ggml_dtype;
            t.offset + (t.shape.elem_count() / dt.block_size() * dt.type_size()) as u64
        })
        .max()
        .unwrap_or(0)
        + content.tensor_data_offset;
    let actual = reader.seek(SeekFrom::End(0)).unwrap_or(0);
    if actual < expected {
        return Err(LlmError::Truncated {
            path: path.to_path_buf(),
            expected,
            actual,
        });
    }
    Ok(content)
}

/// Reads `tokenizer.json`: the one way every tokenizer (the generator's and the embedders') is
/// loaded.
pub fn read_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, LlmError> {
    let bytes = std::fs::read(path).map_err(|e| LlmError::Load {
        path: path.to_path_buf(),
        reason: format!("cannot read the tokenizer ({e})"),
    })?;
    tokenizer_from_bytes(path, &bytes)
}

/// [`read_tokenizer`] of the file's bytes; `path` names it in errors.
pub fn tokenizer_from_bytes(path: &Path, bytes: &[u8]) -> Result<tokenizers::Tokenizer, LlmError> {
    tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| LlmError::Load {
        path: path.to_path_buf(),
        reason: format!("not a tokenizer.json ({e})"),
    })
}

/// Loads a tokenizer and checks it belongs to a Qwen model of `vocab_size` tokens.
pub(crate) fn load_tokenizer(
    path: &Path,
    vocab_size: usize,
) -> Result<tokenizers::Tokenizer, LlmError> {
    if !path.is_file() {
        return Err(LlmError::Load {
            path: path.to_path_buf(),
            reason: "tokenizer.json is missing; put the model's tokenizer.json beside it".into(),
        });
    }
    let tok = read_tokenizer(path)?;
    let mismatch = |reason: String| LlmError::TokenizerMismatch {
        path: path.to_path_buf(),
        reason,
    };
    let n = tok.get_vocab_size(true);
    if n > vocab_size {
        return Err(mismatch(format!(
            "it has {n} tokens but the model's vocabulary has {vocab_size}; use the model's own tokenizer.json"
        )));
    }
    if tok.token_to_id("<|endoftext|>").is_none() {
        return Err(mismatch(
            "it lacks <|endoftext|>, so it is not a Qwen tokenizer".into(),
        ));
    }
    Ok(tok)
}
