//! A small Qwen2 or Qwen3 GGUF of random Q4_K / Q6_K blocks (the default model's block types),
//! for the tests of our CUDA decode step and of `repohop models synth`.

#![allow(dead_code)]

use candle_core::quantized::{gguf_file, GgmlDType};
use repohop::llm::synth::{write_random, TensorSpec};

pub const HIDDEN: usize = 256;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 64;
// Past 4,224 rows the mat-vecs take four rows a warp: the FFN and the output head do here.
pub const FFN: usize = 4608;
pub const VOCAB: usize = 4608;
pub const LAYERS: usize = 2;

fn spec(name: &str, dims: &[usize], dtype: GgmlDType) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dims: dims.to_vec(),
        dtype,
    }
}

/// A random GGUF of `arch` (qwen2: biases; qwen3: per-head q/k norms), written to a temp file.
pub fn random_model(arch: &str) -> tempfile::NamedTempFile {
    random_model_heads(arch, HEADS, KV_HEADS, HEAD_DIM)
}

/// [`random_model`] with another attention layout.
pub fn random_model_heads(
    arch: &str,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> tempfile::NamedTempFile {
    use gguf_file::Value;
    let (q, kv) = (heads * head_dim, kv_heads * head_dim);
    let mut specs = vec![
        spec("token_embd.weight", &[VOCAB, HIDDEN], GgmlDType::Q4K),
        spec("output_norm.weight", &[HIDDEN], GgmlDType::F32),
        spec("output.weight", &[VOCAB, HIDDEN], GgmlDType::Q6K),
    ];
    for l in 0..LAYERS {
        let b = |s: &str| format!("blk.{l}.{s}");
        specs.extend([
            spec(&b("attn_norm.weight"), &[HIDDEN], GgmlDType::F32),
            spec(&b("attn_q.weight"), &[q, HIDDEN], GgmlDType::Q4K),
            spec(&b("attn_k.weight"), &[kv, HIDDEN], GgmlDType::Q4K),
            // As in the 1.5B model: some layers' V and down projections are Q6_K.
            spec(
                &b("attn_v.weight"),
                &[kv, HIDDEN],
                [GgmlDType::Q6K, GgmlDType::Q4K][l % 2],
            ),
            spec(&b("attn_output.weight"), &[HIDDEN, q], GgmlDType::Q4K),
            spec(&b("ffn_norm.weight"), &[HIDDEN], GgmlDType::F32),
            spec(&b("ffn_gate.weight"), &[FFN, HIDDEN], GgmlDType::Q4K),
            spec(&b("ffn_up.weight"), &[FFN, HIDDEN], GgmlDType::Q4K),
            spec(
                &b("ffn_down.weight"),
                &[HIDDEN, FFN],
                [GgmlDType::Q6K, GgmlDType::Q4K][l % 2],
            ),
        ]);
        if arch == "qwen2" {
            specs.extend([
                spec(&b("attn_q.bias"), &[q], GgmlDType::F32),
                spec(&b("attn_k.bias"), &[kv], GgmlDType::F32),
                spec(&b("attn_v.bias"), &[kv], GgmlDType::F32),
            ]);
        } else {
            specs.extend([
                spec(&b("attn_q_norm.weight"), &[head_dim], GgmlDType::F32),
                spec(&b("attn_k_norm.weight"), &[head_dim], GgmlDType::F32),
            ]);
        }
    }
    let u = |v: usize| Value::U32(v as u32);
    let key = |k: &str| format!("{arch}.{k}");
    let metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (key("block_count"), u(LAYERS)),
        (key("context_length"), u(4096)),
        (key("embedding_length"), u(HIDDEN)),
        (key("feed_forward_length"), u(FFN)),
        (key("attention.head_count"), u(heads)),
        (key("attention.head_count_kv"), u(kv_heads)),
        (key("attention.key_length"), u(head_dim)),
        (key("rope.freq_base"), Value::F32(1e6)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write_random(file.as_file_mut(), &md, &specs, 7).unwrap();
    file
}
