//! BERT-family encoders (BERT, RoBERTa and its descendants: CodeBERT, GraphCodeBERT, UniXcoder).
//!
//! Post-norm transformer: embeddings (word + position + token type) → LayerNorm, then per layer
//! self-attention → add & LayerNorm → GELU feed-forward → add & LayerNorm. RoBERTa-style models
//! number positions from `padding_idx + 1` (padding itself sits at `padding_idx`).

use std::path::Path;

use candle_core::{Result, Tensor};

use super::kernels;
use super::ops::{self, Linear};
use super::weights::Weights;
use super::EmbedError;

#[derive(Debug, Clone, Copy)]
enum Activation {
    GeluErf,
    GeluTanh,
    Relu,
}

struct Norm {
    gamma: Tensor,
    beta: Tensor,
}

impl Norm {
    fn load(w: &Weights, name: &str, d: usize) -> std::result::Result<Self, EmbedError> {
        // Old TensorFlow-converted checkpoints call them gamma/beta.
        let (g, b) = if w.has(&format!("{name}.gamma")) {
            ("gamma", "beta")
        } else {
            ("weight", "bias")
        };
        Ok(Self {
            gamma: w.get(&format!("{name}.{g}"), &[d])?,
            beta: w.get(&format!("{name}.{b}"), &[d])?,
        })
    }
}

struct Layer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

pub struct Bert {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    emb_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    hidden: usize,
    eps: f64,
    act: Activation,
    /// First position id of a real token (0 for BERT, `padding_idx + 1` for RoBERTa).
    first_position: u32,
    /// Position id of padding tokens.
    pad_position: u32,
    max_positions: usize,
}

fn field(
    config: &serde_json::Value,
    path: &Path,
    key: &str,
) -> std::result::Result<usize, EmbedError> {
    let reason = match config[key].as_u64() {
        None => format!("`{key}` is missing or not a number"),
        Some(0) => format!("`{key}` is 0"),
        Some(n) => return Ok(n as usize),
    };
    Err(EmbedError::BadFile {
        path: path.into(),
        reason,
    })
}

impl Bert {
    pub fn load(
        config_path: &Path,
        config_text: &str,
        w: &Weights,
    ) -> std::result::Result<Self, EmbedError> {
        let config: serde_json::Value =
            serde_json::from_str(config_text).map_err(|e| EmbedError::BadFile {
                path: config_path.into(),
                reason: e.to_string(),
            })?;
        let f = |k: &str| field(&config, config_path, k);
        let (hidden, heads, n_layers, inter) = (
            f("hidden_size")?,
            f("num_attention_heads")?,
            f("num_hidden_layers")?,
            f("intermediate_size")?,
        );
        let (vocab, n_pos) = (f("vocab_size")?, f("max_position_embeddings")?);
        let types = config["type_vocab_size"].as_u64().unwrap_or(2) as usize;
        if !hidden.is_multiple_of(heads) {
            return Err(EmbedError::BadFile {
                path: config_path.into(),
                reason: format!(
                    "hidden_size {hidden} is not divisible by num_attention_heads {heads}"
                ),
            });
        }
        let eps = config["layer_norm_eps"].as_f64().unwrap_or(1e-12);
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(EmbedError::BadFile {
                path: config_path.into(),
                reason: format!("layer_norm_eps {eps} is not a finite non-negative number"),
            });
        }
        let act = match config["hidden_act"].as_str().unwrap_or("gelu") {
            "gelu" => Activation::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => {
                return Err(EmbedError::BadFile {
                    path: config_path.into(),
                    reason: format!("hidden_act `{other}` is not supported (gelu, gelu_new, relu)"),
                })
            }
        };
        let roberta_style = matches!(
            config["model_type"].as_str(),
            Some("roberta" | "xlm-roberta" | "camembert")
        );
        let pad = config["pad_token_id"].as_u64().unwrap_or(0);
        let (first_position, pad_position) = if roberta_style {
            // Real tokens are numbered from padding_idx + 1: that position must be in the table.
            let first = u32::try_from(pad).ok().and_then(|p| p.checked_add(1));
            match first {
                Some(first) if (first as usize) < n_pos => (first, first - 1),
                _ => {
                    return Err(EmbedError::BadFile {
                        path: config_path.into(),
                        reason: format!(
                            "pad_token_id {pad}: positions start at pad_token_id + 1, past \
                             max_position_embeddings {n_pos}"
                        ),
                    })
                }
            }
        } else {
            (0, 0)
        };
        let max_positions = n_pos - first_position as usize;
        let err = |e: candle_core::Error| EmbedError::BadFile {
            path: w.path().into(),
            reason: e.to_string(),
        };
        // The embeddings first: their shapes bound the sizes config.json gives.
        let word = w.get("embeddings.word_embeddings.weight", &[vocab, hidden])?;
        let position = w.get("embeddings.position_embeddings.weight", &[n_pos, hidden])?;
        let token_type = w
            .get("embeddings.token_type_embeddings.weight", &[types, hidden])?
            .get(0)
            .map_err(err)?;
        let emb_norm = Norm::load(w, "embeddings.LayerNorm", hidden)?;
        // Not preallocated: the count comes from config.json, the layers may not exist.
        let mut layers = Vec::new();
        for i in 0..n_layers {
            let p = format!("encoder.layer.{i}");
            let qkv = Linear::fuse(
                ["query", "key", "value"]
                    .iter()
                    .map(|n| {
                        Linear::load(w, &format!("{p}.attention.self.{n}"), hidden, hidden, true)
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?,
                w.path(),
            )?;
            layers.push(Layer {
                qkv: qkv.prepared().map_err(err)?,
                attn_out: Linear::load(
                    w,
                    &format!("{p}.attention.output.dense"),
                    hidden,
                    hidden,
                    true,
                )?
                .prepared()
                .map_err(err)?,
                attn_norm: Norm::load(w, &format!("{p}.attention.output.LayerNorm"), hidden)?,
                up: Linear::load(w, &format!("{p}.intermediate.dense"), hidden, inter, true)?
                    .prepared()
                    .map_err(err)?,
                down: Linear::load(w, &format!("{p}.output.dense"), inter, hidden, true)?
                    .prepared()
                    .map_err(err)?,
                out_norm: Norm::load(w, &format!("{p}.output.LayerNorm"), hidden)?,
            });
        }
        Ok(Self {
            word,
            position,
            token_type,
            emb_norm,
            layers,
            heads,
            hidden,
            eps,
            act,
            first_position,
            pad_position,
            max_positions,
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    pub fn vocab_rows(&self) -> usize {
        self.word.dims()[0]
    }

    /// Longest sequence the position table allows.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn after_norm<'a>(&self, n: &'a Norm) -> ops::After<'a> {
        ops::After::Norm {
            gamma: &n.gamma,
            beta: &n.beta,
            eps: self.eps as f32,
        }
    }

    fn norm(&self, x: &Tensor, n: &Norm) -> Result<Tensor> {
        candle_nn::ops::layer_norm(x, &n.gamma, &n.beta, self.eps as f32)
    }

    /// `ids`: (batch, len) u32; `mask`: (batch, len) f32; `real`: the same mask on the host.
    /// Returns the last hidden states (batch, len, hidden).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor, real: &[bool]) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        let (d, h) = (self.hidden, self.heads);
        let dh = d / h;
        let mut positions = vec![self.pad_position; b * l];
        for r in 0..b {
            let mut next = self.first_position;
            for j in 0..l {
                if real[r * l + j] {
                    positions[r * l + j] = next;
                    next += 1;
                }
            }
        }
        let positions = Tensor::from_vec(positions, b * l, ids.device())?;
        let x = self
            .word
            .index_select(&ids.flatten_all()?, 0)?
            .add(&self.position.index_select(&positions, 0)?)?
            .broadcast_add(&self.token_type)?;
        let mut x = self.norm(&x, &self.emb_norm)?;
        let bias = ((mask - 1.0)? * (-ops::MASKED as f64))?.reshape((b, 1, 1, l))?;
        for layer in &self.layers {
            let qkv = layer.qkv.forward(&x)?;
            let ctx = if qkv.device().is_cpu() {
                kernels::encoder_attention(&qkv, mask, b, l, h, dh)?
            } else {
                let qkv = qkv
                    .reshape((b, l, 3, h, dh))?
                    .permute((2, 0, 3, 1, 4))?
                    .contiguous()?;
                ops::attention(&qkv.get(0)?, &qkv.get(1)?, &qkv.get(2)?, &bias)?
                    .transpose(1, 2)?
                    .contiguous()?
                    .reshape((b * l, d))?
            };
            x = layer
                .attn_out
                .forward_with(&ctx, Some(&x), self.after_norm(&layer.attn_norm))?;
            let act = match self.act {
                Activation::GeluErf => layer.up.forward_with(&x, None, ops::After::Gelu)?,
                Activation::GeluTanh => layer.up.forward(&x)?.gelu()?,
                Activation::Relu => layer.up.forward(&x)?.relu()?,
            };
            x = layer
                .down
                .forward_with(&act, Some(&x), self.after_norm(&layer.out_norm))?;
        }
        x.reshape((b, l, d))
    }
}
