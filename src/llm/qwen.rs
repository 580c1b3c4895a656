//! Qwen2 / Qwen2.5 / Qwen3 decoder (dense), from GGUF or from safetensors + `config.json`.
//!
//! Our own implementation rather than candle-transformers' because the prefix cache needs to
//! truncate and extend each layer's KV state, which those models keep private. Qwen3 differs
//! from Qwen2 by per-head RMS norms on q and k, no qkv bias, and an explicit `head_dim`.

use std::io::{Read, Seek};
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

pub use super::kernels::EXACT_ROWS;
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

/// The shape of a model. A loaded model's config has passed [`QwenConfig::validate`], and
/// its tensors have the shapes the config implies.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QwenConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Width of the feed-forward (SwiGLU) layer.
    pub intermediate_size: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub context_length: usize,
}

impl QwenConfig {
    /// Checks the fields the kernels rely on: no zero sizes, query heads in whole groups per
    /// key/value head, an even head dimension (the rotary embedding rotates its halves), a
    /// positive finite rope theta and a finite non-negative norm epsilon.
    pub fn validate(&self) -> Result<(), String> {
        let zero = [
            (self.vocab_size, "vocabulary size is 0"),
            (self.hidden_size, "hidden size is 0"),
            (self.num_layers, "0 layers"),
            (self.num_heads, "0 attention heads"),
            (self.num_kv_heads, "0 key/value heads"),
            (self.intermediate_size, "intermediate size is 0"),
            (self.context_length, "context length is 0"),
        ];
        if let Some((_, why)) = zero.iter().find(|(n, _)| *n == 0) {
            return Err(why.to_string());
        }
        let (h, kvh, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        if !h.is_multiple_of(kvh) {
            return Err(format!(
                "{h} attention heads are not a multiple of {kvh} key/value heads"
            ));
        }
        if hd == 0 || !hd.is_multiple_of(2) {
            return Err(format!(
                "head dimension {hd} is not a positive even number (the rotary embedding \
                 rotates its two halves)"
            ));
        }
        if h.checked_mul(hd).is_none() {
            return Err(format!("{h} heads of {hd} overflow"));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!(
                "rope theta {} is not a positive finite number",
                self.rope_theta
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err(format!(
                "RMS norm epsilon {} is not a finite non-negative number",
                self.rms_norm_eps
            ));
        }
        Ok(())
    }
}

/// The head dimension of a config that does not give one: `hidden / heads`, which must divide.
fn derived_head_dim(hidden: usize, heads: usize) -> Result<usize, String> {
    if heads == 0 {
        return Err("0 attention heads".into());
    }
    if !hidden.is_multiple_of(heads) {
        return Err(format!(
            "hidden size {hidden} is not a multiple of {heads} attention heads (and no head \
             dimension is given)"
        ));
    }
    Ok(hidden / heads)
}

fn invalid_config(path: &Path, reason: String) -> LlmError {
    LlmError::Load {
        path: path.to_path_buf(),
        reason: format!("invalid model configuration: {reason}"),
    }
}

/// Checks that tensor `name` has the shape the config implies.
fn check_shape(path: &Path, name: &str, got: &[usize], want: &[usize]) -> Result<(), LlmError> {
    if got == want {
        return Ok(());
    }
    Err(LlmError::Load {
        path: path.to_path_buf(),
        reason: format!("tensor {name} has shape {got:?}, the configuration implies {want:?}"),
    })
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
            KvBuffer::Host(kv) => Ok(kv.cap()),
            KvBuffer::Device { k, .. } => k.dim(2),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            KvBuffer::Host(h) => h.bytes(),
            KvBuffer::Device { k, v } => (k.elem_count() + v.elem_count()) * 4,
        }
    }
}

/// One sequence's keys and values in every layer, valid for its first `len` positions. The
/// model holds one for [`QwenModel::forward`]; a batch of sequences each brings its own to
/// [`QwenModel::forward_batch`].
#[derive(Default)]
pub struct KvCache {
    layers: Vec<Option<KvBuffer>>,
    len: usize,
}

impl KvCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets positions from `len` on; the buffers are kept for reuse.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Bytes held by the buffers (capacity, not just the valid part).
    pub fn bytes(&self) -> usize {
        self.layers.iter().flatten().map(KvBuffer::bytes).sum()
    }

    /// Shrinks the buffers to at most `cap` positions (keeping the first ones), releasing the
    /// memory above it.
    pub fn shrink(&mut self, cap: usize) -> candle_core::Result<()> {
        self.len = self.len.min(cap);
        for slot in &mut self.layers {
            let Some(kv) = slot else { continue };
            if kv.capacity()? <= cap {
                continue;
            }
            if cap == 0 {
                *slot = None;
                continue;
            }
            match kv {
                KvBuffer::Host(h) => h.resize(cap, cap)?,
                KvBuffer::Device { k, v } => {
                    *k = k.narrow(2, 0, cap)?.contiguous()?;
                    *v = v.narrow(2, 0, cap)?.contiguous()?;
                }
            }
        }
        Ok(())
    }

    /// Sets the buffers' capacity to `cap` positions (at least those held), so that a sequence
    /// that will hold at most `cap` never grows. Only host buffers; device ones grow as before.
    pub fn fit(&mut self, cap: usize) -> candle_core::Result<()> {
        let cap = cap.max(self.len);
        for slot in self.layers.iter_mut().flatten() {
            if let KvBuffer::Host(h) = slot {
                if h.cap() != cap {
                    h.resize(cap, self.len)?;
                }
            }
        }
        Ok(())
    }

    /// A new cache holding a copy of the first `len` positions (a prompt prefix another
    /// sequence shares).
    pub fn copy_prefix(&self, len: usize) -> candle_core::Result<KvCache> {
        let len = len.min(self.len);
        let layers = self
            .layers
            .iter()
            .map(|slot| {
                Ok(match slot {
                    _ if len == 0 => None,
                    None => None,
                    Some(KvBuffer::Host(h)) => Some(KvBuffer::Host(h.copy_prefix(len)?)),
                    Some(KvBuffer::Device { k, v }) => Some(KvBuffer::Device {
                        k: k.narrow(2, 0, len)?.copy()?,
                        v: v.narrow(2, 0, len)?.copy()?,
                    }),
                })
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(KvCache { layers, len })
    }

    /// Layer `i`'s buffer slot, the slots made on first use.
    fn layer(&mut self, i: usize, layers: usize) -> &mut Option<KvBuffer> {
        if self.layers.len() < layers {
            self.layers.resize_with(layers, || None);
        }
        &mut self.layers[i]
    }
}

/// One decoder layer's weights (read by the CUDA decode step too).
pub(super) struct Layer {
    pub(super) attn_norm: Tensor,
    pub(super) q: Weight,
    pub(super) k: Weight,
    pub(super) v: Weight,
    pub(super) o: Weight,
    pub(super) q_bias: Option<Tensor>,
    pub(super) k_bias: Option<Tensor>,
    pub(super) v_bias: Option<Tensor>,
    pub(super) q_norm: Option<Tensor>,
    pub(super) k_norm: Option<Tensor>,
    pub(super) ffn_norm: Tensor,
    pub(super) gate: Weight,
    pub(super) up: Weight,
    pub(super) down: Weight,
}

pub struct QwenModel {
    /// Private: the layers' shapes, the rotary tables and the KV buffers were made for it.
    config: QwenConfig,
    /// Embedding table (f32 for safetensors, f16 for GGUF to halve its memory).
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Weight,
    cos: Tensor,
    sin: Tensor,
    /// The keys and values of [`QwenModel::forward`]'s sequence.
    kv: KvCache,
    device: Device,
    /// Decode steps through our CUDA kernels and a captured graph, where the weights allow.
    #[cfg(feature = "cuda")]
    cuda: Option<super::cuda_decode::CudaDecoder>,
    /// Attention of several positions at once through our CUDA kernel, where the head size
    /// allows.
    prefill: Option<PrefillAttention>,
    /// Attention of a decode step of several sequences through our CUDA kernels.
    #[cfg(feature = "cuda")]
    batch: Option<super::cuda_batch::BatchAttention>,
    /// Whether steps on a GPU take `cuda`, `prefill` and `batch` (else candle's ops).
    device_kernels: bool,
}

#[cfg(feature = "cuda")]
use super::cuda_prefill::PrefillAttention;

/// Without CUDA there is no prompt attention kernel: a type with no values.
#[cfg(not(feature = "cuda"))]
enum PrefillAttention {}

#[cfg(not(feature = "cuda"))]
impl PrefillAttention {
    fn attend(&self, _: &Tensor, _: &Tensor, _: &Tensor, _: usize) -> candle_core::Result<Tensor> {
        match *self {}
    }
}

/// Sequences a decode pass takes on a GPU with our batch kernels: enough to make one read of
/// the weights serve many answers.
pub const GPU_BATCH_ROWS: usize = 64;

/// Positions the rotary tables are first made for; they grow as the KV cache does.
const ROPE_INITIAL: usize = 256;

/// cos and sin of the rotary angles of positions `0..n`, `(n, head_dim / 2)` each. Made for the
/// positions in use, not the whole context window: a configuration may declare a window far
/// larger than memory.
fn rope_tables(
    cfg: &QwenConfig,
    n: usize,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let half = cfg.head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / cfg.rope_theta.powf(2.0 * i as f64 / cfg.head_dim as f64) as f32)
        .collect();
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
        let dims = |name: &str| {
            content
                .tensor_infos
                .get(name)
                .map(|t| t.shape.dims().to_vec())
        };
        let hidden_size = md_u("embedding_length")?;
        let num_heads = md_u("attention.head_count")?;
        let head_dim = match md_u("attention.key_length") {
            Ok(d) => d,
            Err(_) => {
                derived_head_dim(hidden_size, num_heads).map_err(|r| invalid_config(path, r))?
            }
        };
        let embd = dims("token_embd.weight")
            .ok_or_else(|| gguf_err(path, "GGUF lacks token_embd.weight"))?;
        // The feed-forward width, where the metadata lacks it, from the first layer's gate.
        let intermediate_size = md_u("feed_forward_length").unwrap_or_else(|_| {
            dims("blk.0.ffn_gate.weight")
                .and_then(|d| d.first().copied())
                .unwrap_or(0)
        });
        let config = QwenConfig {
            arch,
            // GGUF dims are listed innermost first; candle reverses them to (vocab, hidden).
            vocab_size: embd.first().copied().unwrap_or(0),
            hidden_size,
            num_layers: md_u("block_count")?,
            num_heads,
            num_kv_heads: md_u("attention.head_count_kv")?,
            head_dim,
            intermediate_size,
            rope_theta: md_f("rope.freq_base", 10_000.0),
            rms_norm_eps: md_f("attention.layer_norm_rms_epsilon", 1e-6),
            context_length: md_u("context_length")?,
        };
        config.validate().map_err(|r| invalid_config(path, r))?;
        let (vocab, hidden, inter) = (config.vocab_size, hidden_size, intermediate_size);
        let (q_dim, kv_dim) = (num_heads * head_dim, config.num_kv_heads * head_dim);

        let e = |err: candle_core::Error| gguf_err(path, err);
        // Every tensor's shape is checked against the config before its data is read.
        let mut get = |name: &str, want: &[usize]| -> Result<QTensor, LlmError> {
            if let Some(info) = content.tensor_infos.get(name) {
                check_shape(path, name, info.shape.dims(), want)?;
            }
            content.tensor(reader, name, device).map_err(e)
        };
        let has = |name: &str| content.tensor_infos.contains_key(name);
        let deq = |t: QTensor| t.dequantize(device);
        let qmm = Weight::from_qtensor;

        // candle's CUDA `dequantize_f16` has kernels for the block-quantized types only: a
        // float table (an F32/F16/BF16 GGUF) is read through `dequantize` (the same on the CPU).
        let embed = get("token_embd.weight", &[vocab, hidden])?;
        let embed = match embed.dtype() {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => embed
                .dequantize(device)
                .and_then(|t| t.to_dtype(DType::F16)),
            _ => embed.dequantize_f16(device),
        }
        .map_err(e)?;
        let head = if has("output.weight") {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let lm_head = qmm(get(head, &[vocab, hidden])?).map_err(e)?;
        let norm = deq(get("output_norm.weight", &[hidden])?).map_err(e)?;
        // Not preallocated: the count comes from the file, the tensors may not.
        let mut layers = Vec::new();
        for i in 0..config.num_layers {
            let p = format!("blk.{i}");
            let mut opt = |n: &str, want: &[usize]| -> Result<Option<Tensor>, LlmError> {
                let name = format!("{p}.{n}");
                if has(&name) {
                    Ok(Some(deq(get(&name, want)?).map_err(e)?))
                } else {
                    Ok(None)
                }
            };
            let (q_bias, k_bias, v_bias) = (
                opt("attn_q.bias", &[q_dim])?,
                opt("attn_k.bias", &[kv_dim])?,
                opt("attn_v.bias", &[kv_dim])?,
            );
            let (q_norm, k_norm) = (
                opt("attn_q_norm.weight", &[head_dim])?,
                opt("attn_k_norm.weight", &[head_dim])?,
            );
            let mut w = |n: &str, want: &[usize]| -> Result<Weight, LlmError> {
                qmm(get(&format!("{p}.{n}.weight"), want)?).map_err(e)
            };
            let (q, k, v, o) = (
                w("attn_q", &[q_dim, hidden])?,
                w("attn_k", &[kv_dim, hidden])?,
                w("attn_v", &[kv_dim, hidden])?,
                w("attn_output", &[hidden, q_dim])?,
            );
            let (gate, up, down) = (
                w("ffn_gate", &[inter, hidden])?,
                w("ffn_up", &[inter, hidden])?,
                w("ffn_down", &[hidden, inter])?,
            );
            let mut n = |name: &str| -> Result<Tensor, LlmError> {
                deq(get(&format!("{p}.{name}.weight"), &[hidden])?).map_err(e)
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
        // SAFETY: candle maps the files read-only and the mapping lives as long as the tensors;
        // model files are not modified while loaded (we never write them once fetched).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(weights, DType::F32, device) }
            .map_err(|e| gguf_err(config_path, e))?;
        Self::from_var_builder(config_path, &text, &vb, device)
    }

    /// As [`QwenModel::from_safetensors`], from `config.json`'s text and one safetensors
    /// file's bytes (`config_path` names the model in errors).
    pub fn from_safetensors_bytes(
        config_path: &Path,
        config: &str,
        weights: &[u8],
        device: &Device,
    ) -> Result<Self, LlmError> {
        let vb = VarBuilder::from_slice_safetensors(weights, DType::F32, device)
            .map_err(|e| gguf_err(config_path, e))?;
        Self::from_var_builder(config_path, config, &vb, device)
    }

    fn from_var_builder(
        config_path: &Path,
        text: &str,
        vb: &VarBuilder,
        device: &Device,
    ) -> Result<Self, LlmError> {
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| gguf_err(config_path, e))?;
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
        let head_dim = match u("head_dim") {
            Ok(d) => d,
            Err(_) => derived_head_dim(hidden_size, num_heads)
                .map_err(|r| invalid_config(config_path, r))?,
        };
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
            head_dim,
            intermediate_size: u("intermediate_size")?,
            rope_theta,
            rms_norm_eps: json["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            context_length: u("max_position_embeddings")?,
        };
        config
            .validate()
            .map_err(|r| invalid_config(config_path, r))?;
        let (vocab, hidden, inter) = (config.vocab_size, hidden_size, config.intermediate_size);
        let (q_dim, kv_dim) = (num_heads * head_dim, config.num_kv_heads * head_dim);
        let tied = json["tie_word_embeddings"].as_bool().unwrap_or(false);
        let e = |err: candle_core::Error| gguf_err(config_path, err);
        // Every tensor is checked against the config as it is read.
        let get = |name: &str, want: &[usize]| -> Result<Tensor, LlmError> {
            let t = vb.get_unchecked(name).map_err(e)?;
            check_shape(config_path, name, t.dims(), want)?;
            Ok(t)
        };
        let embed = get("model.embed_tokens.weight", &[vocab, hidden])?;
        let lm_head = if tied || !vb.contains_tensor("lm_head.weight") {
            Weight::Candle(QMatMul::Tensor(embed.clone()))
        } else {
            Weight::Candle(QMatMul::Tensor(get("lm_head.weight", &[vocab, hidden])?))
        };
        let norm = get("model.norm.weight", &[hidden])?;
        // Not preallocated: the count comes from config.json, the tensors may not.
        let mut layers = Vec::new();
        for i in 0..config.num_layers {
            let p = format!("model.layers.{i}");
            let w = |n: &str, want: &[usize]| -> Result<Weight, LlmError> {
                Ok(Weight::Candle(QMatMul::Tensor(get(
                    &format!("{p}.{n}.weight"),
                    want,
                )?)))
            };
            let opt = |n: &str, want: &[usize]| -> Result<Option<Tensor>, LlmError> {
                let name = format!("{p}.{n}");
                if vb.contains_tensor(&name) {
                    Ok(Some(get(&name, want)?))
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attn_norm: get(&format!("{p}.input_layernorm.weight"), &[hidden])?,
                ffn_norm: get(&format!("{p}.post_attention_layernorm.weight"), &[hidden])?,
                q: w("self_attn.q_proj", &[q_dim, hidden])?,
                k: w("self_attn.k_proj", &[kv_dim, hidden])?,
                v: w("self_attn.v_proj", &[kv_dim, hidden])?,
                o: w("self_attn.o_proj", &[hidden, q_dim])?,
                q_bias: opt("self_attn.q_proj.bias", &[q_dim])?,
                k_bias: opt("self_attn.k_proj.bias", &[kv_dim])?,
                v_bias: opt("self_attn.v_proj.bias", &[kv_dim])?,
                q_norm: opt("self_attn.q_norm.weight", &[head_dim])?,
                k_norm: opt("self_attn.k_norm.weight", &[head_dim])?,
                gate: w("mlp.gate_proj", &[inter, hidden])?,
                up: w("mlp.up_proj", &[inter, hidden])?,
                down: w("mlp.down_proj", &[hidden, inter])?,
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
        let (cos, sin) = rope_tables(&config, config.context_length.min(ROPE_INITIAL), device)?;
        #[cfg(feature = "cuda")]
        let cuda = cuda_decoder(&config, &embed, &layers, &norm, &lm_head, device)?;
        #[cfg(feature = "cuda")]
        let prefill = PrefillAttention::new(device, config.head_dim)?;
        #[cfg(not(feature = "cuda"))]
        let prefill = None;
        #[cfg(feature = "cuda")]
        let batch = super::cuda_batch::BatchAttention::new(device, config.head_dim)?;
        Ok(Self {
            config,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            kv: KvCache::default(),
            device: device.clone(),
            #[cfg(feature = "cuda")]
            cuda,
            prefill,
            #[cfg(feature = "cuda")]
            batch,
            device_kernels: true,
        })
    }

    /// Whether one-token decode steps run through our CUDA kernels: the model is on a GPU and
    /// its matrices are all Q4_K / Q6_K (else candle's ops run them).
    pub fn has_device_kernels(&self) -> bool {
        #[cfg(feature = "cuda")]
        return self.cuda.is_some();
        #[cfg(not(feature = "cuda"))]
        false
    }

    /// Turns our CUDA kernels off (candle's ops then run every decode step, every prompt's
    /// attention and batches one sequence after another, as before) or back on; with `graphs`
    /// off the decode kernels are launched one by one instead of replayed from a captured
    /// graph. For comparisons; both default to on.
    pub fn set_device_kernels(&mut self, on: bool, graphs: bool) {
        self.device_kernels = on;
        #[cfg(feature = "cuda")]
        if let Some(d) = &mut self.cuda {
            d.use_graph = graphs;
        }
        #[cfg(not(feature = "cuda"))]
        let _ = graphs;
    }

    /// The model's shape (validated at load).
    pub fn config(&self) -> &QwenConfig {
        &self.config
    }

    /// The device the weights and the KV cache live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Positions currently held in the KV cache.
    pub fn kv_len(&self) -> usize {
        self.kv.len()
    }

    /// Whether `forward` of up to [`EXACT_ROWS`] tokens gives each position the logits that
    /// feeding them one by one gives, bit for bit (our CPU kernels: a drafted continuation is
    /// verified in one pass and greedy output stays the same). The same holds for the rows of
    /// [`QwenModel::forward_batch`].
    pub fn rows_exact(&self) -> bool {
        self.device.is_cpu()
            && self.lm_head.rows_exact()
            && self.layers.iter().all(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .all(|w| w.rows_exact())
            })
    }

    /// Forgets cached positions from `len` on; the buffers are kept for reuse.
    pub fn truncate_kv(&mut self, len: usize) {
        self.kv.truncate(len);
    }

    /// Shrinks the KV buffers to at most `cap` positions (keeping the first ones), releasing
    /// the memory above it.
    pub fn shrink_kv(&mut self, cap: usize) -> candle_core::Result<()> {
        self.kv.shrink(cap)
    }

    /// Bytes held by the KV buffers (capacity, not just the valid part).
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// A copy of the model's own sequence's first `len` positions.
    pub fn copy_kv_prefix(&self, len: usize) -> candle_core::Result<KvCache> {
        self.kv.copy_prefix(len)
    }

    /// Exchanges the model's own sequence (what [`QwenModel::forward`] extends) with `other`.
    pub fn swap_kv(&mut self, other: &mut KvCache) {
        std::mem::swap(&mut self.kv, other);
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
        let mut kv = std::mem::take(&mut self.kv);
        let want = if all_logits {
            Logits::All
        } else {
            Logits::Last
        };
        let result = self.run(&mut [&mut kv], tokens, &[tokens.len()], want);
        self.kv = kv;
        logits_of(result)
    }

    /// Several sequences in one pass, each extended by its own run of tokens: `tokens` holds
    /// `spans[i]` tokens for `caches[i]`, one sequence after another (a prompt's next chunk
    /// beside other answers' next tokens). Returns the logits `(rows.len(), vocab)` of the
    /// rows `rows` (indices into `tokens`, ascending), or `None` when `rows` is empty (the
    /// output head is skipped). CPU only. On our kernels ([`QwenModel::rows_exact`]) each row
    /// is bit for bit what the sequence alone gives it, however its tokens are split.
    pub fn forward_spans(
        &mut self,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
        spans: &[usize],
        rows: &[usize],
    ) -> candle_core::Result<Option<Tensor>> {
        if !self.device.is_cpu() {
            candle_core::bail!("sequences of several tokens share a pass on the CPU only");
        }
        if caches.len() != spans.len() || spans.iter().sum::<usize>() != tokens.len() {
            candle_core::bail!(
                "{} sequences of {spans:?} tokens for {} tokens in a pass",
                caches.len(),
                tokens.len()
            );
        }
        if spans.contains(&0) || rows.iter().any(|&r| r >= tokens.len()) {
            candle_core::bail!(
                "an empty sequence, or a row past the {} tokens",
                tokens.len()
            );
        }
        self.run(caches, tokens, spans, Logits::Rows(rows))
    }

    /// One decode step of several sequences: `tokens[i]` extends `caches[i]`. The sequences
    /// share each weight pass; each attends only to its own cache. Returns `(n, vocab)`, row
    /// `i` for sequence `i`. On our CPU kernels ([`QwenModel::rows_exact`]) and up to
    /// [`EXACT_ROWS`] sequences, each row is bit for bit what `forward` of that sequence alone
    /// gives. A GPU without our batch kernels (or with them off) runs the sequences one after
    /// another.
    pub fn forward_batch(
        &mut self,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
    ) -> candle_core::Result<Tensor> {
        if caches.len() != tokens.len() {
            candle_core::bail!(
                "{} sequences for {} tokens in a batch step",
                caches.len(),
                tokens.len()
            );
        }
        if self.device.is_cpu() {
            let spans = vec![1; tokens.len()];
            return logits_of(self.run(caches, tokens, &spans, Logits::All));
        }
        #[cfg(feature = "cuda")]
        if caches.len() > 1 && self.device_kernels && self.batch.is_some() {
            return self.run_batch_on_gpu(caches, tokens);
        }
        // Otherwise the sequences run one after another.
        let rows = caches
            .iter_mut()
            .zip(tokens)
            .map(|(kv, &t)| logits_of(self.run(&mut [&mut **kv], &[t], &[1], Logits::Last)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&rows, 0)
    }

    /// Runs the tokens of one or (on the CPU) several sequences through the layers: sequence
    /// i's `spans[i]` consecutive tokens extend `caches[i]`. Returns the logits `want` asks
    /// for (`None` for no rows).
    fn run(
        &mut self,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
        spans: &[usize],
        want: Logits,
    ) -> candle_core::Result<Option<Tensor>> {
        let n = tokens.len();
        if n == 0 {
            candle_core::bail!("forward needs at least one token");
        }
        let mut end = 0;
        for (kv, &rows) in caches.iter().zip(spans) {
            if kv.len() + rows > self.config.context_length {
                candle_core::bail!(
                    "{} positions exceed the context window of {}",
                    kv.len() + rows,
                    self.config.context_length
                );
            }
            end = end.max(kv.len() + rows);
        }
        self.grow_rope(end)?;
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed_rows(&ids)?;
        let eps = self.config.rms_norm_eps as f32;
        let layers = self.layers.len();
        if self.device.is_cpu() {
            let positions: Vec<usize> = caches.iter().map(|kv| kv.len()).collect();
            for (li, layer) in self.layers.iter().enumerate() {
                let h = kernels::rms_norm(&x, &layer.attn_norm, eps)?;
                let mut slots: Vec<&mut Option<KvBuffer>> =
                    caches.iter_mut().map(|kv| kv.layer(li, layers)).collect();
                let attn = layer.attention_host(
                    &h,
                    &self.config,
                    &mut slots,
                    &positions,
                    spans,
                    &self.cos,
                    &self.sin,
                )?;
                x = (x + attn)?;
                let h = kernels::rms_norm(&x, &layer.ffn_norm, eps)?;
                let gu = project(&[&layer.gate, &layer.up], &h)?;
                x = (x + layer.down.forward(&kernels::silu_mul(&gu[0], &gu[1])?)?)?;
            }
        } else {
            let [kv] = caches else {
                candle_core::bail!("a batch of sequences runs on the CPU only");
            };
            #[cfg(feature = "cuda")]
            if n == 1 && self.device_kernels {
                if let Some(dec) = &mut self.cuda {
                    let (kvh, hd) = (self.config.num_kv_heads, self.config.head_dim);
                    let pos = kv.len();
                    let mut ptrs = Vec::with_capacity(layers);
                    let mut capacity = usize::MAX;
                    for li in 0..layers {
                        let (k, v) = reserve_device_kv(
                            kv.layer(li, layers),
                            &self.device,
                            kvh,
                            hd,
                            pos,
                            pos + 1,
                        )?;
                        capacity = capacity.min(k.dim(2)?);
                        ptrs.push(super::cuda_decode::kv_ptrs(k, v)?);
                    }
                    let logits = dec.step(tokens[0], pos, &ptrs, capacity)?;
                    kv.len += 1;
                    return Ok(Some(logits));
                }
            }
            let pos = kv.len();
            let cos = self.cos.narrow(0, pos, n)?;
            let sin = self.sin.narrow(0, pos, n)?;
            let fused = self.prefill.as_ref().filter(|_| self.device_kernels);
            let mask = if n > 1 && fused.is_none() {
                Some(self.mask(n, pos)?)
            } else {
                None
            };
            for (li, layer) in self.layers.iter().enumerate() {
                let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
                let slot = kv.layer(li, layers);
                let attn = layer.attention(
                    &h,
                    &self.config,
                    slot,
                    pos,
                    &cos,
                    &sin,
                    mask.as_ref(),
                    fused,
                )?;
                x = layer.ffn(&(x + attn)?, eps)?;
            }
        }
        for (kv, &rows) in caches.iter_mut().zip(spans) {
            kv.len += rows;
        }
        let x = match want {
            Logits::All => x,
            Logits::Last => x.narrow(1, n - 1, 1)?,
            Logits::Rows([]) => return Ok(None),
            Logits::Rows(rows) if rows.len() == n => x,
            Logits::Rows(rows) => {
                let at: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
                x.index_select(&Tensor::new(at, x.device())?, 1)?
            }
        };
        self.finish(x).map(Some)
    }

    /// Sequences one [`QwenModel::forward_batch`] pass should take: on the CPU up to
    /// [`EXACT_ROWS`] (where each row is what the sequence alone gives), on a GPU with our
    /// batch kernels [`GPU_BATCH_ROWS`].
    pub fn batch_rows(&self) -> usize {
        #[cfg(feature = "cuda")]
        if self.device_kernels && self.batch.is_some() {
            return GPU_BATCH_ROWS;
        }
        EXACT_ROWS
    }

    /// One decode step of several sequences on a GPU: the rows of all sequences share each
    /// product with the weights; attention and the KV appends go through our batch kernels,
    /// each sequence over its own cache.
    #[cfg(feature = "cuda")]
    fn run_batch_on_gpu(
        &mut self,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
    ) -> candle_core::Result<Tensor> {
        let n = tokens.len();
        let (layers, kvh, hd) = (
            self.layers.len(),
            self.config.num_kv_heads,
            self.config.head_dim,
        );
        let positions: Vec<usize> = caches.iter().map(|kv| kv.len()).collect();
        let end = positions.iter().max().map_or(0, |p| p + 1);
        if end > self.config.context_length {
            candle_core::bail!(
                "{end} positions exceed the context window of {}",
                self.config.context_length
            );
        }
        self.grow_rope(end)?;
        let mut table = vec![Vec::with_capacity(n); layers];
        let mut caps = vec![0; n];
        for (s, kv) in caches.iter_mut().enumerate() {
            for (li, row) in table.iter_mut().enumerate() {
                let (pos, slot) = (positions[s], kv.layer(li, layers));
                let (k, v) = reserve_device_kv(slot, &self.device, kvh, hd, pos, pos + 1)?;
                let cap = k.dim(2)?;
                if li > 0 && cap != caps[s] {
                    candle_core::bail!("a sequence's KV buffers differ in capacity by layer");
                }
                caps[s] = cap;
                row.push(super::cuda_decode::kv_ptrs(k, v)?);
            }
        }
        let no_batch = || candle_core::Error::Msg("no batch kernels".into());
        let batch = self.batch.as_mut().ok_or_else(no_batch)?;
        batch.prepare(&table, &positions, &caps)?;
        let batch = self.batch.as_ref().ok_or_else(no_batch)?;
        let ids = Tensor::new(tokens, &self.device)?;
        let at = Tensor::new(
            positions.iter().map(|&p| p as u32).collect::<Vec<_>>(),
            &self.device,
        )?;
        let (cos, sin) = (
            self.cos.index_select(&at, 0)?,
            self.sin.index_select(&at, 0)?,
        );
        let mut x = self.embed_rows(&ids)?;
        let eps = self.config.rms_norm_eps as f32;
        for (li, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let (q, k, v) = layer.qkv(&h, &self.config, &cos, &sin)?;
            let y = layer.o.forward(&batch.attend(li, &q, &k, &v)?)?;
            x = layer.ffn(&(x + y)?, eps)?;
        }
        for kv in caches.iter_mut() {
            kv.len += 1;
        }
        self.finish(x)
    }

    /// The embeddings of token ids `ids` as `(1, n, hidden)` f32 rows.
    fn embed_rows(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        self.embed
            .index_select(ids, 0)?
            .to_dtype(DType::F32)?
            .unsqueeze(0)
    }

    /// Makes the rotary tables cover positions `0..total` (doubling, up to the context window).
    fn grow_rope(&mut self, total: usize) -> candle_core::Result<()> {
        let have = self.cos.dim(0)?;
        if total <= have {
            return Ok(());
        }
        let n = total.max(have * 2).min(self.config.context_length);
        (self.cos, self.sin) = rope_tables(&self.config, n, &self.device)?;
        Ok(())
    }

    /// The logits `(rows, vocab)` of the final hidden rows `x` (`(1, rows, hidden)`).
    fn finish(&self, x: Tensor) -> candle_core::Result<Tensor> {
        let eps = self.config.rms_norm_eps as f32;
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

/// Our CUDA decode step over the model's weights, where the device and weights allow it.
#[cfg(feature = "cuda")]
fn cuda_decoder(
    config: &QwenConfig,
    embed: &Tensor,
    layers: &[Layer],
    norm: &Tensor,
    lm_head: &Weight,
    device: &Device,
) -> candle_core::Result<Option<super::cuda_decode::CudaDecoder>> {
    let shape = super::cuda_decode::Shape {
        hidden: config.hidden_size,
        heads: config.num_heads,
        kv_heads: config.num_kv_heads,
        head_dim: config.head_dim,
        ffn: config.intermediate_size,
        vocab: config.vocab_size,
        eps: config.rms_norm_eps as f32,
    };
    super::cuda_decode::CudaDecoder::new(
        device,
        shape,
        config.rope_theta,
        embed,
        layers,
        norm,
        lm_head,
    )
}

type Guard<'a> = (candle_core::StorageRef<'a>, &'a candle_core::Layout);

/// Locks an optional tensor's storage for reading.
/// Which rows of a pass get logits.
enum Logits<'a> {
    All,
    Last,
    /// These rows (ascending indices into the pass's tokens); none skips the output head.
    Rows(&'a [usize]),
}

/// The logits of a pass that asked for at least one row.
fn logits_of(run: candle_core::Result<Option<Tensor>>) -> candle_core::Result<Tensor> {
    run?.ok_or_else(|| candle_core::Error::Msg("a pass asked for no logits".into()))
}

fn guard(t: &Option<Tensor>) -> Option<Guard<'_>> {
    t.as_ref().map(|t| t.storage_and_layout())
}

/// The data of an optional CPU tensor.
fn host_opt<'a>(t: &'a Option<Guard<'_>>) -> candle_core::Result<Option<&'a [f32]>> {
    t.as_ref().map(|(s, l)| host_f32(s, l)).transpose()
}

impl Layer {
    /// Attention on the CPU through [`kernels::attention`]; `x` is `(1, n, hidden)`, its rows
    /// split into sequences: `spans[i]` rows at positions from `positions[i]`, attending to
    /// the cache `slots[i]`. The projections run on all rows at once.
    #[allow(clippy::too_many_arguments)]
    fn attention_host(
        &self,
        x: &Tensor,
        cfg: &QwenConfig,
        slots: &mut [&mut Option<KvBuffer>],
        positions: &[usize],
        spans: &[usize],
        cos: &Tensor,
        sin: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let n = x.dim(1)?;
        let (h, kvh, hd) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let qkv = project(&[&self.q, &self.k, &self.v], x)?;
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
        let (q, k, v) = (host_f32(&qg, ql)?, host_f32(&kg, kl)?, host_f32(&vg, vl)?);
        let mut y = Vec::with_capacity(n * h * hd);
        let mut row = 0;
        for ((slot, &pos), &rows) in slots.iter_mut().zip(positions).zip(spans) {
            let kv = host_kv(slot, kvh, hd)?;
            let total = pos + rows;
            if total > kv.cap() {
                kv.resize(total.max(kv.cap() * 2).max(64), pos)?;
            }
            let (qs, ks) = (row * h * hd, row * kvh * hd);
            let (qe, ke) = (qs + rows * h * hd, ks + rows * kvh * hd);
            y.extend(kernels::attention(
                &params,
                &q[qs..qe],
                &k[ks..ke],
                &v[ks..ke],
                kv,
                pos,
                rows,
            )?);
            row += rows;
        }
        if row != n {
            candle_core::bail!("{n} rows for sequences of {row}");
        }
        self.o
            .forward(&Tensor::from_vec(y, (1, n, h * hd), x.device())?)
    }

    /// Queries, keys and values of the rows `x` (`(1, n, hidden)`) on a device: each
    /// `(1, heads, n, head_dim)` contiguous, q and k normed (Qwen3) and rotated by the angles
    /// `cos`, `sin` of each row's position (`(n, head_dim / 2)`).
    fn qkv(
        &self,
        x: &Tensor,
        cfg: &QwenConfig,
        cos: &Tensor,
        sin: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
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
        Ok((q, k, v))
    }

    /// The FFN block with its residual, on a device: `x + down(silu(gate(h)) · up(h))` with
    /// `h` the normed `x`.
    fn ffn(&self, x: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
        let h = candle_nn::ops::rms_norm(x, &self.ffn_norm, eps)?;
        let g = candle_nn::ops::silu(&self.gate.forward(&h)?)?;
        let u = self.up.forward(&h)?;
        x + self.down.forward(&(g * u)?)?
    }

    /// Attention of the rows `x` at positions `pos..pos + n` of one sequence on a device,
    /// their keys and values appended to `slot`: through our kernel (`fused`) or candle's ops
    /// with `mask`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        x: &Tensor,
        cfg: &QwenConfig,
        slot: &mut Option<KvBuffer>,
        pos: usize,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        fused: Option<&PrefillAttention>,
    ) -> candle_core::Result<Tensor> {
        let n = x.dim(1)?;
        let (h, kvh, hd) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let (q, k, v) = self.qkv(x, cfg, cos, sin)?;
        let total = pos + n;
        append_kv(slot, &k, &v, pos, total)?;
        let Some(KvBuffer::Device { k: kbuf, v: vbuf }) = &*slot else {
            candle_core::bail!("KV buffer missing after append")
        };
        if let Some(kernel) = fused {
            return self.o.forward(&kernel.attend(&q, kbuf, vbuf, pos)?);
        }
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
}

/// The host buffer in `slot`, made empty on first use.
fn host_kv(slot: &mut Option<KvBuffer>, kvh: usize, hd: usize) -> candle_core::Result<&mut HostKv> {
    if !matches!(slot, Some(KvBuffer::Host(_))) {
        *slot = Some(KvBuffer::Host(HostKv::new(kvh, hd)));
    }
    match slot {
        Some(KvBuffer::Host(kv)) => Ok(kv),
        _ => candle_core::bail!("KV buffer missing after allocation"),
    }
}

/// Makes `slot` hold device buffers of at least `total` positions, keeping the first `pos`
/// (growing geometrically), and returns them.
fn reserve_device_kv<'a>(
    slot: &'a mut Option<KvBuffer>,
    device: &Device,
    kvh: usize,
    hd: usize,
    pos: usize,
    total: usize,
) -> candle_core::Result<(&'a Tensor, &'a Tensor)> {
    let old = match &*slot {
        Some(KvBuffer::Device { k, v }) => Some((k, v)),
        _ => None,
    };
    let cap = old.map(|(k, _)| k.dim(2)).transpose()?.unwrap_or(0);
    if total > cap {
        let new_cap = total.max(cap * 2).max(64);
        let nk = Tensor::zeros((1, kvh, new_cap, hd), DType::F32, device)?;
        let nv = Tensor::zeros((1, kvh, new_cap, hd), DType::F32, device)?;
        if let Some((ok, ov)) = old {
            if pos > 0 {
                nk.slice_set(&ok.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                nv.slice_set(&ov.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
            }
        }
        *slot = Some(KvBuffer::Device { k: nk, v: nv });
    }
    match &*slot {
        Some(KvBuffer::Device { k, v }) => Ok((k, v)),
        _ => candle_core::bail!("KV buffer missing after growth"),
    }
}

/// Writes `k`, `v` (`(1, kvh, n, hd)`) at `pos` of `slot`, growing the buffers geometrically.
fn append_kv(
    slot: &mut Option<KvBuffer>,
    k: &Tensor,
    v: &Tensor,
    pos: usize,
    total: usize,
) -> candle_core::Result<()> {
    let (_, kvh, _, hd) = k.dims4()?;
    let (kb, vb) = reserve_device_kv(slot, k.device(), kvh, hd, pos, total)?;
    kb.slice_set(k, 2, pos)?;
    vb.slice_set(v, 2, pos)?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> QwenConfig {
        QwenConfig {
            arch: Arch::Qwen2,
            vocab_size: 384,
            hidden_size: 64,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 16,
            intermediate_size: 96,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            context_length: 1024,
        }
    }

    #[test]
    fn every_field_the_kernels_use_is_validated() {
        assert_eq!(good().validate(), Ok(()));
        type Edit = fn(&mut QwenConfig);
        let cases: [(Edit, &str); 16] = [
            (|c| c.num_kv_heads = 0, "0 key/value heads"),
            (|c| c.num_heads = 0, "0 attention heads"),
            (
                |c| c.num_kv_heads = 3,
                "4 attention heads are not a multiple of 3",
            ),
            (|c| c.head_dim = 0, "head dimension 0"),
            (|c| c.head_dim = 15, "head dimension 15"),
            (|c| c.vocab_size = 0, "vocabulary size is 0"),
            (|c| c.hidden_size = 0, "hidden size is 0"),
            (|c| c.num_layers = 0, "0 layers"),
            (|c| c.intermediate_size = 0, "intermediate size is 0"),
            (|c| c.context_length = 0, "context length is 0"),
            (|c| c.rope_theta = 0.0, "rope theta 0"),
            (|c| c.rope_theta = f64::INFINITY, "rope theta inf"),
            (|c| c.rope_theta = f64::NAN, "rope theta NaN"),
            (|c| c.rms_norm_eps = -1e-6, "epsilon -0.000001"),
            (|c| c.rms_norm_eps = f64::NAN, "epsilon NaN"),
            (|c| c.head_dim = usize::MAX / 2 + 1, "overflow"),
        ];
        for (edit, want) in cases {
            let mut c = good();
            edit(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(want), "{e} lacks {want:?}");
        }
        // A zero epsilon is valid: only negative or non-finite ones are rejected.
        let mut c = good();
        c.rms_norm_eps = 0.0;
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(derived_head_dim(64, 4), Ok(16));
        assert!(derived_head_dim(64, 0).is_err());
        assert!(derived_head_dim(64, 3)
            .unwrap_err()
            .contains("not a multiple of 3"));
    }
}
