//! `repohop bench llm --concurrency 1,2,4,8`: answers decoded together against one at a time,
//! on the same prompts in the same process; the answers are compared token for token.

use std::path::Path;

use anyhow::{Context, Result};
use repohop::llm::{CandleLlm, GenerateRequest, GenerateResponse, Llm, Message, Prompt};

use super::llm::saved_prompts;
use super::measure::{median, peak_rss_mib, reset_peak_rss};

/// Short tasks of the kind the generator answers, for a bench without a run directory.
const ASKS: [&str; 8] = [
    "Write a Python function that parses a comma-separated list of integers, ignoring blanks.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python class LRUCache with get and put methods and a maximum size.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Write a Python function that flattens a nested list of any depth.",
    "Write a Python function that reads a JSON file and returns the value at a dotted key path.",
    "Write a Java method that counts the words of a string separated by whitespace.",
    "Write a Python function that groups a list of words by their first letter.",
];

/// Per batch size: aggregate decode tokens/s (all answers' tokens over the batch's decode
/// wall time) and per-answer tokens/s, medians of `runs`, against answering one at a time.
pub fn bench_concurrency(
    llm: &mut CandleLlm,
    levels: &[usize],
    prompts_from: Option<&Path>,
    answer_tokens: usize,
    runs: usize,
    json: bool,
) -> Result<()> {
    let mut levels = levels.to_vec();
    levels.sort_unstable();
    levels.dedup();
    anyhow::ensure!(
        levels.first().is_some_and(|&c| c >= 1) && levels.last().is_some_and(|&c| c <= 64),
        "--concurrency takes batch sizes from 1 to 64"
    );
    let most = *levels.last().context("no batch size")?;
    let texts: Vec<String> = match prompts_from {
        Some(dir) => saved_prompts(dir, most)?,
        None => ASKS.iter().map(|a| format!("{a} Only code.")).collect(),
    };
    let reqs: Vec<GenerateRequest> = (0..most)
        .map(|i| {
            let text = &texts[i % texts.len()];
            let mut r = GenerateRequest::new(Prompt::Chat(vec![Message::user(text.clone())]));
            r.max_new_tokens = answer_tokens;
            r
        })
        .collect();
    let (speculation, mixed) = (llm.speculation(), llm.mixed_prefill());
    llm.set_speculation(None);
    let result = measure(llm, &levels, &reqs, runs, json);
    llm.set_speculation(speculation);
    llm.set_mixed_prefill(mixed);
    let report = result?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    let differ = report["answers_differing"].as_u64().unwrap_or(0);
    anyhow::ensure!(
        differ == 0 || !llm.rows_exact(),
        "batched answers differed from one-at-a-time ones in {differ} cases"
    );
    Ok(())
}

fn measure(
    llm: &mut CandleLlm,
    levels: &[usize],
    reqs: &[GenerateRequest],
    runs: usize,
    json: bool,
) -> Result<serde_json::Value> {
    let tps = |r: &GenerateResponse| r.generated_tokens as f64 / (r.decode_ms / 1e3).max(1e-9);
    // One at a time, each from a cold cache: the reference answers and the single-stream speed.
    let mut alone = Vec::with_capacity(reqs.len());
    for (i, r) in reqs.iter().enumerate() {
        llm.clear_cache();
        alone.push(
            llm.generate(r)
                .with_context(|| format!("prompt {i} alone"))?,
        );
    }
    let single = median(&alone.iter().map(tps).collect::<Vec<_>>());
    if !json {
        eprintln!(
            "one at a time: {single:.1} tok/s decode over {} prompts",
            reqs.len()
        );
    }
    let mut rows = Vec::new();
    let mut differ = 0;
    // Whether prompts can be computed inside the decode steps here (the CPU).
    llm.set_mixed_prefill(true);
    let can_mix = llm.mixed_prefill();
    let batch = |llm: &mut CandleLlm, c: usize, mixed: bool| {
        llm.set_mixed_prefill(mixed);
        llm.clear_cache();
        let started = std::time::Instant::now();
        let out: Vec<GenerateResponse> = llm
            .generate_batch(&reqs[..c])
            .into_iter()
            .collect::<Result<_, _>>()
            .with_context(|| format!("a batch of {c}"))?;
        let diff = out
            .iter()
            .zip(&alone)
            .filter(|(b, a)| b.tokens != a.tokens)
            .count();
        anyhow::Ok((out, started.elapsed().as_secs_f64(), diff))
    };
    for &c in levels {
        let (mut aggregate, mut per_answer, mut prefill, mut peak, mut kv) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut apart_s, mut mixed_s) = (Vec::new(), Vec::new());
        // The same answers one at a time, prompts included.
        let one_by_one_s: f64 = alone[..c]
            .iter()
            .map(|r| (r.prefill_ms + r.decode_ms) / 1e3)
            .sum();
        for run in 0..runs {
            let tracked = reset_peak_rss();
            // Prompts computed apart, between decode steps: the decode figures.
            let (out, elapsed, mut diff) = batch(llm, c, false)?;
            apart_s.push(elapsed);
            if let Some(mib) = peak_rss_mib().filter(|_| tracked) {
                peak.push(mib);
            }
            kv.push(llm.take_peak_kv_in_flight() as f64 / f64::from(1 << 20));
            // Prompts computed apart take their own passes between decode steps (all before
            // them, or later ones as the KV budget frees room): decode took the rest.
            let prefill_s: f64 = out.iter().map(|r| r.prefill_ms).sum::<f64>() / 1e3;
            let wall = elapsed - prefill_s;
            let tokens: usize = out.iter().map(|r| r.generated_tokens).sum();
            let prompt_tokens: usize = out.iter().map(|r| r.prompt_tokens).sum();
            aggregate.push(tokens as f64 / wall.max(1e-9));
            per_answer.push(median(&out.iter().map(tps).collect::<Vec<_>>()));
            prefill.push(prompt_tokens as f64 / prefill_s.max(1e-9));
            // Prompts computed inside the decode steps: end to end only, as the two overlap.
            if can_mix {
                let (_, elapsed, d) = batch(llm, c, true)?;
                mixed_s.push(elapsed);
                diff += d;
            }
            differ += diff;
            if !json {
                eprintln!(
                    "{c} at once, run {run}: {:.1} tok/s together ({:.1} per answer), {} tokens; end to end {:.1} s prompts apart, {} mixed in, {:.1} s one at a time{}",
                    aggregate[run],
                    per_answer[run],
                    tokens,
                    elapsed,
                    mixed_s.last().map_or("-".into(), |s| format!("{s:.1} s")),
                    one_by_one_s,
                    if diff > 0 {
                        format!(" · {diff} ANSWERS DIFFER")
                    } else {
                        String::new()
                    }
                );
            }
        }
        let row = serde_json::json!({
            "concurrency": c,
            "aggregate_decode_tokens_per_s": median(&aggregate),
            "per_answer_decode_tokens_per_s": median(&per_answer),
            "speedup_over_one_at_a_time": median(&aggregate) / single,
            "prefill_tokens_per_s": median(&prefill),
            "peak_rss_mib": (!peak.is_empty()).then(|| median(&peak)),
            "peak_kv_in_flight_mib": median(&kv),
            "one_at_a_time_s": one_by_one_s,
            "end_to_end_s_prompts_apart": median(&apart_s),
            "end_to_end_s_prompts_mixed": (!mixed_s.is_empty()).then(|| median(&mixed_s)),
        });
        if !json {
            println!(
                "{c} at once: {:.1} tok/s decode together ({:.2}x one at a time), {:.1} per answer; prefill {:.0} tok/s; peak RSS {}, KV in flight {:.0} MiB",
                median(&aggregate),
                median(&aggregate) / single,
                median(&per_answer),
                median(&prefill),
                row["peak_rss_mib"]
                    .as_f64()
                    .map_or("n/a".to_string(), |m| format!("{m:.0} MiB")),
                median(&kv),
            );
            println!(
                "{c} at once, end to end: {:.1} s with prompts computed apart, {} with prompts mixed into the decode steps, {one_by_one_s:.1} s one at a time",
                median(&apart_s),
                row["end_to_end_s_prompts_mixed"]
                    .as_f64()
                    .map_or("n/a".to_string(), |s| format!("{s:.1} s")),
            );
        }
        rows.push(row);
    }
    if !json {
        println!("answers differing from one at a time: {differ}");
    }
    Ok(serde_json::json!({
        "model": llm.name(),
        "threads": candle_core::utils::get_num_threads(),
        "prompts": reqs.len(),
        "answer_tokens": reqs.first().map(|r| r.max_new_tokens),
        "runs": runs,
        "kv_budget_mib": llm.kv_budget_bytes().map(|b| b >> 20),
        "one_at_a_time_decode_tokens_per_s": single,
        "levels": rows,
        "answers_differing": differ,
        "exact_rows": llm.rows_exact(),
    }))
}
