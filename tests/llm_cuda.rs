//! Our CUDA decode step (kernels/decode.cu) against candle's ops (with f32 activations) on the
//! same GPU, on a small Qwen2 and Qwen3 model of random Q4_K / Q6_K blocks (the 1.5B model's block types): logits
//! step by step, across a KV buffer growth, after truncation, graph replay against launching
//! the kernels one by one, and the CPU path. A `cuda` build runs them on GPU 0; without a GPU
//! they say so and pass, unless `REPOHOP_REQUIRE_GPU` is set (then they fail).
#![cfg(feature = "cuda")]

mod test_device;

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::Device;
use repohop::llm::qwen::{argmax, QwenModel};
use repohop::llm::synth::{write_random, TensorSpec};
use test_device::test_device;

const HIDDEN: usize = 256;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
// Past 4,224 rows the mat-vecs take four rows a warp: the FFN and the output head do here.
const FFN: usize = 4608;
const VOCAB: usize = 4608;
const LAYERS: usize = 2;

fn spec(name: &str, dims: &[usize], dtype: GgmlDType) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dims: dims.to_vec(),
        dtype,
    }
}

/// A random GGUF of `arch` (qwen2: biases; qwen3: per-head q/k norms), written to a temp file.
fn random_model(arch: &str) -> tempfile::NamedTempFile {
    use gguf_file::Value;
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
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
                spec(&b("attn_q_norm.weight"), &[HEAD_DIM], GgmlDType::F32),
                spec(&b("attn_k_norm.weight"), &[HEAD_DIM], GgmlDType::F32),
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
        (key("attention.head_count"), u(HEADS)),
        (key("attention.head_count_kv"), u(KV_HEADS)),
        (key("attention.key_length"), u(HEAD_DIM)),
        (key("rope.freq_base"), Value::F32(1e6)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write_random(file.as_file_mut(), &md, &specs, 7).unwrap();
    file
}

fn load(file: &tempfile::NamedTempFile, device: &Device) -> QwenModel {
    let mut f = std::fs::File::open(file.path()).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    QwenModel::from_gguf(file.path(), &content, &mut f, device).unwrap()
}

fn last_row(model: &mut QwenModel, tokens: &[u32]) -> Vec<f32> {
    let t = model.forward(tokens, false).unwrap();
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn max_abs(a: &[f32]) -> f32 {
    a.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Greedy steps from `prompt` with the reference model choosing each token; every model sees
/// the same tokens. Returns each model's logits per step.
fn run_steps(models: &mut [&mut QwenModel], prompt: &[u32], steps: usize) -> Vec<Vec<Vec<f32>>> {
    let mut out = vec![Vec::new(); models.len()];
    let mut rows: Vec<Vec<f32>> = models.iter_mut().map(|m| last_row(m, prompt)).collect();
    for _ in 0..steps {
        let next = argmax(&rows[0]);
        for (i, m) in models.iter_mut().enumerate() {
            out[i].push(std::mem::take(&mut rows[i]));
            rows[i] = last_row(m, &[next]);
        }
    }
    for (i, r) in rows.into_iter().enumerate() {
        out[i].push(r);
    }
    out
}

#[test]
fn our_decode_step_matches_candles_ops_on_the_gpu() {
    let device = test_device();
    if !device.is_cuda() {
        eprintln!("no CUDA GPU: our decode kernels are not checked here");
        return;
    }
    // The reference: candle's ops with f32 activations throughout (its default mat-vec rounds
    // them to 8 bits first, ~1% off; ours keeps f32).
    candle_core::quantized::cuda::set_force_dmmv(true);
    for arch in ["qwen2", "qwen3"] {
        let file = random_model(arch);
        let mut reference = load(&file, &device);
        reference.set_device_kernels(false, false);
        let mut graphed = load(&file, &device);
        assert!(
            graphed.has_device_kernels(),
            "{arch}: Q4_K/Q6_K weights take our kernels"
        );
        let mut eager = load(&file, &device);
        eager.set_device_kernels(true, false);
        let mut cpu = load(&file, &Device::Cpu);
        let prompt: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % VOCAB as u32).collect();
        // 12 prompt positions + 70 steps: past the first KV capacity (64), so the buffers grow
        // and the graph is captured again.
        let steps = 70;
        let out = run_steps(
            &mut [&mut reference, &mut graphed, &mut eager, &mut cpu],
            &prompt,
            steps,
        );
        let scale = out[0].iter().map(|r| max_abs(r)).fold(0.0, f32::max);
        let mut worst = 0f32;
        for (i, (want, got)) in out[0].iter().zip(&out[1]).enumerate() {
            let d = max_abs_diff(want, got);
            assert!(
                d <= 5e-4 * scale.max(1.0),
                "{arch} step {i}: {d} (logits up to {scale})"
            );
            worst = worst.max(d);
        }
        for (i, (a, b)) in out[1].iter().zip(&out[2]).enumerate() {
            assert_eq!(
                a, b,
                "{arch} step {i}: graph replay differs from eager launches"
            );
        }
        let cpu_worst = out[0]
            .iter()
            .zip(&out[3])
            .map(|(a, b)| max_abs_diff(a, b))
            .fold(0.0, f32::max);
        assert!(
            cpu_worst <= 6e-2 * scale.max(1.0),
            "{arch}: CPU differs by {cpu_worst}"
        );
        eprintln!(
            "{arch}: ours vs candle's ops, max abs diff {worst:e} over {} steps (logits up to \
             {scale:.3}); CPU vs GPU {cpu_worst:e}",
            steps + 1
        );
        // Back to an earlier position: the same logits as the first time there.
        let at = 30;
        graphed.truncate_kv(prompt.len() + at);
        reference.truncate_kv(prompt.len() + at);
        let next = argmax(&out[0][at]);
        let (a, b) = (
            last_row(&mut reference, &[next]),
            last_row(&mut graphed, &[next]),
        );
        assert!(max_abs_diff(&a, &b) <= 5e-4 * scale.max(1.0));
        assert!(max_abs_diff(&b, &out[1][at + 1]) <= 1e-5 * scale.max(1.0));
    }
}
