//! Qwen3 decoder used as an embedder (Qwen3-Embedding): pre-norm RMSNorm blocks, grouped-query
//! causal attention with per-head RMSNorm on queries and keys and rotary positions, SwiGLU
//! feed-forward, a final RMSNorm. Inputs are left-padded so the last column is every row's
//! last real token (the pooled one).

use std::path::Path;

use candle_core::{Result, Tensor, D};

use super::ops::{self, Linear};
use super::weights::Weights;
use super::EmbedError;

struct Layer {
    in_norm: Tensor,
    qkv: Linear,
    q_norm: Tensor,
    k_norm: Tensor,
    o: Linear,
    post_norm: Tensor,
    gate_up: Linear,
    down: Linear,
}

pub struct Qwen3 {
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    hidden: usize,
    inter: usize,
    eps: f32,
    /// Rotary frequencies, one per pair of dimensions.
    inv_freq: Vec<f32>,
}

impl Qwen3 {
    pub fn load(
        config_path: &Path,
        config_text: &str,
        w: &Weights,
    ) -> std::result::Result<Self, EmbedError> {
        let bad = |reason: String| EmbedError::BadFile {
            path: config_path.into(),
            reason,
        };
        let c: serde_json::Value =
            serde_json::from_str(config_text).map_err(|e| bad(e.to_string()))?;
        let f = |k: &str| match c[k].as_u64() {
            None => Err(bad(format!("`{k}` is missing or not a number"))),
            Some(0) => Err(bad(format!("`{k}` is 0"))),
            Some(n) => Ok(n as usize),
        };
        let (hidden, heads, n_layers, inter, vocab) = (
            f("hidden_size")?,
            f("num_attention_heads")?,
            f("num_hidden_layers")?,
            f("intermediate_size")?,
            f("vocab_size")?,
        );
        let kv_heads = c["num_key_value_heads"]
            .as_u64()
            .map_or(heads, |n| n as usize);
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad(format!(
                "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )));
        }
        let head_dim = c["head_dim"]
            .as_u64()
            .map_or(hidden / heads, |n| n as usize);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(bad(format!(
                "head_dim {head_dim} is not a positive even number (the rotary embedding rotates \
                 its two halves)"
            )));
        }
        let eps = c["rms_norm_eps"].as_f64().unwrap_or(1e-6);
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(bad(format!(
                "rms_norm_eps {eps} is not a finite non-negative number"
            )));
        }
        let eps = eps as f32;
        let q_dim = heads
            .checked_mul(head_dim)
            .ok_or_else(|| bad(format!("{heads} heads of {head_dim} dimensions overflow")))?;
        // transformers ≥ 5 moved rope_theta into rope_parameters.
        let theta = c["rope_theta"]
            .as_f64()
            .or_else(|| c["rope_parameters"]["rope_theta"].as_f64())
            .unwrap_or(1_000_000.0);
        if !(theta.is_finite() && theta > 0.0) {
            return Err(bad(format!(
                "rope_theta {theta} is not a positive finite number"
            )));
        }
        if c["attention_bias"].as_bool() == Some(true) {
            return Err(bad(
                "attention_bias = true is not supported for qwen3".into()
            ));
        }
        let err = |e: candle_core::Error| EmbedError::BadFile {
            path: w.path().into(),
            reason: e.to_string(),
        };
        // The embeddings first: their shape bounds the sizes config.json gives.
        let embed = w.get("embed_tokens.weight", &[vocab, hidden])?;
        let norm = w.get("norm.weight", &[hidden])?;
        // Not preallocated: the count comes from config.json, the layers may not exist.
        let mut layers = Vec::new();
        for i in 0..n_layers {
            let p = format!("layers.{i}");
            let lin = |n: &str, inp, out| Linear::load(w, &format!("{p}.{n}"), inp, out, false);
            let qkv = Linear::fuse(
                vec![
                    lin("self_attn.q_proj", hidden, q_dim)?,
                    lin("self_attn.k_proj", hidden, kv_heads * head_dim)?,
                    lin("self_attn.v_proj", hidden, kv_heads * head_dim)?,
                ],
                w.path(),
            )?;
            let gate_up = Linear::fuse(
                vec![
                    lin("mlp.gate_proj", hidden, inter)?,
                    lin("mlp.up_proj", hidden, inter)?,
                ],
                w.path(),
            )?;
            layers.push(Layer {
                in_norm: w.get(&format!("{p}.input_layernorm.weight"), &[hidden])?,
                qkv: qkv.prepared().map_err(err)?,
                q_norm: w.get(&format!("{p}.self_attn.q_norm.weight"), &[head_dim])?,
                k_norm: w.get(&format!("{p}.self_attn.k_norm.weight"), &[head_dim])?,
                o: lin("self_attn.o_proj", q_dim, hidden)?
                    .prepared()
                    .map_err(err)?,
                post_norm: w.get(&format!("{p}.post_attention_layernorm.weight"), &[hidden])?,
                gate_up: gate_up.prepared().map_err(err)?,
                down: lin("mlp.down_proj", inter, hidden)?
                    .prepared()
                    .map_err(err)?,
            });
        }
        // After the layers: their q/k norms (head_dim wide) vouch for head_dim.
        let inv_freq = (0..head_dim / 2)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        Ok(Self {
            embed,
            layers,
            norm,
            heads,
            kv_heads,
            head_dim,
            hidden,
            inter,
            eps,
            inv_freq,
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    pub fn vocab_rows(&self) -> usize {
        self.embed.dims()[0]
    }

    /// cos and sin of every token's rotary angles, (batch, 1, len, head_dim), halves repeated.
    fn rotary(
        &self,
        b: usize,
        l: usize,
        real: &[bool],
        dev: &candle_core::Device,
    ) -> Result<(Tensor, Tensor)> {
        let half = self.head_dim / 2;
        let (mut cos, mut sin) = (
            Vec::with_capacity(b * l * half * 2),
            Vec::with_capacity(b * l * half * 2),
        );
        for r in 0..b {
            let pad = real[r * l..(r + 1) * l].iter().take_while(|m| !**m).count();
            for j in 0..l {
                // Left padding: the first real token is position 0 (RoPE only sees differences).
                let pos = j.saturating_sub(pad) as f32;
                for _ in 0..2 {
                    for &f in &self.inv_freq {
                        let a = pos * f;
                        cos.push(a.cos());
                        sin.push(a.sin());
                    }
                }
            }
        }
        let shape = (b, 1, l, half * 2);
        Ok((
            Tensor::from_vec(cos, shape, dev)?,
            Tensor::from_vec(sin, shape, dev)?,
        ))
    }

    fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let half = x.dim(D::Minus1)? / 2;
        let x1 = x.narrow(D::Minus1, 0, half)?;
        let x2 = x.narrow(D::Minus1, half, half)?;
        let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
        x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
    }

    /// `ids`: (batch, len) u32, left-padded; `real`: the mask on the host. Returns the final
    /// hidden states (batch, len, hidden).
    pub fn forward(&self, ids: &Tensor, _mask: &Tensor, real: &[bool]) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        let dev = ids.device();
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let (cos, sin) = self.rotary(b, l, real, dev)?;
        // Causal and padding mask in one additive bias, (batch, 1, len, len).
        let mut bias = vec![0f32; b * l * l];
        for r in 0..b {
            for i in 0..l {
                for j in 0..l {
                    if j > i || !real[r * l + j] {
                        bias[(r * l + i) * l + j] = ops::MASKED;
                    }
                }
            }
        }
        let bias = Tensor::from_vec(bias, (b, 1, l, l), dev)?;
        let mut x = self.embed.index_select(&ids.flatten_all()?, 0)?;
        for layer in &self.layers {
            let hn = candle_nn::ops::rms_norm(&x, &layer.in_norm, self.eps)?;
            let qkv = layer.qkv.forward(&hn)?;
            let heads = |start: usize, n: usize| -> Result<Tensor> {
                qkv.narrow(1, start * hd, n * hd)?
                    .reshape((b, l, n, hd))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = candle_nn::ops::rms_norm(&heads(0, nh)?, &layer.q_norm, self.eps)?;
            let k = candle_nn::ops::rms_norm(&heads(nh, nkv)?, &layer.k_norm, self.eps)?;
            let v = heads(nh + nkv, nkv)?;
            let q = Self::rope(&q, &cos, &sin)?;
            let k = Self::rope(&k, &cos, &sin)?;
            let group = nh / nkv;
            let repeat = |t: Tensor| -> Result<Tensor> {
                if group == 1 {
                    return Ok(t);
                }
                t.unsqueeze(2)?
                    .broadcast_as((b, nkv, group, l, hd))?
                    .contiguous()?
                    .reshape((b, nh, l, hd))
            };
            let ctx = ops::attention(&q, &repeat(k)?, &repeat(v)?, &bias)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b * l, nh * hd))?;
            x = (layer.o.forward(&ctx)? + &x)?;
            let hn = candle_nn::ops::rms_norm(&x, &layer.post_norm, self.eps)?;
            let gu = layer.gate_up.forward(&hn)?;
            let act = (candle_nn::ops::silu(&gu.narrow(1, 0, self.inter)?)?
                * gu.narrow(1, self.inter, self.inter)?)?;
            x = (layer.down.forward(&act)? + &x)?;
        }
        candle_nn::ops::rms_norm(&x, &self.norm, self.eps)?.reshape((b, l, self.hidden))
    }
}
