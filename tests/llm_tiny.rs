//! Numerics and engine behaviour on tiny random-weight Qwen2/Qwen3 checkpoints written by
//! `scripts/golden_llm.py` (HF transformers is the reference for the golden logits).

use std::path::{Path, PathBuf};

mod test_device;

use candle_core::quantized::gguf_file;
use candle_core::Device;

use repohop::llm::qwen::{KvCache, QwenModel};
use repohop::llm::{
    CandleLlm, FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError, LlmOptions, Message,
    ModelFiles, Prompt, SharedLlm,
};
use test_device::{assert_on_test_device, test_device};

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
        &test_device(),
    )
    .unwrap()
}

/// The engine picks its own device: check it is the one the tests run on.
fn engine(dir: &str) -> CandleLlm {
    let llm = CandleLlm::load(fixture(dir).to_str().unwrap(), &LlmOptions::default()).unwrap();
    assert_on_test_device(llm.device(), "the engine");
    llm
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
    let mut worst = 0f32;
    for (pos, (a, b)) in got.iter().zip(&g.logits).enumerate() {
        let d = max_abs_diff(a, b);
        assert!(d < 1e-4, "{arch} position {pos}: max abs diff {d}");
        worst = worst.max(d);
    }
    eprintln!(
        "{arch} on {:?}: max abs diff to the reference logits {worst:e}",
        model.device()
    );
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
        let mut model = QwenModel::from_gguf(&path, &content, &mut file, &test_device()).unwrap();
        // GGUF embeddings are held in f16, so allow for its rounding.
        let g = golden(arch);
        let got = rows(model.forward(&g.tokens, true).unwrap());
        let mut worst = 0f32;
        for (a, b) in got.iter().zip(&g.logits) {
            let d = max_abs_diff(a, b);
            assert!(d < 2e-2, "{arch} gguf diff {d}");
            worst = worst.max(d);
        }
        eprintln!(
            "{arch} gguf on {:?}: max abs diff {worst:e}",
            model.device()
        );
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
        let mut worst = 0f32;
        for (i, &t) in g.tokens.iter().enumerate() {
            let got = rows(inc.forward(&[t], false).unwrap());
            let d = max_abs_diff(&got[0], &want[i]);
            assert!(d < 1e-4, "{arch} step {i}: {d}");
            worst = worst.max(d);
        }
        eprintln!(
            "{arch} on {:?}: incremental vs full max abs diff {worst:e}",
            inc.device()
        );
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

/// `ln softmax(row)[i]` in f64, as a reference.
fn log_softmax(row: &[f32], i: u32) -> f64 {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    row[i as usize] as f64 - max - sum.ln()
}

#[test]
fn a_continuations_score_is_its_log_probability_under_the_reference_logits() {
    for arch in ["qwen2", "qwen3"] {
        let g = golden(arch);
        let mut llm = engine(arch);
        // Several tokens, then (from a cached prompt) the last one alone.
        for (prompt, continuation) in [
            ("def add(a, b):", "\n    return"),
            ("def add(a, b):", "\n    return"),
            ("def add(a, b):\n   ", " return"),
        ] {
            let head = llm.encode(prompt).unwrap();
            let tail = llm.encode(continuation).unwrap();
            assert_eq!(
                [head.clone(), tail.clone()].concat(),
                g.tokens,
                "{arch}: the split"
            );
            // Row i of the reference logits predicts token i + 1.
            let want: f64 = (head.len()..g.tokens.len())
                .map(|i| log_softmax(&g.logits[i - 1], g.tokens[i]))
                .sum();
            let got = llm
                .score(&Prompt::Text(prompt.into()), continuation)
                .unwrap();
            assert_eq!((got.prompt_tokens, got.tokens), (head.len(), tail.len()));
            assert!(
                (got.logprob - want).abs() < 1e-3,
                "{arch} {continuation:?}: {} vs {want}",
                got.logprob
            );
        }
        assert!(matches!(
            llm.score(&Prompt::Text("def".into()), ""),
            Err(LlmError::InvalidRequest(_))
        ));
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
fn interleaved_conversations_each_reuse_their_own_prefix() {
    let ask = |turns: &[&str]| {
        let mut r = GenerateRequest::new(chat(turns));
        r.max_new_tokens = 6;
        r
    };
    // Long enough that the system prompt the two share is less than half of either.
    let a = "def load_config(path): read the file at path, parse every line of it as a key, an \
             equals sign and a value, skip blank lines and comments, and return a dictionary \
             of the keys and values found, the later of two equal keys winning over the other";
    let b = "class Parser: split a stream of tokens into statements, one per logical line of \
             the source, joining lines inside brackets, and keep for every statement the line \
             and column where it starts so that errors can point at the right place in it";
    let run = |options: &LlmOptions| {
        let mut llm = CandleLlm::load(fixture("qwen2").to_str().unwrap(), options).unwrap();
        let first = [a, b].map(|t| llm.generate(&ask(&[t])).unwrap());
        // Each conversation goes on after the other one ran.
        let next: Vec<GenerateResponse> = [a, b]
            .iter()
            .zip(&first)
            .map(|(t, f)| {
                llm.generate(&ask(&[t, &f.text, "now add a docstring"]))
                    .unwrap()
            })
            .collect();
        (first, next)
    };
    let (first, next) = run(&LlmOptions::default());
    for (f, n) in first.iter().zip(&next) {
        assert!(
            n.cached_prompt_tokens >= f.prompt_tokens,
            "reused {} of the earlier prompt's {}",
            n.cached_prompt_tokens,
            f.prompt_tokens
        );
    }
    let cold: Vec<Vec<u32>> = [a, b]
        .iter()
        .zip(&first)
        .map(|(t, f)| {
            let req = ask(&[t, &f.text, "now add a docstring"]);
            engine("qwen2").generate(&req).unwrap().tokens
        })
        .collect();
    assert_eq!(
        next.iter().map(|n| n.tokens.clone()).collect::<Vec<_>>(),
        cold
    );
    // Room for about one sequence (this model's keys and values take 512 bytes a token): the
    // first conversation's prompt is gone when it goes on.
    let one = LlmOptions {
        kv_cache_bytes: 512 * (first[1].prompt_tokens + 16),
        ..LlmOptions::default()
    };
    let (first, next) = run(&one);
    assert!(next[0].cached_prompt_tokens < first[0].prompt_tokens / 2);
    assert_eq!(next[0].tokens, cold[0]);
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
fn a_batch_step_gives_each_sequence_its_own_logits() {
    for arch in ["qwen2", "qwen3"] {
        let g = golden(arch);
        let mut model = safetensors_model(arch);
        // Three sequences of different lengths: two prompts, one a copy of another's prefix.
        let prompts: [&[u32]; 2] = [&g.tokens, &g.tokens[2..]];
        let mut caches: Vec<KvCache> = Vec::new();
        for p in prompts {
            let mut kv = KvCache::default();
            model.swap_kv(&mut kv);
            model.forward(p, false).unwrap();
            model.swap_kv(&mut kv);
            caches.push(kv);
        }
        model.swap_kv(&mut caches[0]);
        caches.push(model.copy_kv_prefix(3).unwrap());
        model.swap_kv(&mut caches[0]);
        assert_eq!(
            caches.iter().map(KvCache::len).collect::<Vec<_>>(),
            [g.tokens.len(), g.tokens.len() - 2, 3]
        );
        // The same sequences, each run alone on a fresh model.
        let alone = |tokens: &[u32], steps: &[u32]| -> Vec<Vec<f32>> {
            let mut m = safetensors_model(arch);
            m.forward(tokens, false).unwrap();
            steps
                .iter()
                .map(|&t| rows(m.forward(&[t], false).unwrap()).remove(0))
                .collect()
        };
        let steps: [[u32; 3]; 2] = [[5, 17, 9], [40, 3, 3]];
        let want = [
            alone(&g.tokens, &[5, 40]),
            alone(&g.tokens[2..], &[17, 3]),
            alone(&g.tokens[..3], &[9, 3]),
        ];
        let mut worst = 0f32;
        for (s, step) in steps.iter().enumerate() {
            let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
            let got = rows(model.forward_batch(&mut refs, step).unwrap());
            assert_eq!(got.len(), 3);
            for (i, row) in got.iter().enumerate() {
                let d = max_abs_diff(row, &want[i][s]);
                assert!(d < 1e-4, "{arch} step {s} sequence {i}: {d}");
                worst = worst.max(d);
            }
        }
        assert_eq!(caches[2].len(), 5);
        // The model's own sequence was not touched by the batch.
        assert_eq!(model.kv_len(), 0);
        let e = model
            .forward_batch(&mut caches.iter_mut().collect::<Vec<_>>(), &[1])
            .unwrap_err();
        assert!(e.to_string().contains("3 sequences for 1 tokens"), "{e}");
        eprintln!("{arch}: batch step vs each sequence alone, max abs diff {worst:e}");
    }
}

#[test]
fn a_batch_answers_as_one_call_at_a_time_does() {
    for arch in ["qwen2", "qwen3"] {
        let mut reqs = vec![
            GenerateRequest::new(chat(&["def load_config(path):"])),
            GenerateRequest::new(Prompt::Text("def add(a, b):\n    return".into())),
            GenerateRequest::new(Prompt::Text("x".into())),
            GenerateRequest::new(chat(&["class Parser:", "ok", "import os"])),
        ];
        reqs[0].max_new_tokens = 9;
        reqs[1].max_new_tokens = 5;
        reqs[2].max_new_tokens = 0; // refused, alone
        reqs[3].max_new_tokens = 12;
        reqs[3].sampling = repohop::llm::Sampling::Sample {
            temperature: 1.0,
            top_p: 0.9,
            seed: 3,
        };
        // Another sample of the same prompt: computed once, for both.
        let mut another = reqs[3].clone();
        another.sampling = repohop::llm::Sampling::Sample {
            temperature: 1.0,
            top_p: 0.9,
            seed: 4,
        };
        reqs.push(another);
        let mut llm = engine(arch);
        let batch = llm.generate_batch(&reqs);
        assert_eq!(batch.len(), 5);
        let shared = batch[4].as_ref().unwrap();
        assert_eq!(shared.cached_prompt_tokens, shared.prompt_tokens - 1);
        let e = batch[2].as_ref().unwrap_err().to_string();
        assert!(e.contains("max_new_tokens"), "{e}");
        for i in [0, 1, 3, 4] {
            let got = batch[i].as_ref().unwrap();
            let want = engine(arch).generate(&reqs[i]).unwrap();
            assert_eq!(got.tokens, want.tokens, "{arch} request {i}");
            assert_eq!(got.text, want.text);
            assert_eq!(got.finish_reason, want.finish_reason);
            assert_eq!(got.prompt_tokens, want.prompt_tokens);
        }
        // The last answer finished stays as the prefix cache for the next call.
        assert!(llm.cached_tokens() > 0, "{arch}: no prefix kept");
        let again = llm.generate(&reqs[0]).unwrap();
        assert_eq!(again.tokens, batch[0].as_ref().unwrap().tokens);
    }
}

#[test]
fn threads_sharing_one_engine_get_their_own_answers() {
    let prompts = [
        "def load_config(path):",
        "class Parser:",
        "import os",
        "def add(a, b):",
    ];
    let reqs: Vec<GenerateRequest> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut r = GenerateRequest::new(chat(&[p]));
            r.max_new_tokens = 4 + 3 * i;
            r
        })
        .collect();
    let want: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| engine("qwen2").generate(r).unwrap().tokens)
        .collect();
    // Every prompt computed whole: which request reuses whose prefix depends on timing.
    let whole = LlmOptions {
        prefix_reuse: false,
        ..LlmOptions::default()
    };
    let shared =
        SharedLlm::spawn(CandleLlm::load(fixture("qwen2").to_str().unwrap(), &whole).unwrap());
    assert_eq!(
        shared.count_tokens(&reqs[0].prompt).unwrap(),
        engine("qwen2").count_tokens(&reqs[0].prompt).unwrap()
    );
    assert_eq!(
        shared.clone().score(&reqs[0].prompt, " x = 1").unwrap(),
        engine("qwen2").score(&reqs[0].prompt, " x = 1").unwrap()
    );
    let got: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = reqs
            .iter()
            .map(|r| {
                let mut llm = shared.clone();
                scope.spawn(move || {
                    // Two calls per thread: the second joins whatever is in flight then.
                    let first = llm.generate(r).unwrap();
                    let second = llm.generate(r).unwrap();
                    assert_eq!(first.tokens, second.tokens);
                    first.tokens
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got, want);
    // A refused request fails alone.
    let mut zero = reqs[0].clone();
    zero.max_new_tokens = 0;
    let mut llm = shared.clone();
    let answers = llm.generate_batch(&[zero, reqs[1].clone()]);
    assert!(answers[0].is_err());
    assert_eq!(answers[1].as_ref().unwrap().tokens, want[1]);
}

#[test]
fn a_cancelled_request_leaves_the_others_running() {
    let ask = |text: &str, tokens: usize| {
        let mut r = GenerateRequest::new(chat(&[text]));
        r.max_new_tokens = tokens;
        r
    };
    // An answer long enough that it cannot end between being handed over and being dropped
    // below (the random model ends most answers early).
    let mut llm = engine("qwen2");
    let asks = [
        "class Parser:",
        "import os",
        "def load_config(path):",
        "x = [",
        "# todo",
    ];
    let lengths: Vec<usize> = (asks.iter())
        .map(|a| llm.generate(&ask(a, 200)).unwrap().tokens.len())
        .collect();
    let at = lengths.iter().position(|&n| n >= 100);
    let long = ask(
        asks[at.unwrap_or_else(|| panic!("no long answer: {lengths:?}"))],
        200,
    );
    let short = ask("def add(a, b):", 12);
    let want = engine("qwen2").generate(&short).unwrap().tokens;
    let whole = LlmOptions {
        prefix_reuse: false,
        ..LlmOptions::default()
    };
    let shared =
        SharedLlm::spawn(CandleLlm::load(fixture("qwen2").to_str().unwrap(), &whole).unwrap());
    let cancelled = shared.submit(&[long.clone(), long]);
    let kept = shared.submit(std::slice::from_ref(&short));
    drop(cancelled);
    // Answered after the engine has seen the drop: at most the short answer is left.
    let left = shared.in_flight();
    assert!(left <= 1, "{left} requests in flight after the cancel");
    let answers = kept.wait();
    assert_eq!(answers[0].as_ref().unwrap().tokens, want);
    assert_eq!(shared.in_flight(), 0);
}

#[test]
fn a_kv_budget_holds_answers_back_without_changing_them() {
    let reqs: Vec<GenerateRequest> = ["def load_config(path):", "class Parser:", "import os", "x"]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut r = GenerateRequest::new(chat(&[p]));
            r.max_new_tokens = 6 + 2 * i;
            r
        })
        .collect();
    let load = |budget: Option<usize>| {
        let options = LlmOptions {
            prefix_reuse: false,
            kv_budget_bytes: budget,
            ..LlmOptions::default()
        };
        CandleLlm::load(fixture("qwen2").to_str().unwrap(), &options).unwrap()
    };
    let tokens = |answers: Vec<Result<GenerateResponse, LlmError>>| -> Vec<Vec<u32>> {
        answers.into_iter().map(|a| a.unwrap().tokens).collect()
    };
    let mut free = load(None);
    let together = tokens(free.generate_batch(&reqs));
    let all_at_once = free.take_peak_kv_in_flight();
    let mut largest = 0;
    for r in &reqs {
        let mut one = load(None);
        one.generate_batch(std::slice::from_ref(r));
        largest = largest.max(one.take_peak_kv_in_flight());
    }
    assert!(
        largest > 0 && largest < all_at_once,
        "{largest} {all_at_once}"
    );

    // No room beside anything: one answer at a time, each as large as alone.
    let mut tight = load(Some(1));
    assert_eq!(tokens(tight.generate_batch(&reqs)), together);
    assert_eq!(tight.take_peak_kv_in_flight(), largest);
    // Room for any two: two run together, never more than the bound.
    let mut two = load(Some(2 * largest));
    assert_eq!(tokens(two.generate_batch(&reqs)), together);
    let held = two.take_peak_kv_in_flight();
    assert!(held > largest && held <= 2 * largest, "{held} {largest}");

    // A shared engine queues the callers' requests the same way.
    let shared = SharedLlm::spawn(load(Some(1)));
    let got: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = reqs
            .iter()
            .map(|r| {
                let mut llm = shared.clone();
                scope.spawn(move || llm.generate(r).unwrap().tokens)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got, together);
    assert!(shared.clone().generate_batch(&[]).is_empty());
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

#[test]
fn fim_prompt_uses_the_special_tokens() {
    let llm = engine("qwen2");
    let prompt = Prompt::Fim {
        prefix: "def add(a, b):\n    return ".into(),
        suffix: "\n".into(),
    };
    let text = llm.render(&prompt).unwrap();
    assert_eq!(
        text,
        "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n<|fim_middle|>"
    );
    let ids = llm.encode(&text).unwrap();
    let id = |t: &str| llm.tokenizer().token_to_id(t).unwrap();
    assert_eq!(ids[0], id("<|fim_prefix|>"));
    assert_eq!(ids[ids.len() - 1], id("<|fim_middle|>"));
    assert_eq!(ids[ids.len() - 3], id("<|fim_suffix|>"));
}

// ---- model configurations the kernels cannot run ----------------------------------------

/// A copy of the tiny Qwen2 safetensors model with its config.json and tensors edited.
fn edited_safetensors(
    edit_config: impl FnOnce(&mut serde_json::Value),
    edit_tensors: impl FnOnce(&mut std::collections::HashMap<String, candle_core::Tensor>),
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("qwen2");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit_config(&mut config);
    let config_path = dir.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let mut tensors =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    edit_tensors(&mut tensors);
    let weights = dir.path().join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    (dir, config_path, weights)
}

/// The load error of an invalid model, which must name the problem.
fn load_error(result: Result<QwenModel, LlmError>, expected: &str) -> String {
    let Some(e) = result.err() else {
        panic!("the model loaded; expected an error naming {expected:?}")
    };
    assert!(matches!(e, LlmError::Load { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains(expected), "{text}");
    text
}

#[test]
fn zero_kv_heads_are_rejected_at_load() {
    // The k and v projections emptied to match: before validation this loaded, and the first
    // forward divided by zero in attention.
    let (_dir, config, weights) = edited_safetensors(
        |c| c["num_key_value_heads"] = 0.into(),
        |ts| {
            for i in 0..2 {
                for n in ["k_proj", "v_proj"] {
                    let p = format!("model.layers.{i}.self_attn.{n}");
                    let empty = |shape: &[usize]| {
                        candle_core::Tensor::zeros(shape, candle_core::DType::F32, &Device::Cpu)
                            .unwrap()
                    };
                    ts.insert(format!("{p}.weight"), empty(&[0, 64]));
                    ts.insert(format!("{p}.bias"), empty(&[0]));
                }
            }
        },
    );
    let result = QwenModel::from_safetensors(&config, &[weights], &test_device());
    load_error(result, "0 key/value heads");
}

#[test]
fn inconsistent_safetensors_configs_are_rejected_at_load() {
    let load = |edit: fn(&mut serde_json::Value)| {
        let (_dir, config, weights) = edited_safetensors(edit, |_| {});
        QwenModel::from_safetensors(&config, &[weights], &test_device())
    };
    load_error(
        load(|c| c["num_key_value_heads"] = 3.into()),
        "not a multiple of 3 key/value heads",
    );
    load_error(
        load(|c| c["num_attention_heads"] = 0.into()),
        "0 attention heads",
    );
    load_error(
        load(|c| c["num_attention_heads"] = 3.into()),
        "hidden size 64 is not a multiple of 3 attention heads",
    );
    load_error(load(|c| c["head_dim"] = 15.into()), "head dimension 15");
    load_error(load(|c| c["vocab_size"] = 0.into()), "vocabulary size is 0");
    load_error(load(|c| c["num_hidden_layers"] = 0.into()), "0 layers");
    load_error(
        load(|c| c["max_position_embeddings"] = 0.into()),
        "context length is 0",
    );
    load_error(
        load(|c| c["rope_parameters"]["rope_theta"] = 0.0.into()),
        "rope theta 0",
    );
    load_error(load(|c| c["rms_norm_eps"] = (-1.0).into()), "epsilon -1");
    load_error(
        load(|c| c["intermediate_size"] = 0.into()),
        "intermediate size is 0",
    );
    // A config that disagrees with the tensors.
    load_error(
        load(|c| c["intermediate_size"] = 128.into()),
        "model.layers.0.mlp.gate_proj.weight has shape [96, 64], the configuration implies [128, 64]",
    );
}

type Metadata = std::collections::HashMap<String, gguf_file::Value>;
type QTensors = std::collections::HashMap<String, candle_core::quantized::QTensor>;

/// Loads a copy of the tiny Qwen2 GGUF with its metadata and tensors edited.
fn load_edited_gguf(
    edit: impl FnOnce(&mut Metadata, &mut QTensors),
) -> Result<QwenModel, LlmError> {
    let src = fixture("qwen2-gguf").join("model.gguf");
    let mut file = std::fs::File::open(&src).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut metadata = content.metadata.clone();
    let mut tensors: QTensors = content
        .tensor_infos
        .keys()
        .map(|n| {
            (
                n.clone(),
                content.tensor(&mut file, n, &Device::Cpu).unwrap(),
            )
        })
        .collect();
    edit(&mut metadata, &mut tensors);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("model.gguf");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let md: Vec<_> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ts: Vec<_> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        gguf_file::write(&mut out, &md, &ts).unwrap();
    }
    let mut file = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    QwenModel::from_gguf(&path, &content, &mut file, &test_device())
}

#[test]
fn invalid_gguf_configs_are_rejected_at_load() {
    use gguf_file::Value;
    let set = |key: &str, v: Value| {
        load_edited_gguf(|md, _| {
            md.insert(key.to_string(), v);
        })
    };
    load_error(
        set("qwen2.attention.head_count_kv", Value::U32(0)),
        "0 key/value heads",
    );
    load_error(
        set("qwen2.attention.head_count_kv", Value::U32(3)),
        "not a multiple of 3 key/value heads",
    );
    load_error(
        set("qwen2.rope.freq_base", Value::F32(f32::NAN)),
        "rope theta NaN",
    );
    load_error(
        set("qwen2.context_length", Value::U32(0)),
        "context length is 0",
    );
    // One layer's up projection narrower than the others'.
    let narrow = load_edited_gguf(|_, ts| {
        let zeros =
            candle_core::Tensor::zeros((32, 64), candle_core::DType::F32, &Device::Cpu).unwrap();
        let t = candle_core::quantized::QTensor::quantize(
            &zeros,
            candle_core::quantized::GgmlDType::F32,
        )
        .unwrap();
        ts.insert("blk.1.ffn_up.weight".into(), t);
    });
    load_error(
        narrow,
        "blk.1.ffn_up.weight has shape [32, 64], the configuration implies [96, 64]",
    );
}

// ---- decode speed at the real model's size (not a correctness check) -------------------

/// Qwen2.5-1.5B's shape (hidden 1536, 28 layers, 12 query and 2 KV heads, FFN 8960, a tied
/// vocabulary of 151,936).
const BIG: [(&str, usize); 6] = [
    ("hidden", 1536),
    ("ffn", 8960),
    ("layers", 28),
    ("heads", 12),
    ("kv_heads", 2),
    ("vocab", 151_936),
];

fn big(key: &str) -> usize {
    BIG.iter().find(|(k, _)| *k == key).unwrap().1
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        out.extend_from_slice(&seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A Q4_K tensor of random 4-bit values and 6-bit scales with small block scales (weights of
/// magnitude ≲ 0.1), built directly: quantizing 1.5 B floats would take longer than the test.
fn random_q4k(rows: usize, cols: usize, seed: u64) -> candle_core::quantized::QTensor {
    use candle_core::quantized::GgmlDType;
    let blocks = rows * cols / 256;
    let mut raw = random_bytes(blocks * 144, seed);
    let d = 0x068e_u16.to_le_bytes(); // 1e-4 as an IEEE half
    for b in raw.chunks_exact_mut(144) {
        b[0..2].copy_from_slice(&d); // d
        b[2..4].copy_from_slice(&d); // dmin
    }
    candle_core::quantized::ggml_file::qtensor_from_ggml(
        GgmlDType::Q4K,
        &raw,
        vec![rows, cols],
        &candle_core::Device::Cpu,
    )
    .unwrap()
}

/// Writes a random Q4_K GGUF of Qwen2.5-1.5B's shape (the format of the default generator,
/// Q4_K_M; ~0.9 GB) into `dir`.
fn write_big_gguf(dir: &Path) -> PathBuf {
    use candle_core::quantized::{gguf_file, QTensor};
    let (hidden, ffn, kvh) = (big("hidden"), big("ffn"), big("kv_heads"));
    let kv = kvh * hidden / big("heads");
    let f32_tensor = |v: f32, n: usize| {
        QTensor::quantize(
            &candle_core::Tensor::full(v, n, &candle_core::Device::Cpu).unwrap(),
            candle_core::quantized::GgmlDType::F32,
        )
        .unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            random_q4k(big("vocab"), hidden, 1),
        ),
        ("output_norm.weight".into(), f32_tensor(1.0, hidden)),
    ];
    for i in 0..big("layers") {
        let s = 100 + 10 * i as u64;
        let p = format!("blk.{i}");
        tensors.extend([
            (format!("{p}.attn_norm.weight"), f32_tensor(1.0, hidden)),
            (format!("{p}.ffn_norm.weight"), f32_tensor(1.0, hidden)),
            (format!("{p}.attn_q.bias"), f32_tensor(0.01, hidden)),
            (format!("{p}.attn_k.bias"), f32_tensor(0.01, kv)),
            (format!("{p}.attn_v.bias"), f32_tensor(0.01, kv)),
            (format!("{p}.attn_q.weight"), random_q4k(hidden, hidden, s)),
            (format!("{p}.attn_k.weight"), random_q4k(kv, hidden, s + 1)),
            (format!("{p}.attn_v.weight"), random_q4k(kv, hidden, s + 2)),
            (
                format!("{p}.attn_output.weight"),
                random_q4k(hidden, hidden, s + 3),
            ),
            (
                format!("{p}.ffn_gate.weight"),
                random_q4k(ffn, hidden, s + 4),
            ),
            (format!("{p}.ffn_up.weight"), random_q4k(ffn, hidden, s + 5)),
            (
                format!("{p}.ffn_down.weight"),
                random_q4k(hidden, ffn, s + 6),
            ),
        ]);
    }
    use gguf_file::Value;
    let u = |v: usize| Value::U32(v as u32);
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("qwen2".into())),
        ("qwen2.embedding_length", u(hidden)),
        ("qwen2.block_count", u(big("layers"))),
        ("qwen2.attention.head_count", u(big("heads"))),
        ("qwen2.attention.head_count_kv", u(kvh)),
        ("qwen2.context_length", u(32_768)),
        ("qwen2.rope.freq_base", Value::F32(1e6)),
        ("qwen2.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
    ];
    let path = dir.join("model.gguf");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut file, &md, &ts).unwrap();
    path
}

/// Prefills `prompt` tokens, then decodes `steps` tokens greedily (logits to the host each
/// step, as the engine does); prints the rates.
fn time_decode(model: &mut QwenModel, label: &str, prompt: usize, steps: usize) {
    use std::time::Instant;
    let vocab = model.config().vocab_size as u32;
    let ids: Vec<u32> = (0..prompt as u32).map(|i| (i * 7919) % vocab).collect();
    // Warm-up (kernel loading, cuBLAS handles), then reset the cache.
    model.forward(&ids[..8], false).unwrap();
    model.truncate_kv(0);
    let t0 = Instant::now();
    let logits: Vec<f32> = model
        .forward(&ids, false)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let prefill = t0.elapsed().as_secs_f64();
    assert!(
        logits.iter().all(|x| x.is_finite()),
        "{label}: non-finite logits"
    );
    let mut next = repohop::llm::qwen::argmax(&logits);
    let t1 = Instant::now();
    for _ in 0..steps {
        let logits: Vec<f32> = model
            .forward(&[next], false)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        next = repohop::llm::qwen::argmax(&logits);
    }
    let decode = t1.elapsed().as_secs_f64();
    eprintln!(
        "[speed] {label} on {:?}: prefill {prompt} tokens in {:.1} ms ({:.0} tokens/s); \
         decode {steps} tokens in {:.1} ms ({:.2} ms/token, {:.1} tokens/s)",
        model.device().location(),
        prefill * 1e3,
        prompt as f64 / prefill,
        decode * 1e3,
        decode * 1e3 / steps as f64,
        steps as f64 / decode
    );
}

/// Decode speed on random weights of Qwen2.5-1.5B's shape: Q4_K GGUF (the default
/// generator's format) and f32 from safetensors. Writes ~0.9 GB and ~3 GB of temporary files
/// (under /dev/shm where it exists). Run with `--ignored` on the GPU machine.
#[test]
#[ignore]
fn decode_speed_at_qwen25_1_5b_shape() {
    let dev = test_device();
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };

    let t = std::time::Instant::now();
    let path = write_big_gguf(tmp.path());
    let mut file = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    let mut model = QwenModel::from_gguf(&path, &content, &mut file, &dev).unwrap();
    eprintln!(
        "[speed] Q4_K GGUF written and loaded in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    time_decode(&mut model, "Q4_K GGUF 1.5B-shape", 256, 128);
    drop(model);
    std::fs::remove_file(&path).unwrap();

    // The same shape in bf16 safetensors, computed in f32 (as the engine loads safetensors).
    let t = std::time::Instant::now();
    let (hidden, ffn, kvh) = (big("hidden"), big("ffn"), big("kv_heads"));
    let kv = kvh * hidden / big("heads");
    let randn = |shape: (usize, usize)| {
        candle_core::Tensor::randn(0f32, 0.02, shape, &dev)
            .and_then(|t| t.to_dtype(candle_core::DType::BF16))
            .unwrap()
    };
    let vec1 = |v: f32, n: usize| {
        candle_core::Tensor::full(v, n, &dev)
            .and_then(|t| t.to_dtype(candle_core::DType::BF16))
            .unwrap()
    };
    let mut ts = std::collections::HashMap::new();
    ts.insert(
        "model.embed_tokens.weight".to_string(),
        randn((big("vocab"), hidden)),
    );
    ts.insert("model.norm.weight".to_string(), vec1(1.0, hidden));
    for i in 0..big("layers") {
        let p = format!("model.layers.{i}");
        for (n, shape) in [
            ("self_attn.q_proj", (hidden, hidden)),
            ("self_attn.k_proj", (kv, hidden)),
            ("self_attn.v_proj", (kv, hidden)),
            ("self_attn.o_proj", (hidden, hidden)),
            ("mlp.gate_proj", (ffn, hidden)),
            ("mlp.up_proj", (ffn, hidden)),
            ("mlp.down_proj", (hidden, ffn)),
        ] {
            ts.insert(format!("{p}.{n}.weight"), randn(shape));
        }
        for (n, len) in [("q_proj", hidden), ("k_proj", kv), ("v_proj", kv)] {
            ts.insert(format!("{p}.self_attn.{n}.bias"), vec1(0.01, len));
        }
        ts.insert(format!("{p}.input_layernorm.weight"), vec1(1.0, hidden));
        ts.insert(
            format!("{p}.post_attention_layernorm.weight"),
            vec1(1.0, hidden),
        );
    }
    let weights = tmp.path().join("model.safetensors");
    candle_core::safetensors::save(&ts, &weights).unwrap();
    drop(ts);
    let config = serde_json::json!({
        "model_type": "qwen2",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": big("layers"),
        "num_attention_heads": big("heads"),
        "num_key_value_heads": kvh,
        "vocab_size": big("vocab"),
        "max_position_embeddings": 32_768,
        "rope_theta": 1e6,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": true,
    });
    let config_path = tmp.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let mut model = QwenModel::from_safetensors(&config_path, &[weights], &dev).unwrap();
    eprintln!(
        "[speed] bf16 safetensors written and loaded in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    time_decode(
        &mut model,
        "f32 (from bf16 safetensors) 1.5B-shape",
        256,
        128,
    );
}
