//! Numerics and engine behaviour on tiny random-weight Qwen2/Qwen3 checkpoints written by
//! `scripts/golden_llm.py` (HF transformers is the reference for the golden logits).

use std::path::{Path, PathBuf};

use candle_core::Device;
use repohop::llm::qwen::QwenModel;
use repohop::llm::{
    CandleLlm, FinishReason, GenerateRequest, Llm, LlmError, LlmOptions, Message, ModelFiles,
    Prompt,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llm")
        .join(name)
}

struct Golden {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn golden(arch: &str) -> Golden {
    let text = std::fs::read_to_string(fixture(arch).join("golden.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let logits = v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    Golden {
        tokens: ids("tokens"),
        logits,
        greedy: ids("greedy"),
    }
}

fn safetensors_model(arch: &str) -> QwenModel {
    let dir = fixture(arch);
    QwenModel::from_safetensors(
        &dir.join("config.json"),
        &[dir.join("model.safetensors")],
        &Device::Cpu,
    )
    .unwrap()
}

fn engine(dir: &str) -> CandleLlm {
    CandleLlm::load(fixture(dir).to_str().unwrap(), &LlmOptions::default()).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn rows(t: candle_core::Tensor) -> Vec<Vec<f32>> {
    t.to_vec2().unwrap()
}

fn check_golden_logits(model: &mut QwenModel, arch: &str) {
    let g = golden(arch);
    let got = rows(model.forward(&g.tokens, true).unwrap());
    assert_eq!(got.len(), g.logits.len());
    for (pos, (a, b)) in got.iter().zip(&g.logits).enumerate() {
        let d = max_abs_diff(a, b);
        assert!(d < 1e-4, "{arch} position {pos}: max abs diff {d}");
    }
}

#[test]
fn qwen2_safetensors_matches_reference_logits() {
    check_golden_logits(&mut safetensors_model("qwen2"), "qwen2");
}

#[test]
fn qwen3_safetensors_matches_reference_logits() {
    check_golden_logits(&mut safetensors_model("qwen3"), "qwen3");
}

#[test]
fn gguf_loads_the_same_weights() {
    for arch in ["qwen2", "qwen3"] {
        let path = fixture(&format!("{arch}-gguf")).join("model.gguf");
        let mut file = std::fs::File::open(&path).unwrap();
        let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
        let mut model = QwenModel::from_gguf(&path, &content, &mut file, &Device::Cpu).unwrap();
        // GGUF embeddings are held in f16, so allow for its rounding.
        let g = golden(arch);
        let got = rows(model.forward(&g.tokens, true).unwrap());
        for (a, b) in got.iter().zip(&g.logits) {
            assert!(
                max_abs_diff(a, b) < 2e-2,
                "{arch} gguf diff {}",
                max_abs_diff(a, b)
            );
        }
    }
}

#[test]
fn incremental_decoding_equals_full_forward() {
    for arch in ["qwen2", "qwen3"] {
        let g = golden(arch);
        let mut full = safetensors_model(arch);
        let want = rows(full.forward(&g.tokens, true).unwrap());
        // One token at a time.
        let mut inc = safetensors_model(arch);
        for (i, &t) in g.tokens.iter().enumerate() {
            let got = rows(inc.forward(&[t], false).unwrap());
            let d = max_abs_diff(&got[0], &want[i]);
            assert!(d < 1e-4, "{arch} step {i}: {d}");
        }
        // A chunk, then the rest after truncating the cache back (prefix reuse).
        let mut chunked = safetensors_model(arch);
        chunked.forward(&g.tokens, false).unwrap();
        chunked.truncate_kv(4);
        let got = rows(chunked.forward(&g.tokens[4..], true).unwrap());
        for (i, row) in got.iter().enumerate() {
            let d = max_abs_diff(row, &want[i + 4]);
            assert!(d < 1e-4, "{arch} after truncation, position {}: {d}", i + 4);
        }
    }
}

#[test]
fn greedy_generation_matches_reference() {
    for arch in ["qwen2", "qwen3"] {
        let g = golden(arch);
        let mut llm = engine(arch);
        let prompt = Prompt::Text("def add(a, b):\n    return".into());
        let ids = llm.encode(&llm.render(&prompt).unwrap()).unwrap();
        assert_eq!(
            ids, g.tokens,
            "{arch}: tokenization differs from the reference"
        );
        let mut req = GenerateRequest::new(prompt);
        req.max_new_tokens = g.greedy.len();
        let resp = llm.generate(&req).unwrap();
        assert_eq!(resp.tokens, g.greedy, "{arch}");
        assert_eq!(resp.finish_reason, FinishReason::Length);
        assert_eq!(resp.prompt_tokens, g.tokens.len());
        assert_eq!(resp.generated_tokens, g.greedy.len());
    }
}

fn chat(turns: &[&str]) -> Prompt {
    let msgs = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i % 2 == 0 {
                Message::user(*t)
            } else {
                Message::assistant(*t)
            }
        })
        .collect();
    Prompt::Chat(msgs)
}

#[test]
fn prefix_cache_reuse_gives_the_cold_answer() {
    for arch in ["qwen2", "qwen3"] {
        let mut warm = engine(arch);
        let mut first = GenerateRequest::new(chat(&["def load_config(path):"]));
        first.max_new_tokens = 6;
        let a = warm.generate(&first).unwrap();
        assert_eq!(a.cached_prompt_tokens, 0);

        let mut second = GenerateRequest::new(chat(&["def load_config(path):", "ok", "import os"]));
        second.max_new_tokens = 8;
        let b = warm.generate(&second).unwrap();
        assert!(
            b.cached_prompt_tokens >= a.prompt_tokens,
            "{arch}: reused {} of the first prompt's {}",
            b.cached_prompt_tokens,
            a.prompt_tokens
        );
        let cold = engine(arch).generate(&second).unwrap();
        assert_eq!(cold.cached_prompt_tokens, 0);
        assert_eq!(
            b.tokens, cold.tokens,
            "{arch}: warm and cold answers differ"
        );
        assert_eq!(b.text, cold.text);

        // The same prompt again: all but the last token come from the cache.
        let c = warm.generate(&second).unwrap();
        assert_eq!(c.cached_prompt_tokens, c.prompt_tokens - 1);
        assert_eq!(c.tokens, cold.tokens);
    }
}

#[test]
fn ten_hop_sequence_computes_each_shared_token_once() {
    let mut llm = engine("qwen2");
    let mut turns: Vec<String> = vec!["class Parser: select the entry function".into()];
    let mut computed = 0;
    let mut prev_prompt = 0;
    for hop in 0..10 {
        let refs: Vec<&str> = turns.iter().map(String::as_str).collect();
        let mut req = GenerateRequest::new(chat(&refs));
        req.max_new_tokens = 4;
        let r = llm.generate(&req).unwrap();
        if hop > 0 {
            assert!(
                r.cached_prompt_tokens >= prev_prompt,
                "hop {hop}: {r:?} after {prev_prompt}"
            );
        }
        computed += r.prompt_tokens - r.cached_prompt_tokens;
        prev_prompt = r.prompt_tokens;
        turns.push(r.text.clone());
        turns.push(format!("hop {hop}: visit parse"));
    }
    // Every prompt token computed once, except per hop the answer (re-tokenised when it is
    // appended to the next prompt) and the last prompt token (recomputed for its logits).
    assert!(
        computed <= prev_prompt + 10 * (4 + 1),
        "computed {computed} for a final prompt of {prev_prompt}"
    );
}

#[test]
fn stop_strings_are_trimmed() {
    let mut llm = engine("qwen2");
    let mut req = GenerateRequest::new(Prompt::Text("def add(a, b):\n    return".into()));
    req.max_new_tokens = 12;
    let full = llm.generate(&req).unwrap();
    assert!(full.text.len() > 3, "{full:?}");
    // A two-character ASCII stop taken from inside the answer (decoded bytes may not be UTF-8).
    let chars: Vec<char> = full.text.chars().collect();
    let at = (1..chars.len() - 1)
        .find(|&i| chars[i].is_ascii_graphic() && chars[i + 1].is_ascii_graphic())
        .expect("an ASCII pair in the answer");
    let stop: String = chars[at..at + 2].iter().collect();
    req.stop = vec![stop.clone()];
    let cut = llm.generate(&req).unwrap();
    assert_eq!(cut.finish_reason, FinishReason::Stop);
    let at = full.text.find(&stop).unwrap();
    assert_eq!(cut.text, full.text[..at]);
    assert!(cut.generated_tokens < full.generated_tokens);
}

#[test]
fn sampling_is_reproducible_for_a_seed() {
    let mut llm = engine("qwen3");
    let mut req = GenerateRequest::new(Prompt::Text("import os\n".into()));
    req.max_new_tokens = 10;
    req.sampling = repohop::llm::Sampling::Sample {
        temperature: 1.0,
        top_p: 0.95,
        seed: 11,
    };
    let a = llm.generate(&req).unwrap();
    let b = llm.generate(&req).unwrap();
    assert_eq!(a.tokens, b.tokens);
    req.sampling = repohop::llm::Sampling::Sample {
        temperature: 1.0,
        top_p: 0.95,
        seed: 12,
    };
    assert_ne!(
        llm.generate(&req).unwrap().tokens,
        a.tokens,
        "another seed, another sample"
    );
}

#[test]
fn bad_input_gives_clear_errors() {
    let mut llm = engine("qwen2");
    let err = |r: Result<repohop::llm::GenerateResponse, LlmError>| r.unwrap_err().to_string();

    let e = err(llm.generate(&GenerateRequest::new(Prompt::Text(String::new()))));
    assert!(e.contains("prompt is empty"), "{e}");

    let mut zero = GenerateRequest::new(Prompt::Text("x".into()));
    zero.max_new_tokens = 0;
    assert!(err(llm.generate(&zero)).contains("max_new_tokens"));

    let long = GenerateRequest::new(Prompt::Text("def add(a, b): ".repeat(300)));
    let e = err(llm.generate(&long));
    assert!(e.contains("context window of 1024"), "{e}");

    let mut empty = GenerateRequest::new(Prompt::Text("x".into()));
    empty.constraint = Some(repohop::llm::Constraint::OneOf(vec![]));
    assert!(err(llm.generate(&empty)).contains("choice list is empty"));

    // The engine still works after rejected requests.
    let mut ok = GenerateRequest::new(Prompt::Text("x".into()));
    ok.max_new_tokens = 2;
    assert_eq!(llm.generate(&ok).unwrap().generated_tokens, 2);
}

#[test]
fn bad_model_files_give_clear_errors() {
    let opts = LlmOptions::default();
    let e = CandleLlm::load(fixture("llama.gguf").to_str().unwrap(), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("architecture \"llama\" is not supported"), "{e}");

    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("qwen2-gguf/model.gguf")).unwrap();
    let cut = tmp.path().join("model.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::copy(
        fixture("qwen2-gguf/tokenizer.json"),
        tmp.path().join("tokenizer.json"),
    )
    .unwrap();
    let e = CandleLlm::load(cut.to_str().unwrap(), &opts).err().unwrap();
    assert!(matches!(e, LlmError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("is truncated"));

    let files = ModelFiles::Safetensors {
        config: fixture("qwen2/config.json"),
        weights: vec![fixture("qwen2/model.safetensors")],
        tokenizer: fixture("tokenizer-too-big.json"),
    };
    let e = CandleLlm::from_files("tiny", &files, &opts).err().unwrap();
    assert!(matches!(e, LlmError::TokenizerMismatch { .. }), "{e}");

    let e = CandleLlm::load("no-such-model", &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a built-in alias"), "{e}");
}
