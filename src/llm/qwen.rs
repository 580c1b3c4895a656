//! Qwen2 / Qwen2.5 / Qwen3 decoder (dense), from GGUF or from safetensors + `config.json`.
//!
//! Our own implementation rather than candle-transformers' because the prefix cache needs to
//! truncate and extend each layer's KV state, which those models keep private. Qwen3 differs
//! from Qwen2 by per-head RMS norms on q and k, no qkv bias, and an explicit `head_dim`.

use std::io::{Read, Seek};
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::kernels::{self, host_f32, AttnParams, HostKv};
use super::linear::{project, Weight};
use super::LlmError;

/// Which member of the family; decides the chat template default and the layer layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Qwen2,
    Qwen3,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "qwen2" | "Qwen2ForCausalLM" => Some(Arch::Qwen2),
            "qwen3" | "Qwen3ForCausalLM" => Some(Arch::Qwen3),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QwenConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub context_length: usize,
}

/// One layer's cached keys and values, valid for the model's first `kv_len` positions.
enum KvBuffer {
    /// On the CPU, read and written by [`kernels::attention`].
    Host(HostKv),
    /// On other devices, `(1, kv_heads, capacity, head_dim)` tensors.
    Device { k: Tensor, v: Tensor },
}

impl KvBuffer {
    fn capacity(&self) -> candle_core::Result<usize> {
        match self {
            KvBuffer::Host(kv) => Ok(kv.cap),
            KvBuffer::Device { k, .. } => k.dim(2),
        }
    }
}

struct Layer {
    attn_norm: Tensor,
    q: Weight,
    k: Weight,
    v: Weight,
    o: Weight,
    q_bias: Option<Tensor>,
    k_bias: Option<Tensor>,
    v_bias: Option<Tensor>,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    ffn_norm: Tensor,
    gate: Weight,
    up: Weight,
    down: Weight,
    kv: Option<KvBuffer>,
}

pub struct QwenModel {
    pub config: QwenConfig,
    /// Embedding table (f32 for safetensors, f16 for GGUF to halve its memory).
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Weight,
    cos: Tensor,
    sin: Tensor,
    /// Number of positions held in every layer's KV buffer.
    kv_len: usize,
    device: Device,
}

fn rope_tables(cfg: &QwenConfig, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let half = cfg.head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / cfg.rope_theta.powf(2.0 * i as f64 / cfg.head_dim as f64) as f32)
        .collect();
    let n = cfg.context_length;
    let mut angles = Vec::with_capacity(n * half);
    for p in 0..n {
        angles.extend(inv.iter().map(|f| p as f32 * f));
    }
    let t = Tensor::from_vec(angles, (n, half), device)?;
    Ok((t.cos()?, t.sin()?))
}

fn gguf_err(path: &Path, e: impl std::fmt::Display) -> LlmError {
    LlmError::Load {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl QwenModel {
    /// Loads a GGUF whose `general.architecture` is `qwen2` or `qwen3`.
    pub fn from_gguf<R: Read + Seek>(
        path: &Path,
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self, LlmError> {
        let arch_name = match content.metadata.get("general.architecture") {
            Some(v) => v.to_string().map_err(|e| gguf_err(path, e))?.clone(),
            None => return Err(gguf_err(path, "GGUF has no general.architecture")),
        };
        let arch =
            Arch::from_name(&arch_name).ok_or_else(|| LlmError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                arch: arch_name.clone(),
            })?;
        let md_u = |key: &str| -> Result<usize, LlmError> {
            let full = format!("{arch_name}.{key}");
            match content.metadata.get(&full) {
                Some(v) => Ok(v.to_u32().map_err(|e| gguf_err(path, e))? as usize),
                None => Err(gguf_err(path, format!("GGUF metadata lacks {full}"))),
            }
        };
        let md_f = |key: &str, default: f64| -> f64 {
            content
                .metadata
                .get(&format!("{arch_name}.{key}"))
                .and_then(|v| v.to_f32().ok())
                .map(f64::from)
                .unwrap_or(default)
        };
        let hidden_size = md_u("embedding_length")?;
        let num_heads = md_u("attention.head_count")?;
        let head_dim = md_u("attention.key_length").unwrap_or(hidden_size / num_heads.max(1));
        let embd = content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or_else(|| gguf_err(path, "GGUF lacks token_embd.weight"))?;
        let config = QwenConfig {
            arch,
            // GGUF dims are listed innermost first; candle reverses them to (vocab, hidden).
            vocab_size: embd.shape.dims().first().copied().unwrap_or(0),
            hidden_size,
            num_layers: md_u("block_count")?,
            num_heads,
            num_kv_heads: md_u("attention.head_count_kv")?,
            head_dim,
            rope_theta: md_f("rope.freq_base", 10_000.0),
            rms_norm_eps: md_f("attention.layer_norm_rms_epsilon", 1e-6),
            context_length: md_u("context_length")?,
        };
        let mut get = |name: &str| content.tensor(reader, name, device);
        let has = |name: &str| content.tensor_infos.contains_key(name);
        let e = |err: candle_core::Error| gguf_err(path, err);
        let deq = |t: candle_core::quantized::QTensor| t.dequantize(device);
        let qmm = Weight::from_qtensor;

        // candle's CUDA `dequantize_f16` has kernels for the block-quantized types only: a
        // float table (an F32/F16/BF16 GGUF) is read through `dequantize` (the same on the CPU).
        let embed = get("token_embd.weight").map_err(e)?;
        let embed = match embed.dtype() {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => embed
                .dequantize(device)
                .and_then(|t| t.to_dtype(DType::F16)),
            _ => embed.dequantize_f16(device),
        }
        .map_err(e)?;
        let lm_head = if has("output.weight") {
            qmm(get("output.weight").map_err(e)?).map_err(e)?
        } else {
            qmm(get("token_embd.weight").map_err(e)?).map_err(e)?
        };
        let norm = deq(get("output_norm.weight").map_err(e)?).map_err(e)?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let p = format!("blk.{i}");
            let mut opt = |n: &str| -> Result<Option<Tensor>, LlmError> {
                let name = format!("{p}.{n}");
                if has(&name) {
                    Ok(Some(deq(get(&name).map_err(e)?).map_err(e)?))
                } else {
                    Ok(None)
                }
            };
            let (q_bias, k_bias, v_bias) = (
                opt("attn_q.bias")?,
                opt("attn_k.bias")?,
                opt("attn_v.bias")?,
            );
            let (q_norm, k_norm) = (opt("attn_q_norm.weight")?, opt("attn_k_norm.weight")?);
            let mut w = |n: &str| -> Result<Weight, LlmError> {
                qmm(get(&format!("{p}.{n}.weight")).map_err(e)?).map_err(e)
            };
            let (q, k, v, o) = (w("attn_q")?, w("attn_k")?, w("attn_v")?, w("attn_output")?);
            let (gate, up, down) = (w("ffn_gate")?, w("ffn_up")?, w("ffn_down")?);
            let mut n = |name: &str| -> Result<Tensor, LlmError> {
                deq(get(&format!("{p}.{name}.weight")).map_err(e)?).map_err(e)
            };
            layers.push(Layer {
                attn_norm: n("attn_norm")?,
                ffn_norm: n("ffn_norm")?,
                q,
                k,
                v,
                o,
                q_bias,
                k_bias,
                v_bias,
                q_norm,
                k_norm,
                gate,
                up,
                down,
                kv: None,
            });
        }
        Self::assemble(config, embed, layers, norm, lm_head, device).map_err(e)
    }

    /// Loads HF safetensors (any float dtype, computed in f32) described by `config.json`.
    pub fn from_safetensors(
        config_path: &Path,
        weights: &[std::path::PathBuf],
        device: &Device,
    ) -> Result<Self, LlmError> {
        let text = std::fs::read_to_string(config_path).map_err(|e| gguf_err(config_path, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| gguf_err(config_path, e))?;
        let model_type = json["model_type"]
            .as_str()
            .unwrap_or("(missing model_type)");
        let arch =
            Arch::from_name(model_type).ok_or_else(|| LlmError::UnsupportedArchitecture {
                path: config_path.to_path_buf(),
                arch: model_type.to_string(),
            })?;
        let u = |k: &str| -> Result<usize, LlmError> {
            json[k]
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| gguf_err(config_path, format!("config.json lacks integer {k}")))
        };
        let hidden_size = u("hidden_size")?;
        let num_heads = u("num_attention_heads")?;
        let rope_theta = json["rope_theta"]
            .as_f64()
            .or_else(|| json["rope_parameters"]["rope_theta"].as_f64())
            .unwrap_or(10_000.0);
        let config = QwenConfig {
            arch,
            vocab_size: u("vocab_size")?,
            hidden_size,
            num_layers: u("num_hidden_layers")?,
            num_heads,
            num_kv_heads: u("num_key_value_heads").unwrap_or(num_heads),
            head_dim: u("head_dim").unwrap_or(hidden_size / num_heads.max(1)),
            rope_theta,
            rms_norm_eps: json["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            context_length: u("max_position_embeddings")?,
        };
        let tied = json["tie_word_embeddings"].as_bool().unwrap_or(false);
        let e = |err: candle_core::Error| gguf_err(config_path, err);
        // SAFETY: the files are memory-mapped read-only; we do not write them while mapped.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(weights, DType::F32, device) }
            .map_err(e)?;
        let m = vb.pp("model");
        let embed = m.get_unchecked("embed_tokens.weight").map_err(e)?;
        let lm_head = if tied || !vb.contains_tensor("lm_head.weight") {
            Weight::Candle(QMatMul::Tensor(embed.clone()))
        } else {
            Weight::Candle(QMatMul::Tensor(
                vb.get_unchecked("lm_head.weight").map_err(e)?,
            ))
        };
        let norm = m.get_unchecked("norm.weight").map_err(e)?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let l = m.pp(format!("layers.{i}"));
            let a = l.pp("self_attn");
            let f = l.pp("mlp");
            let w = |vb: &VarBuilder, n: &str| -> Result<Weight, LlmError> {
                Ok(Weight::Candle(QMatMul::Tensor(
                    vb.get_unchecked(&format!("{n}.weight")).map_err(e)?,
                )))
            };
            let opt = |vb: &VarBuilder, n: &str| -> Result<Option<Tensor>, LlmError> {
                if vb.contains_tensor(n) {
                    Ok(Some(vb.get_unchecked(n).map_err(e)?))
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attn_norm: l.get_unchecked("input_layernorm.weight").map_err(e)?,
                ffn_norm: l
                    .get_unchecked("post_attention_layernorm.weight")
                    .map_err(e)?,
                q: w(&a, "q_proj")?,
                k: w(&a, "k_proj")?,
                v: w(&a, "v_proj")?,
                o: w(&a, "o_proj")?,
                q_bias: opt(&a, "q_proj.bias")?,
                k_bias: opt(&a, "k_proj.bias")?,
                v_bias: opt(&a, "v_proj.bias")?,
                q_norm: opt(&a, "q_norm.weight")?,
                k_norm: opt(&a, "k_norm.weight")?,
                gate: w(&f, "gate_proj")?,
                up: w(&f, "up_proj")?,
                down: w(&f, "down_proj")?,
                kv: None,
            });
        }
        Self::assemble(config, embed, layers, norm, lm_head, device).map_err(e)
    }

    fn assemble(
        config: QwenConfig,
        embed: Tensor,
        layers: Vec<Layer>,
        norm: Tensor,
        lm_head: Weight,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let (cos, sin) = rope_tables(&config, device)?;
        Ok(Self {
            config,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            kv_len: 0,
            device: device.clone(),
        })
    }

    /// The device the weights and the KV cache live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Positions currently held in the KV cache.
    pub fn kv_len(&self) -> usize {
        self.kv_len
    }

    /// Forgets cached positions from `len` on; the buffers are kept for reuse.
    pub fn truncate_kv(&mut self, len: usize) {
        self.kv_len = self.kv_len.min(len);
    }

    /// Shrinks the KV buffers to at most `cap` positions (keeping the first ones), releasing
    /// the memory above it.
    pub fn shrink_kv(&mut self, cap: usize) -> candle_core::Result<()> {
        self.kv_len = self.kv_len.min(cap);
        let (kvh, hd) = (self.config.num_kv_heads, self.config.head_dim);
        for layer in &mut self.layers {
            let Some(kv) = &mut layer.kv else { continue };
            if kv.capacity()? <= cap {
                continue;
            }
            if cap == 0 {
                layer.kv = None;
                continue;
            }
            match kv {
                KvBuffer::Host(h) => h.resize(kvh, hd, cap, cap),
                KvBuffer::Device { k, v } => {
                    *k = k.narrow(2, 0, cap)?.contiguous()?;
                    *v = v.narrow(2, 0, cap)?.contiguous()?;
                }
            }
        }
        Ok(())
    }

    /// Bytes held by the KV buffers (capacity, not just the valid part).
    pub fn kv_bytes(&self) -> usize {
        self.layers
            .iter()
            .filter_map(|l| l.kv.as_ref())
            .map(|kv| match kv {
                KvBuffer::Host(h) => (h.k.len() + h.v.len()) * 4,
                KvBuffer::Device { k, v } => (k.elem_count() + v.elem_count()) * 4,
            })
            .sum()
    }

    /// KV bytes needed per cached position.
    pub fn kv_bytes_per_token(&self) -> usize {
        let c = &self.config;
        c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4
    }

    /// Runs `tokens` at positions `kv_len..kv_len + n`, appending them to the KV cache.
    /// Returns logits `(n, vocab)` for every position if `all_logits`, else `(1, vocab)` for
    /// the last one.
    pub fn forward(&mut self, tokens: &[u32], all_logits: bool) -> candle_core::Result<Tensor> {
        let n = tokens.len();
        let pos = self.kv_len;
        if n == 0 {
            candle_core::bail!("forward needs at least one token");
        }
        if pos + n > self.config.context_length {
            candle_core::bail!(
                "{} positions exceed the context window of {}",
                pos + n,
                self.config.context_length
            );
        }
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self
            .embed
            .index_select(&ids, 0)?
            .to_dtype(DType::F32)?
            .unsqueeze(0)?;
        let eps = self.config.rms_norm_eps as f32;
        if self.device.is_cpu() {
            for layer in &mut self.layers {
                let h = kernels::rms_norm(&x, &layer.attn_norm, eps)?;
                let attn = layer.attention_host(&h, &self.config, pos, &self.cos, &self.sin)?;
                x = (x + attn)?;
                let h = kernels::rms_norm(&x, &layer.ffn_norm, eps)?;
                let gu = project(&[&layer.gate, &layer.up], &h)?;
                x = (x + layer.down.forward(&kernels::silu_mul(&gu[0], &gu[1])?)?)?;
            }
            return self.finish(x, n, all_logits);
        }
        let cos = self.cos.narrow(0, pos, n)?;
        let sin = self.sin.narrow(0, pos, n)?;
        let mask = if n > 1 {
            Some(self.mask(n, pos)?)
        } else {
            None
        };
        let cfg = self.config.clone();
        for layer in &mut self.layers {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let attn = layer.attention(&h, &cfg, pos, &cos, &sin, mask.as_ref())?;
            x = (x + attn)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
            let g = candle_nn::ops::silu(&layer.gate.forward(&h)?)?;
            let u = layer.up.forward(&h)?;
            x = (x + layer.down.forward(&(g * u)?)?)?;
        }
        self.finish(x, n, all_logits)
    }

    /// Final norm and logits after the layers have run `n` new positions.
    fn finish(&mut self, x: Tensor, n: usize, all_logits: bool) -> candle_core::Result<Tensor> {
        self.kv_len += n;
        let eps = self.config.rms_norm_eps as f32;
        let x = if all_logits {
            x
        } else {
            x.narrow(1, n - 1, 1)?
        };
        let x = if self.device.is_cpu() {
            kernels::rms_norm(&x.contiguous()?, &self.norm, eps)?
        } else {
            candle_nn::ops::rms_norm(&x, &self.norm, eps)?
        };
        self.lm_head.forward(&x)?.squeeze(0)
    }

    /// Additive causal mask for `n` queries at `pos..pos+n` over `pos+n` keys, repeated for
    /// each query head of a KV group (queries are laid out group-major, see `attention`).
    fn mask(&self, n: usize, pos: usize) -> candle_core::Result<Tensor> {
        let groups = self.config.num_heads / self.config.num_kv_heads;
        let total = pos + n;
        let mut m = Vec::with_capacity(groups * n * total);
        for _ in 0..groups {
            for i in 0..n {
                m.extend((0..total).map(|j| {
                    if j <= pos + i {
                        0f32
                    } else {
                        f32::NEG_INFINITY
                    }
                }));
            }
        }
        Tensor::from_vec(m, (groups * n, total), &self.device)
    }
}

type Guard<'a> = (candle_core::StorageRef<'a>, &'a candle_core::Layout);

/// Locks an optional tensor's storage for reading.
fn guard(t: &Option<Tensor>) -> Option<Guard<'_>> {
    t.as_ref().map(|t| t.storage_and_layout())
}

/// The data of an optional CPU tensor.
fn host_opt<'a>(t: &'a Option<Guard<'_>>) -> candle_core::Result<Option<&'a [f32]>> {
    t.as_ref().map(|(s, l)| host_f32(s, l)).transpose()
}

impl Layer {
    /// Attention on the CPU through [`kernels::attention`]; `x` is `(1, n, hidden)`.
    fn attention_host(
        &mut self,
        x: &Tensor,
        cfg: &QwenConfig,
        pos: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let n = x.dim(1)?;
        let (h, kvh, hd) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let qkv = project(&[&self.q, &self.k, &self.v], x)?;
        let total = pos + n;
        let kv = match &mut self.kv {
            Some(KvBuffer::Host(kv)) => kv,
            slot => {
                *slot = Some(KvBuffer::Host(HostKv {
                    k: Vec::new(),
                    v: Vec::new(),
                    cap: 0,
                }));
                match slot {
                    Some(KvBuffer::Host(kv)) => kv,
                    _ => candle_core::bail!("KV buffer missing after allocation"),
                }
            }
        };
        if total > kv.cap {
            kv.resize(kvh, hd, total.max(kv.cap * 2).max(64), pos);
        }
        let (qb, kb, vb) = (
            guard(&self.q_bias),
            guard(&self.k_bias),
            guard(&self.v_bias),
        );
        let (qn, kn) = (guard(&self.q_norm), guard(&self.k_norm));
        let (cg, cl) = cos.storage_and_layout();
        let (sg, sl) = sin.storage_and_layout();
        let params = AttnParams {
            heads: h,
            kv_heads: kvh,
            head_dim: hd,
            eps: cfg.rms_norm_eps as f32,
            q_bias: host_opt(&qb)?,
            k_bias: host_opt(&kb)?,
            v_bias: host_opt(&vb)?,
            q_norm: host_opt(&qn)?,
            k_norm: host_opt(&kn)?,
            cos: host_f32(&cg, cl)?,
            sin: host_f32(&sg, sl)?,
        };
        let (qg, ql) = qkv[0].storage_and_layout();
        let (kg, kl) = qkv[1].storage_and_layout();
        let (vg, vl) = qkv[2].storage_and_layout();
        let y = kernels::attention(
            &params,
            host_f32(&qg, ql)?,
            host_f32(&kg, kl)?,
            host_f32(&vg, vl)?,
            kv,
            pos,
            n,
        )?;
        self.o
            .forward(&Tensor::from_vec(y, (1, n, h * hd), x.device())?)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        x: &Tensor,
        cfg: &QwenConfig,
        pos: usize,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let n = x.dim(1)?;
        let (h, kvh, hd) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let proj = |w: &Weight, b: &Option<Tensor>| -> candle_core::Result<Tensor> {
            let y = w.forward(x)?;
            match b {
                Some(b) => y.broadcast_add(b),
                None => Ok(y),
            }
        };
        let q = proj(&self.q, &self.q_bias)?.reshape((1, n, h, hd))?;
        let k = proj(&self.k, &self.k_bias)?.reshape((1, n, kvh, hd))?;
        let v = proj(&self.v, &self.v_bias)?.reshape((1, n, kvh, hd))?;
        let eps = cfg.rms_norm_eps as f32;
        let q = match &self.q_norm {
            Some(w) => candle_nn::ops::rms_norm(&q, w, eps)?,
            None => q,
        };
        let k = match &self.k_norm {
            Some(w) => candle_nn::ops::rms_norm(&k, w, eps)?,
            None => k,
        };
        let q = candle_nn::rotary_emb::rope(&q.transpose(1, 2)?.contiguous()?, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k.transpose(1, 2)?.contiguous()?, cos, sin)?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let total = pos + n;
        self.append_kv(&k, &v, pos, total)?;
        let Some(KvBuffer::Device { k: kbuf, v: vbuf }) = &self.kv else {
            candle_core::bail!("KV buffer missing after append")
        };
        let keys = kbuf.narrow(2, 0, total)?;
        let values = vbuf.narrow(2, 0, total)?;
        // Grouped-query attention without copying K/V: the `groups` query heads sharing a KV
        // head become `groups * n` query rows of that head.
        let groups = h / kvh;
        let q = (q * (1.0 / (hd as f64).sqrt()))?.reshape((1, kvh, groups * n, hd))?;
        let att = q.matmul(&keys.t()?)?;
        let att = match mask {
            Some(m) => att.broadcast_add(m)?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&values)?; // (1, kvh, groups * n, hd)
        let y = y
            .reshape((1, h, n, hd))?
            .transpose(1, 2)?
            .reshape((1, n, h * hd))?;
        self.o.forward(&y)
    }

    /// Writes `k`, `v` (`(1, kvh, n, hd)`) at `pos`, growing the buffers geometrically.
    fn append_kv(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        pos: usize,
        total: usize,
    ) -> candle_core::Result<()> {
        let old = match &self.kv {
            Some(KvBuffer::Device { k, v }) => Some((k, v)),
            _ => None,
        };
        let cap = old.map(|(k, _)| k.dim(2)).transpose()?.unwrap_or(0);
        if total > cap {
            let new_cap = total.max(cap * 2).max(64);
            let (_, kvh, _, hd) = k.dims4()?;
            let nk = Tensor::zeros((1, kvh, new_cap, hd), DType::F32, k.device())?;
            let nv = Tensor::zeros((1, kvh, new_cap, hd), DType::F32, k.device())?;
            if let Some((ok, ov)) = old {
                if pos > 0 {
                    nk.slice_set(&ok.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                    nv.slice_set(&ov.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                }
            }
            self.kv = Some(KvBuffer::Device { k: nk, v: nv });
        }
        if let Some(KvBuffer::Device { k: kb, v: vb }) = &self.kv {
            kb.slice_set(k, 2, pos)?;
            vb.slice_set(v, 2, pos)?;
        }
        Ok(())
    }
}

/// Reads the last dimension's argmax; used by tests and greedy decoding.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}
