//! `repohop llm`: one generation call for quick checks; `repohop bench llm`: prefill/decode
//! throughput, constrained-decoding overhead and prefix-cache savings.

use super::measure::median;
use anyhow::{Context, Result};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_qwen2;
use clap::Args;
use repohop::llm::qwen::{argmax, Arch};
use repohop::llm::{
    resolve, CandleLlm, Constraint, GenerateRequest, GenerateResponse, Llm, LlmOptions, Message,
    ModelFiles, Prompt, Sampling, Speculation,
};
use repohop::models::DEFAULT_GENERATOR;

#[derive(Args)]
pub struct LlmArgs {
    /// The user message (or, with --raw, the whole prompt).
    #[arg(required_unless_present = "score_jsonl")]
    pub prompt: Option<String>,
    /// Model alias, path to a .gguf / model folder, or a cached Hugging Face repo id.
    #[arg(long, default_value = DEFAULT_GENERATOR)]
    pub model: String,
    #[command(flatten)]
    pub remote: super::args::RemoteArgs,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Constrain the answer to exactly one of these comma-separated choices.
    #[arg(long, value_delimiter = ',')]
    pub choice: Vec<String>,
    /// System message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    /// Send the prompt as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Extra stop string (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Sample at this temperature instead of greedy decoding.
    #[arg(long)]
    pub temperature: Option<f32>,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print a JSON object (text, finish_reason, token counts, timings).
    #[arg(long)]
    pub json: bool,
    /// Instead of generating, print how likely the model finds a text after the prompt
    /// (the natural-log probability summed over its tokens).
    #[arg(long, conflicts_with = "score_jsonl")]
    pub score: Option<String>,
    /// Score many texts with one loaded model: JSONL lines `{"user", "continuation"}`
    /// (optionally `"system"`, or a raw `"prompt"` instead of `"user"`); prints one JSON line
    /// per input line.
    #[arg(long, value_name = "FILE")]
    pub score_jsonl: Option<std::path::PathBuf>,
}

/// One line of `--score-jsonl`.
#[derive(serde::Deserialize)]
struct ScoreLine {
    user: Option<String>,
    system: Option<String>,
    prompt: Option<String>,
    continuation: String,
}

fn chat_prompt(user: String, system: Option<String>) -> Prompt {
    let mut msgs: Vec<Message> = system.into_iter().map(Message::system).collect();
    msgs.push(Message::user(user));
    Prompt::Chat(msgs)
}

fn score_lines(llm: &mut dyn Llm, file: &std::path::Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("{}:{}", file.display(), n + 1);
        let l: ScoreLine = serde_json::from_str(line).with_context(at)?;
        let prompt = match (l.prompt, l.user) {
            (Some(raw), None) => Prompt::Text(raw),
            (None, Some(user)) => chat_prompt(user, l.system),
            _ => anyhow::bail!("{}: give exactly one of \"prompt\" and \"user\"", at()),
        };
        let scored = llm.score(&prompt, &l.continuation).with_context(at)?;
        println!("{}", serde_json::to_string(&scored)?);
    }
    Ok(())
}

pub fn run(args: LlmArgs) -> Result<()> {
    let mut llm = args.remote.llm_or(&args.model)?;
    if let Some(file) = &args.score_jsonl {
        return score_lines(llm.as_mut(), file);
    }
    let text = args.prompt.unwrap_or_default();
    let prompt = if args.raw {
        Prompt::Text(text)
    } else {
        chat_prompt(text, args.system)
    };
    if let Some(continuation) = &args.score {
        let scored = llm.score(&prompt, continuation)?;
        println!("{}", serde_json::to_string(&scored)?);
        return Ok(());
    }
    let mut req = GenerateRequest::new(prompt);
    req.max_new_tokens = args.max_tokens;
    req.stop = args.stop;
    if let Some(temperature) = args.temperature {
        req.sampling = Sampling::Sample {
            temperature,
            top_p: args.top_p,
            seed: args.seed,
        };
    }
    if !args.choice.is_empty() {
        // `--choice ""` is an empty list, which the engine rejects with a clear error.
        let choices = args.choice.into_iter().filter(|c| !c.is_empty()).collect();
        req.constraint = Some(Constraint::OneOf(choices));
    }
    let resp = llm.generate(&req)?;
    if args.json {
        let mut v = serde_json::to_value(&resp)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("tokens");
            o.insert("model".into(), llm.name().into());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}", resp.text);
        eprintln!(
            "[{:?}: {} prompt tokens ({} cached), {} generated; prefill {:.0} ms, decode {:.0} ms]",
            resp.finish_reason,
            resp.prompt_tokens,
            resp.cached_prompt_tokens,
            resp.generated_tokens,
            resp.prefill_ms,
            resp.decode_ms
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct BenchLlmArgs {
    #[arg(long, default_value = DEFAULT_GENERATOR)]
    pub model: String,
    /// Repetitions of the prefill/decode measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Calls in the shared-prefix (multi-hop) sequence; 0 skips it.
    #[arg(long, default_value_t = 10)]
    pub hops: usize,
    /// Skip the peer (candle-transformers' quantized_qwen2 on the same GGUF, run interleaved
    /// with ours in the same process).
    #[arg(long)]
    pub no_peer: bool,
    /// Instead: speculative decoding against plain decoding on the generation prompts of an
    /// eval run directory (its `tasks/*/trace.json`), greedy, interleaved, answers compared.
    #[arg(long, value_name = "RUN_DIR")]
    pub speculative: Option<std::path::PathBuf>,
    /// With --speculative: how many of the run's prompts.
    #[arg(long, default_value_t = 8)]
    pub prompts: usize,
    /// With --speculative: most tokens drafted per step.
    #[arg(long, default_value_t = Speculation::default().draft)]
    pub draft: usize,
    /// With --speculative or --concurrency: most answer tokens per prompt.
    #[arg(long, default_value_t = 512)]
    pub answer_tokens: usize,
    /// Instead: answers decoded together in batches of these sizes (e.g. 1,2,4,8) against one
    /// at a time, the answers compared token for token.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub concurrency: Vec<usize>,
    /// With --concurrency: the generation prompts of an eval run directory (default: short
    /// coding asks).
    #[arg(long, value_name = "RUN_DIR")]
    pub prompts_from: Option<std::path::PathBuf>,
    /// With --concurrency: most MiB the answers' keys and values may take together; answers
    /// past it wait for others to end (see `eval --kv-budget-mb`).
    #[arg(long, value_name = "MIB")]
    pub kv_budget_mb: Option<usize>,
    #[arg(long)]
    pub json: bool,
}

const CODE: &str = "def load_config(path):\n    with open(path) as f:\n        return json.load(f)\n\n\
class Parser:\n    def __init__(self, text):\n        self.text = text\n        self.pos = 0\n\n    \
def parse_args(self, argv):\n        return [a for a in argv if not a.startswith('-')]\n\n";

pub fn bench(args: BenchLlmArgs) -> Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let options = LlmOptions {
        kv_budget_bytes: args.kv_budget_mb.map(|m| m << 20),
        ..LlmOptions::default()
    };
    let mut llm = CandleLlm::load(&args.model, &options)?;
    if let Some(dir) = &args.speculative {
        return bench_speculative(&mut llm, dir, &args);
    }
    if !args.concurrency.is_empty() {
        return super::bench_batch::bench_concurrency(
            &mut llm,
            &args.concurrency,
            args.prompts_from.as_deref(),
            args.answer_tokens,
            args.runs,
            args.json,
        );
    }
    let mut ids = Vec::new();
    while ids.len() < args.prompt_tokens {
        ids.extend(llm.encode(CODE)?);
    }
    ids.truncate(args.prompt_tokens);
    let mut peer = match (&resolve(&args.model)?, args.no_peer) {
        (ModelFiles::Gguf { model, .. }, false) if llm.config().arch == Arch::Qwen2 => {
            Some(PeerQwen2::load(model, llm.device())?)
        }
        _ => None,
    };
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    let (mut peer_prefill, mut peer_decode) = (Vec::new(), Vec::new());
    // On a GPU with our kernels: the same model with them off (candle's ops) and with
    // the kernels launched one by one instead of replayed from a graph, interleaved.
    let variants: &[(&str, bool, bool)] = if llm.has_device_kernels() {
        &[
            ("candle_ops", false, false),
            ("kernels_no_graph", true, false),
        ]
    } else {
        &[]
    };
    let mut variant_decode = vec![Vec::new(); variants.len()];
    let mut variant_prefill = vec![Vec::new(); variants.len()];
    for run in 0..args.runs {
        for (i, &(name, on, graphs)) in variants.iter().enumerate() {
            llm.set_device_kernels(on, graphs);
            let timed = llm.time_prefill_decode(&ids, args.gen_tokens);
            llm.set_device_kernels(true, true);
            let (p, d) = timed.with_context(|| format!("benchmark run {run} ({name})"))?;
            variant_prefill[i].push(ids.len() as f64 / (p / 1e3));
            variant_decode[i].push(args.gen_tokens as f64 / (d / 1e3));
            if !args.json {
                eprintln!(
                    "run {run}: {name} prefill {:.1} tok/s, decode {:.1} tok/s",
                    variant_prefill[i][run], variant_decode[i][run]
                );
            }
        }
        let (p, d) = llm
            .time_prefill_decode(&ids, args.gen_tokens)
            .with_context(|| format!("benchmark run {run}"))?;
        prefill.push(ids.len() as f64 / (p / 1e3));
        decode.push(args.gen_tokens as f64 / (d / 1e3));
        if !args.json {
            eprintln!(
                "run {run}: prefill {:.1} tok/s, decode {:.1} tok/s",
                prefill[run], decode[run]
            );
        }
        if let Some(peer) = &mut peer {
            let (p, d) = peer.time_prefill_decode(&ids, args.gen_tokens)?;
            peer_prefill.push(ids.len() as f64 / (p / 1e3));
            peer_decode.push(args.gen_tokens as f64 / (d / 1e3));
            if !args.json {
                eprintln!(
                    "run {run}: peer prefill {:.1} tok/s, decode {:.1} tok/s",
                    peer_prefill[run], peer_decode[run]
                );
            }
        }
    }
    drop(peer);
    let peer_report = (!peer_prefill.is_empty()).then(|| {
        let (p, d) = (median(&peer_prefill), median(&peer_decode));
        serde_json::json!({
            "engine": "candle-transformers 0.11 quantized_qwen2",
            "prefill_tokens_per_s": p,
            "decode_tokens_per_s": d,
            "prefill_tokens_per_s_runs": peer_prefill,
            "decode_tokens_per_s_runs": peer_decode,
            "prefill_ratio": median(&prefill) / p,
            "decode_ratio": median(&decode) / d,
        })
    });
    let device_variants: serde_json::Map<String, serde_json::Value> = variants
        .iter()
        .zip(variant_decode.iter().zip(&variant_prefill))
        .map(|(&(name, _, _), (runs, prefill_runs))| {
            let (d, p) = (median(runs), median(prefill_runs));
            let v = serde_json::json!({
                "decode_tokens_per_s": d,
                "decode_tokens_per_s_runs": runs,
                "ours_over_this": median(&decode) / d,
                "prefill_tokens_per_s": p,
                "prefill_tokens_per_s_runs": prefill_runs,
                "prefill_ours_over_this": median(&prefill) / p,
            });
            (name.to_string(), v)
        })
        .collect();
    let constrained = constrained_overhead(&mut llm)?;
    let prefix = if args.hops > 0 {
        Some(prefix_savings(&mut llm, args.hops)?)
    } else {
        None
    };
    let report = serde_json::json!({
        "model": args.model,
        "threads": candle_core::utils::get_num_threads(),
        "device": format!("{:?}", llm.device().location()),
        "device_kernels": llm.has_device_kernels(),
        "device_variants": device_variants,
        "prompt_tokens": ids.len(),
        "generated_tokens": args.gen_tokens,
        "runs": args.runs,
        "prefill_tokens_per_s": median(&prefill),
        "decode_tokens_per_s": median(&decode),
        "prefill_tokens_per_s_runs": prefill,
        "decode_tokens_per_s_runs": decode,
        "peer": peer_report,
        "constrained": constrained,
        "prefix_cache": prefix,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}: prefill {:.1} tok/s ({} tokens), decode {:.1} tok/s ({} tokens), median of {}",
            args.model,
            report["prefill_tokens_per_s"].as_f64().unwrap_or(0.0),
            ids.len(),
            report["decode_tokens_per_s"].as_f64().unwrap_or(0.0),
            args.gen_tokens,
            args.runs
        );
        println!("peer: {}", report["peer"]);
        if !variants.is_empty() {
            println!("our GPU kernels against: {}", report["device_variants"]);
        }
        println!("constrained decoding: {}", report["constrained"]);
        println!("prefix cache: {}", report["prefix_cache"]);
    }
    Ok(())
}

/// The generation prompts saved in an eval run directory's traces, in task order.
pub(super) fn saved_prompts(dir: &std::path::Path, limit: usize) -> Result<Vec<String>> {
    let tasks = dir.join("tasks");
    let mut traces: Vec<_> = std::fs::read_dir(&tasks)
        .with_context(|| format!("{}: not an eval run directory", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path().join("trace.json")))
        .filter(|p| p.is_file())
        .collect();
    traces.sort();
    let prompts: Vec<String> = traces
        .iter()
        .filter_map(|p| {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).ok()?).ok()?;
            v["prompt"].as_str().map(str::to_string)
        })
        .take(limit)
        .collect();
    anyhow::ensure!(
        !prompts.is_empty(),
        "{}: no task trace with a generation prompt",
        tasks.display()
    );
    Ok(prompts)
}

/// Each saved prompt answered greedily `--runs` times with speculative decoding off and on,
/// interleaved, from a cold cache: decode speed (prefill excluded), drafts accepted, and
/// whether the answers are the same.
fn bench_speculative(
    llm: &mut CandleLlm,
    dir: &std::path::Path,
    args: &BenchLlmArgs,
) -> Result<()> {
    let on = Speculation {
        draft: args.draft,
        ..Speculation::default()
    };
    llm.set_speculation(Some(on));
    anyhow::ensure!(
        llm.speculation().is_some(),
        "speculative decoding needs our quantized kernels (an exact several-token pass: AVX-512 \
         VNNI or AVX2 with FMA and F16C); this machine or model has none"
    );
    let prompts = saved_prompts(dir, args.prompts)?;
    let (mut plain_tps, mut fast_tps, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut drafted, mut accepted, mut tokens, mut passes) = (0, 0, 0, 0);
    let mut differ = 0;
    for (i, text) in prompts.iter().enumerate() {
        let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user(text.clone())]));
        req.max_new_tokens = args.answer_tokens;
        for run in 0..args.runs {
            let mut answer = |s: Option<Speculation>| -> Result<GenerateResponse> {
                llm.set_speculation(s);
                llm.clear_cache();
                Ok(llm.generate(&req)?)
            };
            let plain = answer(None)?;
            let fast = answer(Some(on))?;
            let tps = |r: &GenerateResponse| r.generated_tokens as f64 / (r.decode_ms / 1e3);
            plain_tps.push(tps(&plain));
            fast_tps.push(tps(&fast));
            ratios.push(plain.decode_ms / fast.decode_ms);
            differ += usize::from(fast.tokens != plain.tokens);
            drafted += fast.drafted_tokens;
            accepted += fast.accepted_tokens;
            tokens += fast.generated_tokens;
            passes += fast.generated_tokens.saturating_sub(fast.accepted_tokens);
            if !args.json {
                eprintln!(
                    "prompt {i} run {run}: {} tokens, plain {:.1} tok/s, speculative {:.1} tok/s ({:.2}x), {} of {} drafted accepted{}",
                    fast.generated_tokens,
                    tps(&plain),
                    tps(&fast),
                    plain.decode_ms / fast.decode_ms,
                    fast.accepted_tokens,
                    fast.drafted_tokens,
                    if fast.tokens == plain.tokens { "" } else { " · ANSWERS DIFFER" }
                );
            }
        }
    }
    let report = serde_json::json!({
        "model": args.model,
        "prompts": prompts.len(),
        "runs": args.runs,
        "draft": on.draft,
        "ngram": on.ngram,
        "plain_decode_tokens_per_s": median(&plain_tps),
        "speculative_decode_tokens_per_s": median(&fast_tps),
        "speedup_median": median(&ratios),
        "acceptance": accepted as f64 / drafted.max(1) as f64,
        "tokens_per_pass": tokens as f64 / passes.max(1) as f64,
        "answers_differing": differ,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "speculative decoding (draft {}, {} prompts × {} runs): {:.1} → {:.1} tok/s decode, median speed-up {:.2}x; {:.0}% of drafted tokens accepted, {:.2} tokens per pass; answers differing: {differ}",
            on.draft,
            prompts.len(),
            args.runs,
            median(&plain_tps),
            median(&fast_tps),
            median(&ratios),
            100.0 * report["acceptance"].as_f64().unwrap_or(0.0),
            report["tokens_per_pass"].as_f64().unwrap_or(0.0),
        );
    }
    anyhow::ensure!(
        differ == 0,
        "speculative answers differed from plain ones in {differ} runs"
    );
    Ok(())
}

/// A subset call over 40 function names: constraint time per token against the decode step.
fn constrained_overhead(llm: &mut CandleLlm) -> Result<serde_json::Value> {
    let names: Vec<String> = (0..40)
        .map(|i| format!("module_{}.handle_request_{i}", i % 7))
        .collect();
    let question = format!(
        "Which functions handle the request path? Candidates:\n{}\nAnswer with a JSON array.",
        names.join("\n")
    );
    let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user(question)]));
    req.max_new_tokens = 64;
    req.constraint = Some(Constraint::Subset {
        items: names,
        max_items: 3,
    });
    llm.clear_cache();
    let r: GenerateResponse = llm.generate(&req)?;
    let n = r.generated_tokens.max(1) as f64;
    Ok(serde_json::json!({
        "answer": r.text,
        "tokens": r.generated_tokens,
        "constraint_ms_per_token": r.constraint_ms / n,
        "decode_ms_per_token": r.decode_ms / n,
        "overhead_pct": 100.0 * r.constraint_ms / (r.decode_ms - r.constraint_ms).max(1e-9),
    }))
}

/// `hops` calls whose chat grows by each answer and a new question, warm (prefix cache) and
/// cold (cache cleared before each call).
fn prefix_savings(llm: &mut CandleLlm, hops: usize) -> Result<serde_json::Value> {
    let system = format!("You navigate a repository to find code relevant to a task.\n{CODE}");
    let mut run = |warm: bool| -> Result<(usize, usize, f64)> {
        llm.clear_cache();
        let mut msgs = vec![
            Message::system(system.clone()),
            Message::user("Task: parse the config. Which function first?"),
        ];
        let (mut total, mut computed, mut ms) = (0, 0, 0.0);
        for hop in 0..hops {
            if !warm {
                llm.clear_cache();
            }
            let mut req = GenerateRequest::new(Prompt::Chat(msgs.clone()));
            req.max_new_tokens = 8;
            let r = llm.generate(&req)?;
            total += r.prompt_tokens;
            computed += r.prompt_tokens - r.cached_prompt_tokens;
            ms += r.prefill_ms;
            msgs.push(Message::assistant(r.text));
            msgs.push(Message::user(format!(
                "Hop {hop}: you visited it. Which function next?"
            )));
        }
        Ok((total, computed, ms))
    };
    let (total, computed, warm_ms) = run(true)?;
    let (_, cold_computed, cold_ms) = run(false)?;
    Ok(serde_json::json!({
        "calls": hops,
        "prompt_tokens_total": total,
        "computed_tokens_warm": computed,
        "computed_tokens_cold": cold_computed,
        "prefill_ms_warm": warm_ms,
        "prefill_ms_cold": cold_ms,
        "prefill_speedup": cold_ms / warm_ms.max(1e-9),
    }))
}

/// The peer: candle-transformers' own Qwen2 GGUF model on the same device, timed the same
/// way as ours.
struct PeerQwen2(quantized_qwen2::ModelWeights, Device);

impl PeerQwen2 {
    fn load(path: &std::path::Path, device: &Device) -> Result<Self> {
        let mut file = std::fs::File::open(path)?;
        let content = gguf_file::Content::read(&mut file)?;
        let model = quantized_qwen2::ModelWeights::from_gguf(content, &mut file, device)?;
        Ok(Self(model, device.clone()))
    }

    fn time_prefill_decode(&mut self, ids: &[u32], new_tokens: usize) -> Result<(f64, f64)> {
        self.0.clear_kv_cache();
        let start = std::time::Instant::now();
        let input = Tensor::new(ids, &self.1)?.unsqueeze(0)?;
        let mut logits: Vec<f32> = self.0.forward(&input, 0)?.flatten_all()?.to_vec1()?;
        let prefill = start.elapsed().as_secs_f64() * 1e3;
        let start = std::time::Instant::now();
        for i in 0..new_tokens {
            let input = Tensor::new(&[argmax(&logits)], &self.1)?.unsqueeze(0)?;
            logits = self
                .0
                .forward(&input, ids.len() + i)?
                .flatten_all()?
                .to_vec1()?;
        }
        Ok((prefill, start.elapsed().as_secs_f64() * 1e3))
    }
}
