//! How a model's token vectors become one text vector: pooling, normalisation, prompts and
//! maximum length, read from the model's own sentence-transformers files where present
//! (`modules.json`, `1_Pooling/config.json`, `config_sentence_transformers.json`,
//! `sentence_bert_config.json`), otherwise from the architecture family's defaults.

use std::path::Path;

use candle_core::{Tensor, D};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{EmbedError, ModelDir};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// Mean of the token vectors under the attention mask (all-MiniLM, UniXcoder).
    Mean,
    /// The first token's vector (`[CLS]` / `<s>`).
    Cls,
    /// The last real token's vector (decoders such as Qwen3-Embedding; needs left padding).
    LastToken,
    /// Element-wise maximum over the real tokens.
    Max,
}

/// Qwen3-Embedding's query format when the model folder does not set one.
pub const QWEN3_QUERY_PROMPT: &str =
    "Instruct: Given a function signature and docstring, retrieve code relevant to implementing it\nQuery:";
/// Longest Qwen3 input we run: attention memory grows with the square of the length.
pub const QWEN3_MAX_TOKENS: usize = 2048;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub pooling: Pooling,
    pub normalize: bool,
    /// Prepended to queries (and documents) before tokenization.
    pub query_prompt: Option<String>,
    pub document_prompt: Option<String>,
    /// Upper bound on tokens per input (special tokens included).
    pub max_tokens: usize,
    pub pad_id: u32,
    /// Pad on the left (decoders with last-token pooling) instead of the right.
    pub left_pad: bool,
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>, EmbedError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(EmbedError::BadFile {
                path: path.into(),
                reason: e.to_string(),
            })
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EmbedError::BadFile {
            path: path.into(),
            reason: format!("not valid JSON: {e}"),
        })
}

impl Settings {
    /// A stable id of the weights in `dir` with these settings, for cache keys: a readable
    /// prefix and a short hash of the config, the settings, and the weight file's size and
    /// modification time.
    pub fn fingerprint(&self, dir: &ModelDir, config_text: &str) -> String {
        let mut h = Sha256::new();
        h.update(config_text.as_bytes());
        h.update(format!("{self:?}").as_bytes());
        if let Ok(meta) = std::fs::metadata(dir.path.join("model.safetensors")) {
            h.update(meta.len().to_le_bytes());
            if let Ok(t) = meta.modified().and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map_err(std::io::Error::other)
            }) {
                h.update(t.as_nanos().to_le_bytes());
            }
        }
        let base: String = dir
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.name.clone())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{base}-{}", &hex::encode(h.finalize())[..16])
    }

    /// `family` is `bert` or `qwen3`; `config` is the parsed `config.json`.
    pub fn read(
        dir: &ModelDir,
        family: &str,
        config: &serde_json::Value,
    ) -> Result<Self, EmbedError> {
        let decoder = family == "qwen3";
        let pooling_path = dir.path.join("1_Pooling/config.json");
        let pooling = match read_json(&pooling_path)? {
            Some(p) => pooling_from(&p).ok_or_else(|| EmbedError::BadFile {
                path: pooling_path,
                reason: "needs exactly one supported pooling mode (lasttoken, cls, mean, max)"
                    .into(),
            })?,
            None if decoder => Pooling::LastToken,
            None => Pooling::Mean,
        };
        // modules.json lists a Normalize module when the model's vectors are meant normalised;
        // without it we normalise (cosine similarity is what every caller computes).
        let normalize = match read_json(&dir.path.join("modules.json"))? {
            Some(m) => m.as_array().is_some_and(|mods| {
                mods.iter().any(|m| {
                    m["type"]
                        .as_str()
                        .is_some_and(|t| t.ends_with(".Normalize"))
                })
            }),
            None => true,
        };
        let st = read_json(&dir.path.join("config_sentence_transformers.json"))?;
        let prompt = |name: &str| {
            st.as_ref()
                .and_then(|s| s["prompts"][name].as_str())
                .filter(|p| !p.is_empty())
                .map(str::to_string)
        };
        let query_prompt = match (&st, decoder) {
            (Some(s), _) if s.get("prompts").is_some() => prompt("query"),
            (_, true) => Some(QWEN3_QUERY_PROMPT.to_string()),
            _ => None,
        };
        let document_prompt = prompt("document");
        // sentence-transformers < 6 writes max_seq_length; ≥ 6 keeps it as the tokenizer's
        // model_max_length (a huge sentinel there means "unset").
        let configured = read_json(&dir.path.join("sentence_bert_config.json"))?
            .and_then(|s| s["max_seq_length"].as_u64())
            .or(read_json(&dir.path.join("tokenizer_config.json"))?
                .and_then(|t| t["model_max_length"].as_u64())
                .filter(|&n| n <= 1 << 20))
            .map(|n| n as usize);
        let max_tokens = match (configured, decoder) {
            (Some(n), true) => n.min(QWEN3_MAX_TOKENS),
            (Some(n), false) => n,
            (None, true) => QWEN3_MAX_TOKENS,
            // Bounded further by the position table in `bert.rs`.
            (None, false) => 512,
        };
        let pad_id = config["pad_token_id"]
            .as_u64()
            .or_else(|| config["eos_token_id"].as_u64())
            .unwrap_or(0) as u32;
        Ok(Self {
            pooling,
            normalize,
            query_prompt,
            document_prompt,
            max_tokens: max_tokens.max(2),
            pad_id,
            left_pad: pooling == Pooling::LastToken,
        })
    }
}

/// The pooling of a `1_Pooling/config.json`: sentence-transformers ≥ 6 writes
/// `"pooling_mode": "mean"` (or a list), older versions one `pooling_mode_*_token(s)` flag each.
fn pooling_from(p: &serde_json::Value) -> Option<Pooling> {
    let by_name = |name: &str| match name {
        "lasttoken" => Some(Pooling::LastToken),
        "cls" => Some(Pooling::Cls),
        "mean" => Some(Pooling::Mean),
        "max" => Some(Pooling::Max),
        _ => None,
    };
    match &p["pooling_mode"] {
        serde_json::Value::String(name) => return by_name(name),
        serde_json::Value::Array(names) if names.len() == 1 => {
            return names[0].as_str().and_then(by_name)
        }
        serde_json::Value::Null => {}
        _ => return None,
    }
    let on = |k: &str| p[k].as_bool().unwrap_or(false);
    [
        ("pooling_mode_lasttoken", Pooling::LastToken),
        ("pooling_mode_cls_token", Pooling::Cls),
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_max_tokens", Pooling::Max),
    ]
    .into_iter()
    .filter(|(k, _)| on(k))
    .map(|(_, m)| m)
    .collect::<Vec<_>>()
    // Several modes at once (concatenated vectors) are not supported.
    .pop()
    .filter(|_| {
        [
            "pooling_mode_lasttoken",
            "pooling_mode_cls_token",
            "pooling_mode_mean_tokens",
            "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens",
        ]
        .iter()
        .filter(|k| on(k))
        .count()
            == 1
    })
}

/// Pool `hidden` (batch, len, dim) under `mask` (batch, len; 1.0 = real token) to (batch, dim).
pub fn pool(hidden: &Tensor, mask: &Tensor, pooling: Pooling) -> candle_core::Result<Tensor> {
    let (_, len, _) = hidden.dims3()?;
    match pooling {
        Pooling::Mean => {
            let m = mask.to_dtype(hidden.dtype())?.unsqueeze(2)?;
            let sum = hidden.broadcast_mul(&m)?.sum(1)?;
            let count = m.sum(1)?.clamp(1e-9, f64::MAX)?;
            sum.broadcast_div(&count)
        }
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1),
        Pooling::LastToken => hidden.narrow(1, len - 1, 1)?.squeeze(1),
        Pooling::Max => {
            let m = mask.to_dtype(hidden.dtype())?.unsqueeze(2)?;
            let penalty = ((m - 1.0)? * 1e30)?;
            hidden.broadcast_add(&penalty)?.max(D::Minus2)
        }
    }
}
