//! Our CUDA decode step (kernels/decode.cu), prompt attention (kernels/prefill.cu) and batched
//! decode of several sequences (kernels/batch.cu) against candle's ops (with f32 activations)
//! on the same GPU, on a small Qwen2 and Qwen3 model of random Q4_K / Q6_K blocks (the 1.5B model's block types): logits
//! step by step, across a KV buffer growth, after truncation, graph replay against launching
//! the kernels one by one, and the CPU path. A `cuda` build runs them on GPU 0; without a GPU
//! they say so and pass, unless `REPOHOP_REQUIRE_GPU` is set (then they fail).
#![cfg(feature = "cuda")]

mod synth_model;
mod test_device;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use repohop::llm::qwen::{argmax, KvCache, QwenModel};
use synth_model::{random_model, random_model_heads, VOCAB};
use test_device::test_device;

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

/// Prompt chunks through our attention kernel against candle's ops (a masked score matrix), for
/// both head sizes the kernel takes and grouped queries: every position's logits, for a first
/// chunk and for a second one that reads the first's keys from the cache (and grows it), at
/// lengths that are not multiples of the kernel's 32 queries a block.
#[test]
fn our_prompt_attention_matches_candles_ops_on_the_gpu() {
    let device = test_device();
    if !device.is_cuda() {
        eprintln!("no CUDA GPU: our prompt attention kernel is not checked here");
        return;
    }
    candle_core::quantized::cuda::set_force_dmmv(true);
    for (arch, heads, kv_heads, head_dim) in [
        ("qwen2", 4, 2, 64),
        ("qwen3", 2, 1, 128),
        ("qwen2", 2, 2, 128),
    ] {
        let file = random_model_heads(arch, heads, kv_heads, head_dim);
        let mut reference = load(&file, &device);
        reference.set_device_kernels(false, false);
        let mut ours = load(&file, &device);
        let tokens: Vec<u32> = (0..116).map(|i| (i * 53 + 11) % VOCAB as u32).collect();
        let mut worst = 0f32;
        for chunk in [&tokens[..45], &tokens[45..115], &tokens[115..]] {
            let rows = |m: &mut QwenModel| -> Vec<f32> {
                let t = m.forward(chunk, true).unwrap();
                assert_eq!(t.dims(), [chunk.len(), VOCAB]);
                t.flatten_all().unwrap().to_vec1().unwrap()
            };
            let (want, got) = (rows(&mut reference), rows(&mut ours));
            let scale = max_abs(&want).max(1.0);
            let d = max_abs_diff(&want, &got);
            assert!(
                d <= 5e-4 * scale,
                "{arch} {heads}/{kv_heads}x{head_dim}, {} tokens: {d} (logits up to {scale})",
                chunk.len()
            );
            worst = worst.max(d);
        }
        eprintln!(
            "{arch} {heads}/{kv_heads}x{head_dim}: prompt attention, ours vs candle's ops, max abs \
             diff {worst:e}"
        );
    }
}

/// A decode step of nine sequences at once (their caches of different lengths, some growing
/// during the steps) against each sequence alone, for both head sizes.
#[test]
fn a_batch_of_sequences_decodes_as_each_alone_on_the_gpu() {
    let device = test_device();
    if !device.is_cuda() {
        eprintln!("no CUDA GPU: our batch kernels are not checked here");
        return;
    }
    candle_core::quantized::cuda::set_force_dmmv(true);
    for (arch, heads, kv_heads, head_dim) in [("qwen2", 4, 2, 64), ("qwen3", 2, 1, 128)] {
        let file = random_model_heads(arch, heads, kv_heads, head_dim);
        let mut model = load(&file, &device);
        assert_eq!(model.batch_rows(), repohop::llm::qwen::GPU_BATCH_ROWS);
        let prompts: Vec<Vec<u32>> = [60, 5, 33, 1, 17, 64, 2, 40, 12]
            .iter()
            .enumerate()
            .map(|(s, &len)| {
                (0..len)
                    .map(|i| ((i * 31 + s * 7 + 3) % VOCAB) as u32)
                    .collect()
            })
            .collect();
        let steps = 20;
        let token = |s: usize, t: usize| ((s * 101 + t * 13 + 1) % VOCAB) as u32;
        // Each sequence alone, one token at a time.
        let mut alone = load(&file, &device);
        let want: Vec<Vec<Vec<f32>>> = prompts
            .iter()
            .enumerate()
            .map(|(s, p)| {
                alone.truncate_kv(0);
                alone.forward(p, false).unwrap();
                (0..steps)
                    .map(|t| last_row(&mut alone, &[token(s, t)]))
                    .collect()
            })
            .collect();
        // All together: prompts into their own caches, then batched steps.
        let mut caches: Vec<KvCache> = prompts
            .iter()
            .map(|p| {
                let mut kv = KvCache::default();
                model.swap_kv(&mut kv);
                model.forward(p, false).unwrap();
                model.swap_kv(&mut kv);
                kv
            })
            .collect();
        let mut worst = 0f32;
        for t in 0..steps {
            let toks: Vec<u32> = (0..prompts.len()).map(|s| token(s, t)).collect();
            let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
            let got: Vec<Vec<f32>> = model
                .forward_batch(&mut refs, &toks)
                .unwrap()
                .to_vec2()
                .unwrap();
            for (s, (row, alone)) in got.iter().zip(&want).enumerate() {
                let scale = max_abs(&alone[t]).max(1.0);
                let d = max_abs_diff(row, &alone[t]);
                assert!(d <= 5e-4 * scale, "{arch} step {t} sequence {s}: {d}");
                worst = worst.max(d);
            }
        }
        for (kv, p) in caches.iter().zip(&prompts) {
            assert_eq!(kv.len(), p.len() + steps);
        }
        assert_eq!(model.kv_len(), 0, "the model's own sequence is not touched");
        eprintln!(
            "{arch} {heads}/{kv_heads}x{head_dim}: {} sequences decoded together vs alone, max abs \
             diff {worst:e}",
            prompts.len()
        );
    }
}
