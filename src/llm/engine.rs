//! The candle implementation of [`Llm`]: prompt rendering, prefill with prefix-cache reuse,
//! the decode loop with stops and constraints, and token accounting.

use std::collections::VecDeque;
use std::time::Instant;

use candle_core::Device;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokenizers::Tokenizer;

use super::constraint::Matcher;
use super::load::{load_tokenizer, read_gguf, resolve, ModelFiles};
use super::qwen::{argmax, Arch, KvCache, QwenConfig, QwenModel, EXACT_ROWS};
use super::sample::{argmax_where, sample};
use super::token_bytes::TokenBytes;
use super::{chatml, fim_prompt};
use super::{
    FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError, Prompt, Sampling, Scored,
};
use crate::repo::lang::lexical::{first_statement, opens_aside};
use crate::repo::model::Lang;

/// Qwen2.5's chat template inserts this when the messages carry no system message.
const QWEN2_DEFAULT_SYSTEM: &str =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// Engine settings.
#[derive(Debug, Clone)]
pub struct LlmOptions {
    /// Memory the prefix KV cache may keep between calls (default 1 GiB: about 18,000 tokens
    /// of Qwen2.5-1.5B): the last sequence computed and, in the room left, those before it
    /// (the oldest go first). A longer sequence is cut to its first tokens after the call.
    pub kv_cache_bytes: usize,
    /// Reuse the keys and values of a prompt prefix computed before (by an earlier call or
    /// another answer in flight). On our CPU kernels a reused prefix holds the bits computing
    /// the prompt whole gives ([`QwenModel::rows_exact`]). Off: every prompt is computed
    /// whole, so elsewhere too an answer does not depend on what ran before or beside it, at
    /// the cost of recomputing shared prefixes.
    pub prefix_reuse: bool,
    /// Speculative decoding from the prompt for greedy, unconstrained calls (`None`: off).
    /// Used only where the model's several-token pass is exact ([`QwenModel::rows_exact`]),
    /// so the answer is the one plain decoding gives, token for token.
    pub speculation: Option<Speculation>,
    /// Memory the keys and values of answers decoded together may take (`None`: no bound).
    /// An answer whose prompt and token budget would go over waits, in order, until others
    /// end; one answer always runs, whatever its size.
    pub kv_budget_bytes: Option<usize>,
    /// On the CPU, the prompt of an answer joining others in flight is computed in chunks of
    /// [`PREFILL_CHUNK`] tokens inside their decode steps (continuous batching), so they keep
    /// decoding meanwhile. Off: a prompt is computed on its own before it joins.
    pub mixed_prefill: bool,
}

/// Prompt tokens computed per decode step of the answers in flight (mixed prefill): a pass of
/// 64 rows computes prompt tokens as fast as a long one here, and adds ~0.3 s to the step.
pub const PREFILL_CHUNK: usize = 64;

impl Default for LlmOptions {
    fn default() -> Self {
        Self {
            kv_cache_bytes: 1 << 30,
            prefix_reuse: true,
            speculation: Some(Speculation::default()),
            kv_budget_bytes: None,
            mixed_prefill: true,
        }
    }
}

/// Prompt-lookup drafting: after each token, the tokens that followed the last `ngram` (or
/// fewer, down to 2) tokens where they occurred before are checked in one pass with it. How
/// many depends on how long the repeated tail is: a 2-token tail drafts 1, a 3-token one 3,
/// and a longer one up to `draft`. A repeat of one token predicted little, and a verifying
/// pass costs more per row at long contexts (each row attends to the whole cache); simulated
/// over the answers of a DevEval run and then measured (`bench llm --speculative`), this
/// rule beat a fixed 3-token draft from any tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Speculation {
    /// Most tokens drafted at once (at most `EXACT_ROWS - 1`).
    pub draft: usize,
    pub ngram: usize,
}

impl Default for Speculation {
    fn default() -> Self {
        Self {
            draft: EXACT_ROWS - 2,
            ngram: 4,
        }
    }
}

impl Speculation {
    /// Tokens to draft after a repeated tail of `matched` tokens.
    fn draft_len(&self, matched: usize) -> usize {
        let len = match matched {
            0 | 1 => 0,
            2 => 1,
            3 => 3,
            _ => self.draft,
        };
        len.min(self.draft)
    }
}

/// A Qwen model run through candle, with a prefix cache: the KV state of the last call's
/// prompt and answer, and of sequences computed before it (see [`LlmOptions::kv_cache_bytes`]).
/// A call reuses the longest common token prefix with any of them and computes only the
/// rest. Not `Sync`-shared: wrap in a `Mutex` to use from several threads.
pub struct CandleLlm {
    name: String,
    model: QwenModel,
    tokenizer: Tokenizer,
    token_bytes: TokenBytes,
    /// Tokens whose keys and values the model holds, in order.
    cached: Vec<u32>,
    /// Earlier sequences kept for their prefixes, oldest first: concurrent pipelines (or a
    /// pipeline's prompts of another layout) each find their own prompt again.
    shelf: Vec<(Vec<u32>, KvCache)>,
    cache_limit_tokens: usize,
    prefix_reuse: bool,
    speculation: Option<Speculation>,
    kv_budget_bytes: Option<usize>,
    mixed_prefill: bool,
    /// Most bytes the answers in flight held at once since last read.
    peak_kv_in_flight: usize,
}

/// CUDA GPU 0 in a `cuda` build, else the CPU. A `cuda` build on a machine whose GPU can't
/// be opened says why and runs on the CPU rather than failing.
fn device() -> Device {
    #[cfg(feature = "cuda")]
    {
        match crate::gpu::open_cuda(0) {
            Ok(d) => return d,
            Err(e) => {
                eprintln!("warning: CUDA GPU 0 cannot be opened ({e}); the LLM runs on the CPU")
            }
        }
    }
    Device::Cpu
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Whether `b` starts with at least half of `a`.
fn shares_most(a: &[u32], b: &[u32]) -> bool {
    2 * common_prefix(a, b) >= a.len()
}

/// Byte offset of the earliest caller stop string in `text`.
pub(super) fn find_stop(text: &[u8], stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.windows(s.len()).position(|w| w == s.as_bytes()))
        .min()
}

/// Prompt-lookup drafting: the tokens (at most `k`) that followed the latest earlier
/// occurrence of the last `n` tokens of `seq`, for `n` from `ngram` down to `min_n`, and that
/// `n`. Code repeats its prompt's names and lines; empty when nothing repeats.
fn lookup_draft(seq: &[u32], ngram: usize, min_n: usize, k: usize) -> (&[u32], usize) {
    for n in (min_n.max(1)..=ngram).rev() {
        if seq.len() <= n {
            continue;
        }
        let tail = &seq[seq.len() - n..];
        let found = (0..seq.len() - n)
            .rev()
            .find(|&i| &seq[i..i + n] == tail)
            .map(|i| &seq[i + n..(i + n + k).min(seq.len())]);
        if let Some(d) = found.filter(|d| !d.is_empty()) {
            return (d, n);
        }
    }
    (&[], 0)
}

/// What to draft after `tok` (just chosen; `seq` holds the tokens before it): the tokens
/// that followed the last few where they occurred before, for an answer whose pick is the
/// plain argmax (drafts are verified by argmax); none otherwise or without room.
fn draft_after(
    speculation: Option<Speculation>,
    window: usize,
    a: &Answer,
    seq: &mut Vec<u32>,
    tok: u32,
) -> Vec<u32> {
    let Some(sp) = speculation
        .filter(|_| a.req.sampling == Sampling::Greedy && a.matcher.is_none())
        .filter(|_| !(a.req.code_first && a.out.trim_ascii_start().is_empty()))
    else {
        return Vec::new();
    };
    let room = (a.budget - a.resp.tokens.len())
        .min(EXACT_ROWS - 1)
        .min(window.saturating_sub(seq.len() + 1));
    if room == 0 {
        return Vec::new();
    }
    seq.push(tok);
    let (d, matched) = lookup_draft(seq, sp.ngram, 2, room);
    let d = d[..d.len().min(sp.draft_len(matched))].to_vec();
    seq.pop();
    d
}

/// Byte length of the first complete statement of `text` once the text runs past it; `None`
/// while the statement is open or the text ends inside a character.
pub(super) fn statement_end(text: &[u8], lang: Lang) -> Option<usize> {
    let text = std::str::from_utf8(text).ok()?;
    let first = first_statement(text, lang);
    (first.len() < text.len()).then_some(first.len())
}

/// Byte offset of the first line of `text` that starts with code at column `col` or left of
/// it (blank lines don't count); `None` while no such line is known.
pub(super) fn block_end(text: &[u8], col: usize) -> Option<usize> {
    let mut start = 0;
    loop {
        let line = &text[start..];
        let indent = line
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        match line.get(indent) {
            None => return None,
            Some(b'\n' | b'\r') => {}
            Some(_) if indent <= col => return Some(start),
            Some(_) => {}
        }
        start += line.iter().position(|&b| b == b'\n')? + 1;
    }
}

/// `ln softmax(logits)[i]`, computed stably in f64.
fn log_softmax_at(logits: &[f32], i: usize) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[i] as f64 - max - sum.ln()
}

/// The next token: the model's choice if `allowed` (when given) accepts it, else the best
/// accepted one. `None` when it accepts no token.
fn pick(
    logits: &[f32],
    sampling: &Sampling,
    allowed: Option<&dyn Fn(u32) -> bool>,
    rng: &mut StdRng,
) -> Option<u32> {
    match (sampling, allowed) {
        (Sampling::Greedy, None) => Some(argmax(logits)),
        (Sampling::Greedy, Some(ok)) => {
            let first = argmax(logits);
            if ok(first) {
                Some(first)
            } else {
                argmax_where(logits, ok)
            }
        }
        (
            &Sampling::Sample {
                temperature, top_p, ..
            },
            ok,
        ) => {
            let all: Vec<u32> = (0..logits.len() as u32).collect();
            let first = sample(logits, &all, temperature, top_p, rng)?;
            match ok {
                Some(ok) if !ok(first) => {
                    let kept: Vec<u32> = all.into_iter().filter(|&id| ok(id)).collect();
                    sample(logits, &kept, temperature, top_p, rng)
                }
                _ => Some(first),
            }
        }
    }
}

impl CandleLlm {
    /// Loads a model by alias, path or cached hf-hub repo id (see [`resolve`]).
    pub fn load(name: &str, options: &LlmOptions) -> Result<Self, LlmError> {
        let files = resolve(name)?;
        Self::from_files(name, &files, options)
    }

    pub fn from_files(
        name: &str,
        files: &ModelFiles,
        options: &LlmOptions,
    ) -> Result<Self, LlmError> {
        let device = device();
        let model = match files {
            ModelFiles::Gguf { model, .. } => {
                let mut file = std::fs::File::open(model).map_err(|e| LlmError::Load {
                    path: model.clone(),
                    reason: e.to_string(),
                })?;
                let content = read_gguf(model, &mut file)?;
                QwenModel::from_gguf(model, &content, &mut file, &device)?
            }
            ModelFiles::Safetensors {
                config, weights, ..
            } => QwenModel::from_safetensors(config, weights, &device)?,
        };
        let tokenizer = load_tokenizer(files.tokenizer(), model.config().vocab_size)?;
        let token_bytes = TokenBytes::new(&tokenizer, model.config().vocab_size);
        let cache_limit_tokens = options.kv_cache_bytes / model.kv_bytes_per_token().max(1);
        let speculation = options.speculation.filter(|_| model.rows_exact());
        Ok(Self {
            speculation,
            name: name.to_string(),
            model,
            tokenizer,
            token_bytes,
            cached: Vec::new(),
            shelf: Vec::new(),
            cache_limit_tokens,
            prefix_reuse: options.prefix_reuse,
            kv_budget_bytes: options.kv_budget_bytes,
            mixed_prefill: options.mixed_prefill && device.is_cpu(),
            peak_kv_in_flight: 0,
        })
    }

    /// The device the model runs on (CUDA GPU 0 in a `cuda` build).
    pub fn device(&self) -> &Device {
        self.model.device()
    }

    /// Whether decode steps run through our CUDA kernels (see [`QwenModel::has_device_kernels`]).
    pub fn has_device_kernels(&self) -> bool {
        self.model.has_device_kernels()
    }

    /// See [`QwenModel::set_device_kernels`].
    pub fn set_device_kernels(&mut self, on: bool, graphs: bool) {
        self.model.set_device_kernels(on, graphs);
    }

    pub fn config(&self) -> &QwenConfig {
        self.model.config()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn token_bytes(&self) -> &TokenBytes {
        &self.token_bytes
    }

    /// Drops the prefix cache (the next call computes its whole prompt).
    pub fn clear_cache(&mut self) {
        self.model.truncate_kv(0);
        self.cached.clear();
        self.shelf.clear();
    }

    /// The bound on the KV memory of answers decoded together ([`LlmOptions::kv_budget_bytes`]).
    pub fn kv_budget_bytes(&self) -> Option<usize> {
        self.kv_budget_bytes
    }

    /// Most bytes the keys and values of answers decoded together held at once since the last
    /// call (which resets it).
    pub fn take_peak_kv_in_flight(&mut self) -> usize {
        std::mem::take(&mut self.peak_kv_in_flight)
    }

    /// The speculative decoding in use (`None` when off or when this model's several-token
    /// pass is not exact here).
    pub fn speculation(&self) -> Option<Speculation> {
        self.speculation
    }

    /// Turns speculative decoding on or off (where the model allows it, see [`LlmOptions`]).
    pub fn set_speculation(&mut self, speculation: Option<Speculation>) {
        self.speculation = speculation.filter(|_| self.model.rows_exact());
    }

    /// Whether prompts of answers joining a batch are computed inside its decode steps
    /// ([`LlmOptions::mixed_prefill`]).
    pub fn mixed_prefill(&self) -> bool {
        self.mixed_prefill
    }

    /// Turns mixed prefill on (where the model runs on the CPU) or off.
    pub fn set_mixed_prefill(&mut self, on: bool) {
        self.mixed_prefill = on && self.model.device().is_cpu();
    }

    /// Whether several answers decoded together (and drafts verified in one pass) get the
    /// bits one-at-a-time decoding gives ([`QwenModel::rows_exact`]).
    pub fn rows_exact(&self) -> bool {
        self.model.rows_exact()
    }

    /// Tokens currently held by the prefix cache.
    pub fn cached_tokens(&self) -> usize {
        self.cached.len()
    }

    /// The prompt text the model sees.
    pub fn render(&self, prompt: &Prompt) -> Result<String, LlmError> {
        let empty = || Err(LlmError::InvalidRequest("the prompt is empty".into()));
        match prompt {
            Prompt::Text(t) if t.is_empty() => empty(),
            Prompt::Text(t) => Ok(t.clone()),
            Prompt::Chat(msgs) if msgs.iter().all(|m| m.content.trim().is_empty()) => empty(),
            Prompt::Chat(msgs) => {
                let system =
                    (self.model.config().arch == Arch::Qwen2).then_some(QWEN2_DEFAULT_SYSTEM);
                Ok(chatml(msgs, system))
            }
            Prompt::Fim { prefix, suffix } if prefix.is_empty() && suffix.is_empty() => empty(),
            Prompt::Fim { prefix, suffix } => Ok(fim_prompt(prefix, suffix)),
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| LlmError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Benchmark helper: from a cold cache, prefills `prompt` and then decodes `new_tokens`
    /// greedy tokens regardless of stop tokens. Returns (prefill ms, decode ms).
    pub fn time_prefill_decode(
        &mut self,
        prompt: &[u32],
        new_tokens: usize,
    ) -> Result<(f64, f64), LlmError> {
        if prompt.is_empty() || prompt.len() + new_tokens > self.model.config().context_length {
            return Err(LlmError::InvalidRequest(format!(
                "benchmark needs 1..{} prompt + new tokens",
                self.model.config().context_length
            )));
        }
        self.clear_cache();
        let start = Instant::now();
        let mut logits: Vec<f32> = self
            .model
            .forward(prompt, false)?
            .flatten_all()?
            .to_vec1()?;
        let prefill = start.elapsed().as_secs_f64() * 1e3;
        let start = Instant::now();
        for _ in 0..new_tokens {
            let tok = argmax(&logits);
            logits = self
                .model
                .forward(&[tok], false)?
                .flatten_all()?
                .to_vec1()?;
        }
        let decode = start.elapsed().as_secs_f64() * 1e3;
        self.clear_cache();
        Ok((prefill, decode))
    }

    /// Whether `id` may come next under `matcher`: special tokens only once the answer is
    /// complete (they end it), others if the automaton accepts their bytes.
    fn allowed(&self, matcher: &Matcher, id: u32) -> bool {
        if self.token_bytes.is_special(id) {
            matcher.is_final()
        } else {
            matcher.accepts(self.token_bytes.get(id))
        }
    }

    /// Checks `req` and renders and encodes its prompt. `Begun::Done` when the answer needs
    /// no model (a constraint with a single answer).
    fn begin(&self, req: &GenerateRequest) -> Result<Begun, LlmError> {
        if req.max_new_tokens == 0 {
            return Err(LlmError::InvalidRequest(
                "max_new_tokens must be at least 1".into(),
            ));
        }
        let matcher = req.constraint.as_ref().map(Matcher::new).transpose()?;
        let ids = self.encode(&self.render(&req.prompt)?)?;
        if ids.is_empty() {
            return Err(LlmError::InvalidRequest("the prompt is empty".into()));
        }
        let window = self.model.config().context_length;
        if ids.len() >= window {
            return Err(LlmError::PromptTooLong {
                tokens: ids.len(),
                window,
                model: self.name.clone(),
            });
        }
        let mut resp = GenerateResponse {
            prompt_tokens: ids.len(),
            ..GenerateResponse::new(String::new(), FinishReason::Constraint)
        };
        if let Some(only) = matcher.as_ref().and_then(|m| m.single_answer()) {
            resp.text = only.to_string();
            return Ok(Begun::Done(resp));
        }
        let seed = match req.sampling {
            Sampling::Sample { seed, .. } => seed,
            Sampling::Greedy => 0,
        };
        let answer = Answer {
            req: req.clone(),
            matcher,
            out: Vec::new(),
            budget: req.max_new_tokens.min(window - ids.len()),
            rng: StdRng::seed_from_u64(seed),
            logits: Vec::new(),
            best: None,
            resp,
            decode_start: Instant::now(),
        };
        Ok(Begun::Prompt(ids, Box::new(answer)))
    }

    /// Chooses the answer's next token from its logits and adds it: `Feed` when decoding goes
    /// on with that token, `Done` when the answer ended.
    fn choose(&self, a: &mut Answer) -> Step {
        let t = Instant::now();
        let req = &a.req;
        let aside_lang = a.aside_rule();
        let matcher = &a.matcher;
        let rule = |id: u32| match (matcher, aside_lang) {
            (Some(m), _) => self.allowed(m, id),
            (None, Some(lang)) => {
                self.token_bytes.is_special(id) || !opens_aside(self.token_bytes.get(id), lang)
            }
            (None, None) => true,
        };
        let restricted = matcher.is_some() || aside_lang.is_some();
        let next = match a.best.take() {
            Some(best) => Some(best),
            None => pick(
                &a.logits,
                &req.sampling,
                restricted.then_some(&rule as &dyn Fn(u32) -> bool),
                &mut a.rng,
            ),
        };
        if a.matcher.is_some() {
            a.resp.constraint_ms += t.elapsed().as_secs_f64() * 1e3;
        }
        let Some(tok) = next else {
            // Only a tokenizer unable to spell the answer gets here; close it anyway.
            if let Some(m) = &a.matcher {
                a.out.extend(m.shortest_completion());
            }
            return Step::Done(FinishReason::Constraint);
        };
        match self.take(a, tok) {
            Some(end) => Step::Done(end),
            None => Step::Feed(tok),
        }
    }

    /// Adds the chosen token `tok` to the answer; `Some` when the answer ends with it (a
    /// special token, the constraint complete, a stop string, the first statement, or the
    /// token budget), the text already cut.
    fn take(&self, a: &mut Answer, tok: u32) -> Option<FinishReason> {
        if self.token_bytes.is_special(tok) {
            return Some(if a.matcher.is_some() {
                FinishReason::Constraint
            } else {
                FinishReason::Stop
            });
        }
        a.resp.tokens.push(tok);
        a.out.extend_from_slice(self.token_bytes.get(tok));
        if let Some(m) = &mut a.matcher {
            m.consume(self.token_bytes.get(tok));
            if m.is_final() && !m.can_continue() {
                return Some(FinishReason::Constraint);
            }
        } else if let Some(cut) = find_stop(&a.out, &a.req.stop) {
            a.out.truncate(cut);
            return Some(FinishReason::Stop);
        } else if let Some(cut) = a
            .req
            .until_statement
            .and_then(|lang| statement_end(&a.out, lang))
        {
            a.out.truncate(cut);
            return Some(FinishReason::Stop);
        } else if let Some(cut) = a.req.until_dedent.and_then(|col| block_end(&a.out, col)) {
            a.out.truncate(cut);
            return Some(FinishReason::Stop);
        }
        if a.resp.tokens.len() >= a.budget {
            if let Some(m) = &a.matcher {
                a.out.extend(m.shortest_completion());
            }
            return Some(FinishReason::Length);
        }
        None
    }

    /// Computes the prompt `ids` in the model's own cache, past the prefix it shares with
    /// them (at least the last token is computed: its logits start the answer). Sets the
    /// answer's first logits and prefill accounting.
    fn prefill(&mut self, ids: &[u32], a: &mut Answer) -> Result<(), LlmError> {
        let start = Instant::now();
        let (logits, reuse) = self.compute_prompt(ids)?;
        a.prefilled(logits, reuse, start)
    }

    /// Computes `ids` in the model's own cache past the prefix it already holds (at least the
    /// last token, whose logits are returned), with how many tokens were reused.
    fn compute_prompt(&mut self, ids: &[u32]) -> Result<(candle_core::Tensor, usize), LlmError> {
        let reuse = if self.prefix_reuse {
            self.take_best_prefix(ids)?.min(ids.len() - 1)
        } else {
            0
        };
        self.model.truncate_kv(reuse);
        self.cached.truncate(reuse);
        let logits = self.model.forward(&ids[reuse..], false)?;
        self.cached.extend_from_slice(&ids[reuse..]);
        Ok((logits, reuse))
    }

    /// Gives the model's own cache the earlier sequence that shares the longest prefix with
    /// `ids`, and returns that length. The sequence it held goes on the shelf when the switch,
    /// or cutting it back to the shared part, would lose most of it.
    fn take_best_prefix(&mut self, ids: &[u32]) -> Result<usize, LlmError> {
        let own = common_prefix(&self.cached, ids);
        let shelved = (self.shelf.iter().enumerate())
            .map(|(i, (tokens, _))| (common_prefix(tokens, ids), i))
            .filter(|&(n, _)| n > own)
            .max_by_key(|&(n, _)| n);
        let (tokens, mut kv, reuse) = match shelved {
            Some((n, i)) => {
                let (tokens, kv) = self.shelf.remove(i);
                (tokens, kv, n)
            }
            None if !shares_most(&self.cached, ids) => {
                (ids[..own].to_vec(), self.model.copy_kv_prefix(own)?, own)
            }
            None => return Ok(own),
        };
        self.model.swap_kv(&mut kv);
        let old = std::mem::replace(&mut self.cached, tokens);
        self.shelve(old, kv);
        Ok(reuse)
    }

    /// Keeps `tokens`, whose keys and values `kv` holds, for their prefixes (until
    /// [`CandleLlm::keep_within_limit`] needs the room), unless the model's own sequence
    /// shares most of it. A shelved sequence that shares most of its tokens with `tokens`
    /// (the same prompt with another answer) gives way to it.
    fn shelve(&mut self, tokens: Vec<u32>, mut kv: KvCache) {
        if tokens.is_empty()
            || !self.prefix_reuse
            || kv.len() < tokens.len()
            || shares_most(&tokens, &self.cached)
        {
            return;
        }
        self.shelf.retain(|(t, _)| !shares_most(t, &tokens));
        // Only what it holds: an answer's cache was sized for its whole token budget.
        if kv.shrink(tokens.len()).is_ok() {
            self.shelf.push((tokens, kv));
        }
    }

    /// A cache of its own for the prompt `ids`: a copy of the longest prefix it shares with
    /// the model's cache, a shelved sequence, or one of `others` (sequences in flight: samples
    /// of one prompt compute it once), with that prefix's length.
    fn prefix_apart<T>(
        &self,
        ids: &[u32],
        others: &[Live<T>],
    ) -> Result<(KvCache, usize), LlmError> {
        let (reuse, donor) = if self.prefix_reuse {
            let own = common_prefix(&self.cached, ids);
            let in_flight = others
                .iter()
                .map(|l| (common_prefix(&l.tokens, ids), &l.kv));
            let shelved = (self.shelf.iter()).map(|(t, kv)| (common_prefix(t, ids), kv));
            let donor = in_flight
                .chain(shelved)
                .filter(|&(n, _)| n > own)
                .max_by_key(|&(n, _)| n);
            (donor.map_or(own, |(n, _)| n).min(ids.len() - 1), donor)
        } else {
            (0, None)
        };
        let kv = match donor {
            Some((_, kv)) => kv.copy_prefix(reuse)?,
            None => self.model.copy_kv_prefix(reuse)?,
        };
        Ok((kv, reuse))
    }

    /// Computes the prompt `ids` into a cache of its own (see [`CandleLlm::prefix_apart`]).
    fn prefill_apart<T>(
        &mut self,
        ids: &[u32],
        a: &mut Answer,
        others: &[Live<T>],
    ) -> Result<KvCache, LlmError> {
        let start = Instant::now();
        let (mut kv, reuse) = self.prefix_apart(ids, others)?;
        self.model.swap_kv(&mut kv);
        let logits = self.model.forward(&ids[reuse..], false);
        self.model.swap_kv(&mut kv);
        a.prefilled(logits?, reuse, start)?;
        Ok(kv)
    }

    fn run(&mut self, req: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        let (ids, mut a) = match self.begin(req)? {
            Begun::Done(resp) => return Ok(resp),
            Begun::Prompt(ids, a) => (ids, *a),
        };
        self.prefill(&ids, &mut a)?;
        a.decode_start = Instant::now();
        let window = self.model.config().context_length;
        let finish = 'answer: loop {
            let tok = match self.choose(&mut a) {
                Step::Done(end) => break end,
                Step::Feed(tok) => tok,
            };
            let draft = draft_after(self.speculation, window, &a, &mut self.cached, tok);
            if draft.is_empty() {
                a.set_logits(&self.model.forward(&[tok], false)?)?;
                self.cached.push(tok);
                continue;
            }
            let mut batch = Vec::with_capacity(draft.len() + 1);
            batch.push(tok);
            batch.extend_from_slice(&draft);
            let mut rows: Vec<Vec<f32>> = self.model.forward(&batch, true)?.to_vec2()?;
            // Row j is what decode would see after batch[..=j]: a drafted token stands if it is
            // what greedy decoding would pick there.
            let agreed = draft
                .iter()
                .zip(&rows)
                .take_while(|(d, row)| argmax(row) == **d)
                .count();
            self.cached.extend_from_slice(&batch[..=agreed]);
            self.model.truncate_kv(self.cached.len());
            a.resp.drafted_tokens += draft.len();
            a.resp.accepted_tokens += agreed;
            a.logits = rows.swap_remove(agreed);
            for &d in &draft[..agreed] {
                if let Some(end) = self.take(&mut a, d) {
                    break 'answer end;
                }
            }
        };
        let resp = a.finish(finish);
        self.keep_within_limit()?;
        Ok(resp)
    }

    /// Cuts the prefix cache to what it may keep between calls: the model's own sequence
    /// first, then the shelved ones, newest first, in the room left.
    fn keep_within_limit(&mut self) -> Result<(), LlmError> {
        let limit = self.cache_limit_tokens;
        if self.cached.len() > limit {
            self.cached.truncate(limit);
        }
        self.model.shrink_kv(limit)?;
        let mut held = self.cached.len() + self.shelf.iter().map(|(t, _)| t.len()).sum::<usize>();
        while held > limit && !self.shelf.is_empty() {
            held -= self.shelf.remove(0).0.len();
        }
        Ok(())
    }

    /// [`Llm::generate_batch`]: the prompts are computed one after another (reusing the
    /// prefix cache like [`Llm::generate`], or the prompt of an earlier request of the batch;
    /// with mixed prefill, inside the decode steps of the answers already going); the answers
    /// decode together, up to [`QwenModel::batch_rows`] of them sharing each pass over the
    /// weights, which is where decode time goes, each with its drafts where speculation is on.
    /// Where the model's several-row pass is exact ([`QwenModel::rows_exact`]) each answer is
    /// the one `generate` gives, token for token. A request that fails (bad input) fails
    /// alone; an inference error fails the answers in flight.
    fn batch(&mut self, reqs: &[GenerateRequest]) -> Vec<Result<GenerateResponse, LlmError>> {
        let mut results: Vec<Option<Result<GenerateResponse, LlmError>>> =
            reqs.iter().map(|_| None).collect();
        let mut live = Vec::new();
        let mut waiting: VecDeque<(usize, &GenerateRequest, usize)> = reqs
            .iter()
            .enumerate()
            .map(|(i, r)| (i, r, self.kv_need(r)))
            .collect();
        let mut first = true;
        while !(live.is_empty() && waiting.is_empty()) {
            while let Some(&(i, req, _)) = waiting.front().filter(|w| self.fits(&live, w.2)) {
                waiting.pop_front();
                if let Some((i, result)) = self.admit(&mut live, req, i) {
                    results[i] = Some(result);
                }
            }
            if std::mem::take(&mut first) {
                // The first ones start decoding together: their decode time leaves out the
                // later prompts.
                let now = Instant::now();
                for l in &mut live {
                    l.answer.decode_start = now;
                }
            }
            for (i, result) in self.advance(&mut live) {
                results[i] = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every request answered"))
            .collect()
    }

    /// Starts answering `req` beside the answers in `live`: its prompt is computed by the next
    /// decode steps ([`LlmOptions::mixed_prefill`]) or now, on its own, and it decodes with
    /// them once computed. Returns the result of a request that needs no decoding (refused,
    /// or answered without the model).
    pub(super) fn admit<T>(
        &mut self,
        live: &mut Vec<Live<T>>,
        req: &GenerateRequest,
        tag: T,
    ) -> Option<(T, Result<GenerateResponse, LlmError>)> {
        let begun = match self.begin(req) {
            Ok(Begun::Prompt(ids, answer)) => (ids, answer),
            Ok(Begun::Done(resp)) => return Some((tag, Ok(resp))),
            Err(e) => return Some((tag, Err(e))),
        };
        let (ids, mut answer) = begun;
        // Sized once for the whole answer: growing by doubling would copy it and could hold
        // twice what it needs.
        let positions = ids.len() + answer.budget;
        if self.mixed_prefill {
            // Its prompt is computed by the decode steps, from when it is first in line.
            live.push(Live {
                tag,
                answer: *answer,
                kv: KvCache::default(),
                tokens: Vec::new(),
                pending: ids,
                prefill: None,
                reserved: positions * self.model.kv_bytes_per_token(),
                finished: None,
            });
            return None;
        }
        let prefilled = self
            .prefill_apart(&ids, &mut answer, live)
            .and_then(|mut kv| {
                kv.fit(positions)?;
                Ok(kv)
            });
        match prefilled {
            Ok(kv) => {
                answer.decode_start = Instant::now();
                live.push(Live {
                    tag,
                    answer: *answer,
                    kv,
                    tokens: ids,
                    pending: Vec::new(),
                    prefill: None,
                    reserved: 0,
                    finished: None,
                });
                self.peak_kv_in_flight = self.peak_kv_in_flight.max(kv_held(live));
                None
            }
            Err(e) => Some((tag, Err(e))),
        }
    }

    /// The KV bytes `req` would hold at most: its prompt and token budget (0 without a
    /// [`LlmOptions::kv_budget_bytes`], which is all it is for). Computed once per request:
    /// it tokenizes the prompt.
    pub(super) fn kv_need(&self, req: &GenerateRequest) -> usize {
        if self.kv_budget_bytes.is_none() {
            return 0;
        }
        // A prompt that cannot be read fails when admitted; it takes no room.
        let prompt = self.count_tokens(&req.prompt).unwrap_or(0);
        let window = self.model.config().context_length;
        (prompt + req.max_new_tokens).min(window) * self.model.kv_bytes_per_token()
    }

    /// Whether an answer needing `need` bytes ([`CandleLlm::kv_need`]) may start beside
    /// `live` within the budget. Always when nothing is in flight.
    pub(super) fn fits<T>(&self, live: &[Live<T>], need: usize) -> bool {
        let Some(budget) = self.kv_budget_bytes else {
            return true;
        };
        live.is_empty() || kv_held(live) + need <= budget
    }

    /// One decode step of the answers in `live`; those that end leave it, with their results.
    /// The first answer whose prompt is not computed yet computes a chunk of it in the same
    /// pass (all of it when nothing decodes). The keys and values of an answer that ends
    /// become the prefix cache, as after a `generate` call. An inference error ends every
    /// answer in flight.
    pub(super) fn advance<T>(
        &mut self,
        live: &mut Vec<Live<T>>,
    ) -> Vec<(T, Result<GenerateResponse, LlmError>)> {
        let mut done = Vec::new();
        let mut feeds = Vec::with_capacity(live.len());
        let mut j = 0;
        while j < live.len() {
            if !live[j].pending.is_empty() {
                feeds.push(Vec::new());
                j += 1;
                continue;
            }
            let step = match live[j].finished.take() {
                Some(end) => Step::Done(end),
                None => self.choose(&mut live[j].answer),
            };
            match step {
                Step::Feed(tok) => {
                    let window = self.model.config().context_length;
                    let l = &mut live[j];
                    let mut feed = vec![tok];
                    feed.extend(draft_after(
                        self.speculation,
                        window,
                        &l.answer,
                        &mut l.tokens,
                        tok,
                    ));
                    feeds.push(feed);
                    j += 1;
                }
                Step::Done(end) => {
                    let mut l = live.remove(j);
                    done.push((l.tag, Ok(l.answer.finish(end))));
                    self.model.swap_kv(&mut l.kv);
                    let earlier = std::mem::replace(&mut self.cached, l.tokens);
                    self.shelve(earlier, l.kv);
                    if let Err(e) = self.keep_within_limit() {
                        eprintln!("warning: the prefix cache could not be shrunk ({e}); cleared");
                        self.clear_cache();
                    }
                }
            }
        }
        if let Some(i) = live.iter().position(|l| !l.pending.is_empty()) {
            let started = match live[i].prefill {
                Some(_) => Ok(()),
                None => self.start_prompt(live, i),
            };
            match started {
                Ok(()) => {
                    let decoding = feeds.iter().any(|f| !f.is_empty());
                    let pending = &live[i].pending;
                    let take = if decoding {
                        PREFILL_CHUNK
                    } else {
                        pending.len()
                    };
                    feeds[i] = pending[..take.min(pending.len())].to_vec();
                }
                Err(e) => {
                    let l = live.remove(i);
                    feeds.remove(i);
                    done.push((l.tag, Err(e)));
                }
            }
        }
        let stepped = self.step(live, &feeds);
        self.peak_kv_in_flight = self.peak_kv_in_flight.max(kv_held(live));
        if let Err(e) = stepped {
            let message = e.to_string();
            for l in live.drain(..) {
                let e = candle_core::Error::Msg(message.clone());
                done.push((l.tag, Err(LlmError::Inference(e))));
            }
        }
        done
    }

    /// Gives `live[i]`, whose prompt waits in `pending`, its own cache: the longest prefix
    /// it shares with the prefix cache or an answer in flight (see
    /// [`CandleLlm::prefix_apart`]), sized for its prompt and budget; the rest stays pending.
    fn start_prompt<T>(&mut self, live: &mut [Live<T>], i: usize) -> Result<(), LlmError> {
        let start = Instant::now();
        let positions = live[i].pending.len() + live[i].answer.budget;
        let (mut kv, reuse) = self.prefix_apart(&live[i].pending, live)?;
        kv.fit(positions)?;
        let l = &mut live[i];
        l.kv = kv;
        l.tokens = l.pending.drain(..reuse).collect();
        l.prefill = Some((reuse, start));
        self.peak_kv_in_flight = self.peak_kv_in_flight.max(kv_held(live));
        Ok(())
    }

    /// One pass of the live answers that `feeds` gives tokens: `feeds[i]` extends `live[i]`
    /// (a decoded token, or the next chunk of its prompt), in passes of at most
    /// [`QwenModel::batch_rows`] sequences.
    fn step<T>(&mut self, live: &mut [Live<T>], feeds: &[Vec<u32>]) -> Result<(), LlmError> {
        let rows = self.model.batch_rows();
        let mut fed: Vec<(&mut Live<T>, &Vec<u32>)> = live
            .iter_mut()
            .zip(feeds)
            .filter(|(_, f)| !f.is_empty())
            .collect();
        for chunk in fed.chunks_mut(rows) {
            let toks: Vec<u32> = chunk.iter().flat_map(|(_, f)| f.iter().copied()).collect();
            let spans: Vec<usize> = chunk.iter().map(|(_, f)| f.len()).collect();
            // Logits for every row of an answer that decodes (its token and any draft) and
            // for a prompt's last chunk.
            let wants: Vec<bool> = chunk
                .iter()
                .map(|(l, f)| l.pending.len() == f.len() || l.pending.is_empty())
                .collect();
            let decoding: Vec<bool> = chunk.iter().map(|(l, _)| l.pending.is_empty()).collect();
            let decode_only = decoding.iter().all(|&d| d) && spans.len() == toks.len();
            let mut caches: Vec<&mut KvCache> = chunk.iter_mut().map(|(l, _)| &mut l.kv).collect();
            let logits = if decode_only {
                self.model.forward_batch(&mut caches, &toks)?
            } else {
                let mut rows = Vec::new();
                let mut end = 0;
                for ((&span, &want), &decodes) in spans.iter().zip(&wants).zip(&decoding) {
                    end += span;
                    if decodes {
                        rows.extend(end - span..end);
                    } else if want {
                        rows.push(end - 1);
                    }
                }
                match self
                    .model
                    .forward_spans(&mut caches, &toks, &spans, &rows)?
                {
                    Some(logits) => logits,
                    // A prompt's chunk alone, not its last: nothing to read yet.
                    None => {
                        let (l, f) = &mut chunk[0];
                        l.tokens.extend_from_slice(f);
                        l.pending.drain(..f.len());
                        continue;
                    }
                }
            };
            // On a GPU the rows stay there: greedy answers take their argmax, others a copy.
            let best: Option<Vec<u32>> = match logits.device() {
                Device::Cpu => None,
                _ => Some(logits.argmax(candle_core::D::Minus1)?.to_vec1()?),
            };
            let mut row = 0;
            for ((l, f), want) in chunk.iter_mut().zip(wants) {
                let at = row;
                if !l.pending.is_empty() {
                    row += usize::from(want);
                    l.tokens.extend_from_slice(f);
                    l.pending.drain(..f.len());
                    if want {
                        let (reuse, start) = l.prefill.expect("a prompt in progress was started");
                        l.answer.prefilled(logits.get(at)?, reuse, start)?;
                        l.answer.decode_start = Instant::now();
                        // Sized for the answer now that its buffers exist (a prompt that
                        // started from nothing grew them chunk by chunk).
                        l.kv.fit(l.tokens.len() + l.answer.budget)?;
                    }
                    continue;
                }
                row += f.len();
                if f.len() > 1 {
                    self.verify(l, f, &logits.narrow(0, at, f.len())?.to_vec2()?);
                    continue;
                }
                match &best {
                    Some(best) if l.answer.plain_greedy() => l.answer.best = Some(best[at]),
                    _ => l.answer.logits = logits.get(at)?.to_vec1()?,
                }
                l.tokens.push(f[0]);
            }
        }
        Ok(())
    }

    /// Keeps what the pass over `fed` (a chosen token, then a draft) agreed with: row j of
    /// `rows` is what decode would see after `fed[..=j]`, so a drafted token stands while it is
    /// the argmax there. The rest leave the answer's cache; an answer that ends on an accepted
    /// token is marked finished.
    fn verify<T>(&self, l: &mut Live<T>, fed: &[u32], rows: &[Vec<f32>]) {
        let draft = &fed[1..];
        let agreed = draft
            .iter()
            .zip(rows)
            .take_while(|(d, row)| argmax(row) == **d)
            .count();
        l.tokens.extend_from_slice(&fed[..=agreed]);
        l.kv.truncate(l.tokens.len());
        let a = &mut l.answer;
        a.resp.drafted_tokens += draft.len();
        a.resp.accepted_tokens += agreed;
        a.logits = rows[agreed].clone();
        for &d in &draft[..agreed] {
            if let Some(end) = self.take(a, d) {
                l.finished = Some(end);
                break;
            }
        }
    }
}

/// One answer being decoded: its request, constraint state, text and accounting.
struct Answer {
    req: GenerateRequest,
    matcher: Option<Matcher>,
    out: Vec<u8>,
    resp: GenerateResponse,
    /// Most tokens it may generate (the request's, within the context window).
    budget: usize,
    rng: StdRng,
    /// The model's logits for the next token, unless `best` stands for them.
    logits: Vec<f32>,
    /// The next token's argmax, taken on the GPU for a greedy answer nothing restricts (its
    /// logits were not copied to the host).
    best: Option<u32>,
    /// When decoding began (the prompt computed).
    decode_start: Instant,
}

impl Answer {
    /// Takes the prompt's last logits; `reuse` prompt tokens came from a cache, and the prompt
    /// was being computed since `start`.
    fn prefilled(
        &mut self,
        logits: candle_core::Tensor,
        reuse: usize,
        start: Instant,
    ) -> Result<(), LlmError> {
        self.set_logits(&logits)?;
        self.resp.cached_prompt_tokens = reuse;
        self.resp.prefill_ms = start.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// Until the answer has a non-blank byte, `code_first` keeps asides out of it: the
    /// language whose asides are refused now, if any.
    fn aside_rule(&self) -> Option<Lang> {
        self.req
            .until_statement
            .filter(|_| self.req.code_first && self.out.trim_ascii_start().is_empty())
    }

    /// Whether the next token is the plain argmax of the logits: greedy, no constraint or
    /// aside rule to overrule it.
    fn plain_greedy(&self) -> bool {
        self.req.sampling == Sampling::Greedy
            && self.matcher.is_none()
            && self.aside_rule().is_none()
    }

    /// Takes the logits `(1, vocab)` of the next token: on a GPU, only their argmax where
    /// that is the pick (a ~600 KB copy and a host pass over the vocabulary less per token).
    fn set_logits(&mut self, logits: &candle_core::Tensor) -> Result<(), LlmError> {
        let row = logits.flatten_all()?;
        if !row.device().is_cpu() && self.plain_greedy() {
            self.best = Some(row.argmax(0)?.to_scalar()?);
        } else {
            self.logits = row.to_vec1()?;
        }
        Ok(())
    }

    /// The response, with its decode time.
    fn finish(mut self, finish: FinishReason) -> GenerateResponse {
        self.resp.decode_ms = self.decode_start.elapsed().as_secs_f64() * 1e3;
        self.resp.generated_tokens = self.resp.tokens.len();
        self.resp.finish_reason = finish;
        self.resp.text = String::from_utf8_lossy(&self.out).into_owned();
        self.resp
    }
}

enum Begun {
    /// Answered without the model.
    Done(GenerateResponse),
    /// The prompt's tokens and the answer to decode.
    Prompt(Vec<u32>, Box<Answer>),
}

enum Step {
    Feed(u32),
    Done(FinishReason),
}

/// Bytes the keys and values of the answers in `live` hold, or will once their prompt starts.
fn kv_held<T>(live: &[Live<T>]) -> usize {
    live.iter()
        .map(|l| {
            if l.pending.is_empty() {
                l.kv.bytes()
            } else {
                l.kv.bytes().max(l.reserved)
            }
        })
        .sum()
}

/// An answer of a batch in flight, with its own keys and values and the tokens they hold;
/// `tag` tells whose it is.
pub(super) struct Live<T> {
    tag: T,
    answer: Answer,
    kv: KvCache,
    /// The tokens whose keys and values `kv` holds.
    tokens: Vec<u32>,
    /// Prompt tokens not computed yet (mixed prefill); it decodes once none are left.
    pending: Vec<u32>,
    /// Once its prompt started: the prompt tokens reused from a prefix, and when it started.
    prefill: Option<(usize, Instant)>,
    /// The KV bytes it will hold (prompt and budget), counted before its prompt starts.
    reserved: usize,
    /// How it ended on an accepted drafted token, before its next step.
    finished: Option<FinishReason>,
}

impl<T> Live<T> {
    pub(super) fn tag(&self) -> &T {
        &self.tag
    }
}

impl Llm for CandleLlm {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        let result = self.run(request);
        if matches!(result, Err(LlmError::Inference(_))) {
            // The KV state may be half-written; start the next call cold.
            self.clear_cache();
        }
        result
    }

    fn generate_batch(
        &mut self,
        requests: &[GenerateRequest],
    ) -> Vec<Result<GenerateResponse, LlmError>> {
        self.batch(requests)
    }

    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
        Ok(self.encode(&self.render(prompt)?)?.len())
    }

    fn score(&mut self, prompt: &Prompt, continuation: &str) -> Result<Scored, LlmError> {
        let ids = self.encode(&self.render(prompt)?)?;
        let cont = self.encode(continuation)?;
        if ids.is_empty() || cont.is_empty() {
            return Err(LlmError::InvalidRequest(
                "scoring needs a prompt and a continuation".into(),
            ));
        }
        let window = self.model.config().context_length;
        if ids.len() + cont.len() > window {
            return Err(LlmError::PromptTooLong {
                tokens: ids.len() + cont.len(),
                window,
                model: self.name.clone(),
            });
        }
        // The prompt's last logits predict the first token; the continuation's own rows
        // (all but its last token) predict the rest.
        let (last, _) = self.compute_prompt(&ids)?;
        let mut rows: Vec<Vec<f32>> = vec![last.flatten_all()?.to_vec1()?];
        if cont.len() > 1 {
            let rest = self.model.forward(&cont[..cont.len() - 1], true)?;
            self.cached.extend_from_slice(&cont[..cont.len() - 1]);
            rows.extend(rest.to_vec2::<f32>()?);
        }
        let logprob = rows
            .iter()
            .zip(&cont)
            .map(|(row, &tok)| log_softmax_at(row, tok as usize))
            .sum();
        Ok(Scored {
            logprob,
            prompt_tokens: ids.len(),
            tokens: cont.len(),
        })
    }

    fn context_window(&self) -> usize {
        self.model.config().context_length
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_cut_at_the_earliest() {
        let stops = vec!["\n\n".to_string(), "```".to_string(), String::new()];
        assert_eq!(find_stop(b"def f():\n```\n\n", &stops), Some(9));
        assert_eq!(find_stop(b"abc", &stops), None);
    }

    #[test]
    fn a_statement_ends_once_the_text_runs_past_it() {
        assert_eq!(statement_end(b"x = f(a,", Lang::Python), None);
        assert_eq!(statement_end(b"x = f(a,\n  b)", Lang::Python), None);
        assert_eq!(statement_end(b"x = f(a,\n  b)\ny", Lang::Python), Some(13));
        assert_eq!(
            statement_end(b"\n# note\nreturn x\n", Lang::Python),
            Some(16)
        );
        assert_eq!(statement_end(b"int a = 1;\n", Lang::Java), Some(10));
        // Cut inside a character: wait for the rest of it.
        assert_eq!(
            statement_end(&"x = 'é'\n".as_bytes()[..6], Lang::Python),
            None
        );
    }

    #[test]
    fn a_block_ends_at_the_first_line_back_at_its_column() {
        let body = b"        x = 1\n\n        if x:\n            y()\n";
        // Still inside: blank lines and deeper lines; an indentation alone decides nothing.
        assert_eq!(block_end(body, 4), None);
        assert_eq!(block_end(b"        x = 1\n    ", 4), None);
        // Code at the header's column or left of it ends the body there.
        let mut next = body.to_vec();
        next.extend_from_slice(b"    def g(self):");
        assert_eq!(block_end(&next, 4), Some(body.len()));
        assert_eq!(block_end(b"    x = 1\ny = 2", 0), Some(10));
        // A first line already back at the column: the body is empty.
        assert_eq!(block_end(b"    @property", 4), Some(0));
    }

    #[test]
    fn drafts_follow_the_latest_earlier_occurrence_of_the_longest_tail() {
        // `7 8` occurred twice: the later one's continuation is drafted, at most k tokens.
        assert_eq!(
            lookup_draft(&[7, 8, 1, 7, 8, 2, 3, 4, 7, 8], 3, 1, 2),
            (&[2, 3][..], 2)
        );
        // `5 7 8` occurred before: the 3-token tail wins over the later `7 8`.
        assert_eq!(
            lookup_draft(&[5, 7, 8, 9, 7, 8, 2, 5, 7, 8], 3, 1, 8),
            (&[9, 7, 8, 2, 5, 7, 8][..], 3)
        );
        // A repeat of the last token alone counts only when `min_n` allows it.
        assert_eq!(lookup_draft(&[4, 6, 5, 4], 3, 1, 2), (&[6, 5][..], 1));
        assert_eq!(lookup_draft(&[4, 6, 5, 4], 3, 2, 2), (&[][..], 0));
        // Nothing repeats; too short.
        assert!(lookup_draft(&[1, 2, 3], 3, 1, 4).0.is_empty());
        assert!(lookup_draft(&[1], 3, 1, 4).0.is_empty());
    }

    #[test]
    fn longer_repeated_tails_draft_more() {
        let sp = Speculation::default();
        let lens: Vec<usize> = (0..=6).map(|m| sp.draft_len(m)).collect();
        assert_eq!(lens, vec![0, 0, 1, 3, sp.draft, sp.draft, sp.draft]);
        assert!(sp.draft < EXACT_ROWS);
        let short = Speculation { draft: 2, ngram: 4 };
        assert_eq!(short.draft_len(3), 2);
    }

    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
    }
}
