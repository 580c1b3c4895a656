//! The candle implementation of [`Llm`]: prompt rendering, prefill with prefix-cache reuse,
//! the decode loop with stops and constraints, and token accounting.

use std::time::Instant;

use candle_core::Device;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokenizers::Tokenizer;

use super::constraint::Matcher;
use super::load::{load_tokenizer, read_gguf, resolve, ModelFiles};
use super::qwen::{argmax, Arch, QwenConfig, QwenModel};
use super::sample::{argmax_where, sample};
use super::token_bytes::TokenBytes;
use super::{chatml, fim_prompt};
use super::{FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError, Prompt, Sampling};
use crate::repo::lang::lexical::first_statement;
use crate::repo::model::Lang;

/// Qwen2.5's chat template inserts this when the messages carry no system message.
const QWEN2_DEFAULT_SYSTEM: &str =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// Engine settings.
#[derive(Debug, Clone)]
pub struct LlmOptions {
    /// Memory the prefix KV cache may keep between calls (default 512 MiB: about 9,000
    /// tokens of Qwen2.5-1.5B). A longer sequence is cut to its first tokens after the call.
    pub kv_cache_bytes: usize,
}

impl Default for LlmOptions {
    fn default() -> Self {
        Self {
            kv_cache_bytes: 512 << 20,
        }
    }
}

/// A Qwen model run through candle, with one prefix-cache slot: the KV state of the last
/// call's prompt and answer. A call reuses the longest common token prefix with it and
/// computes only the rest. Not `Sync`-shared: wrap in a `Mutex` to use from several threads.
pub struct CandleLlm {
    name: String,
    model: QwenModel,
    tokenizer: Tokenizer,
    token_bytes: TokenBytes,
    /// Tokens whose keys and values the model holds, in order.
    cached: Vec<u32>,
    cache_limit_tokens: usize,
}

/// CUDA GPU 0 in a `cuda` build, else the CPU. A `cuda` build on a machine whose GPU can't
/// be opened says why and runs on the CPU rather than failing.
fn device() -> Device {
    #[cfg(feature = "cuda")]
    {
        match Device::new_cuda(0) {
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

/// Byte offset of the earliest caller stop string in `text`.
fn find_stop(text: &[u8], stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.windows(s.len()).position(|w| w == s.as_bytes()))
        .min()
}

/// Byte length of the first complete statement of `text` once the text runs past it; `None`
/// while the statement is open or the text ends inside a character.
fn statement_end(text: &[u8], lang: Lang) -> Option<usize> {
    let text = std::str::from_utf8(text).ok()?;
    let first = first_statement(text, lang);
    (first.len() < text.len()).then_some(first.len())
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
        Ok(Self {
            name: name.to_string(),
            model,
            tokenizer,
            token_bytes,
            cached: Vec::new(),
            cache_limit_tokens,
        })
    }

    /// The device the model runs on (CUDA GPU 0 in a `cuda` build).
    pub fn device(&self) -> &Device {
        self.model.device()
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

    /// The next token: the model's choice if the constraint accepts it, else the best
    /// accepted one. `None` when the constraint accepts no token.
    fn pick(
        &self,
        logits: &[f32],
        sampling: &Sampling,
        matcher: Option<&Matcher>,
        rng: &mut StdRng,
    ) -> Option<u32> {
        match (sampling, matcher) {
            (Sampling::Greedy, None) => Some(argmax(logits)),
            (Sampling::Greedy, Some(m)) => {
                let first = argmax(logits);
                if self.allowed(m, first) {
                    Some(first)
                } else {
                    argmax_where(logits, |id| self.allowed(m, id))
                }
            }
            (
                &Sampling::Sample {
                    temperature, top_p, ..
                },
                m,
            ) => {
                let all: Vec<u32> = (0..logits.len() as u32).collect();
                let first = sample(logits, &all, temperature, top_p, rng)?;
                match m {
                    Some(m) if !self.allowed(m, first) => {
                        let ok: Vec<u32> =
                            all.into_iter().filter(|&id| self.allowed(m, id)).collect();
                        sample(logits, &ok, temperature, top_p, rng)
                    }
                    _ => Some(first),
                }
            }
        }
    }

    fn run(&mut self, req: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        if req.max_new_tokens == 0 {
            return Err(LlmError::InvalidRequest(
                "max_new_tokens must be at least 1".into(),
            ));
        }
        let mut matcher = req.constraint.as_ref().map(Matcher::new).transpose()?;
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
            text: String::new(),
            finish_reason: FinishReason::Constraint,
            prompt_tokens: ids.len(),
            cached_prompt_tokens: 0,
            generated_tokens: 0,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            constraint_ms: 0.0,
            tokens: Vec::new(),
        };
        if let Some(only) = matcher.as_ref().and_then(|m| m.single_answer()) {
            resp.text = only.to_string();
            return Ok(resp);
        }

        let start = Instant::now();
        // At least the last prompt token is recomputed: its logits start the answer.
        let reuse = common_prefix(&self.cached, &ids).min(ids.len() - 1);
        self.model.truncate_kv(reuse);
        self.cached.truncate(reuse);
        let logits = self.model.forward(&ids[reuse..], false)?;
        self.cached.extend_from_slice(&ids[reuse..]);
        let mut logits: Vec<f32> = logits.flatten_all()?.to_vec1()?;
        resp.cached_prompt_tokens = reuse;
        resp.prefill_ms = start.elapsed().as_secs_f64() * 1e3;

        let start = Instant::now();
        let budget = req.max_new_tokens.min(window - ids.len());
        let seed = match req.sampling {
            Sampling::Sample { seed, .. } => seed,
            Sampling::Greedy => 0,
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let mut out: Vec<u8> = Vec::new();
        let finish = loop {
            let t = Instant::now();
            let next = self.pick(&logits, &req.sampling, matcher.as_ref(), &mut rng);
            if matcher.is_some() {
                resp.constraint_ms += t.elapsed().as_secs_f64() * 1e3;
            }
            let Some(tok) = next else {
                // Only a tokenizer unable to spell the answer gets here; close it anyway.
                if let Some(m) = &matcher {
                    out.extend(m.shortest_completion());
                }
                break FinishReason::Constraint;
            };
            if self.token_bytes.is_special(tok) {
                break if matcher.is_some() {
                    FinishReason::Constraint
                } else {
                    FinishReason::Stop
                };
            }
            resp.tokens.push(tok);
            out.extend_from_slice(self.token_bytes.get(tok));
            if let Some(m) = &mut matcher {
                m.consume(self.token_bytes.get(tok));
                if m.is_final() && !m.can_continue() {
                    break FinishReason::Constraint;
                }
            } else if let Some(cut) = find_stop(&out, &req.stop) {
                out.truncate(cut);
                break FinishReason::Stop;
            } else if let Some(cut) = req
                .until_statement
                .and_then(|lang| statement_end(&out, lang))
            {
                out.truncate(cut);
                break FinishReason::Stop;
            }
            if resp.tokens.len() >= budget {
                if let Some(m) = &matcher {
                    out.extend(m.shortest_completion());
                }
                break FinishReason::Length;
            }
            logits = self
                .model
                .forward(&[tok], false)?
                .flatten_all()?
                .to_vec1()?;
            self.cached.push(tok);
        };
        resp.decode_ms = start.elapsed().as_secs_f64() * 1e3;
        resp.generated_tokens = resp.tokens.len();
        resp.finish_reason = finish;
        resp.text = String::from_utf8_lossy(&out).into_owned();
        if self.cached.len() > self.cache_limit_tokens {
            self.cached.truncate(self.cache_limit_tokens);
        }
        self.model.shrink_kv(self.cache_limit_tokens)?;
        Ok(resp)
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

    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
        Ok(self.encode(&self.render(prompt)?)?.len())
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
    fn common_prefix_counts_equal_leading_tokens() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
    }
}
