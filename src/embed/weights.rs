//! A checkpoint's tensors by name, with errors that name the file and the tensor.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use super::EmbedError;

pub struct Weights {
    path: PathBuf,
    tensors: HashMap<String, Tensor>,
}

/// Prefixes under which checkpoints nest the bare model (`BertModel` inside a task model etc.).
const PREFIXES: [&str; 4] = ["", "bert.", "roberta.", "model."];

impl Weights {
    /// Read and validate a safetensors file; a truncated or corrupt file is an error naming it.
    pub fn read(path: &Path, device: &Device) -> Result<Self, EmbedError> {
        let bytes = std::fs::read(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EmbedError::MissingFile {
                path: path.into(),
                what: "the model's weights".into(),
            },
            _ => EmbedError::BadFile {
                path: path.into(),
                reason: e.to_string(),
            },
        })?;
        Self::from_bytes(path, &bytes, device)
    }

    /// [`Weights::read`] of the file's bytes; `path` names it in errors.
    pub fn from_bytes(path: &Path, bytes: &[u8], device: &Device) -> Result<Self, EmbedError> {
        let bad = |e: String| EmbedError::BadFile {
            path: path.into(),
            reason: format!(
                "not a valid safetensors file ({e}); it may be truncated: fetch it again"
            ),
        };
        safetensors::SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
        let tensors =
            candle_core::safetensors::load_buffer(bytes, device).map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            path: path.into(),
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensor `name` (under any known prefix) as f32 with exactly `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor, EmbedError> {
        let t = PREFIXES
            .iter()
            .find_map(|p| self.tensors.get(&format!("{p}{name}")))
            .ok_or_else(|| EmbedError::BadFile {
                path: self.path.clone(),
                reason: format!("tensor `{name}` is missing; the weights do not match config.json"),
            })?;
        if t.dims() != shape {
            return Err(EmbedError::BadFile {
                path: self.path.clone(),
                reason: format!(
                    "tensor `{name}` has shape {:?}, config.json implies {shape:?}",
                    t.dims()
                ),
            });
        }
        t.to_dtype(DType::F32).map_err(|e| EmbedError::BadFile {
            path: self.path.clone(),
            reason: format!("tensor `{name}`: {e}"),
        })
    }

    /// Whether `name` exists under any known prefix.
    pub fn has(&self, name: &str) -> bool {
        PREFIXES
            .iter()
            .any(|p| self.tensors.contains_key(&format!("{p}{name}")))
    }
}
