//! Native LLM runtime: Qwen2/Qwen2.5/Qwen3 through candle, ChatML and FIM prompts, greedy or
//! sampled decoding with stop strings, constrained decoding (one-of, subset, identifier array)
//! and a prefix KV cache that reuses the longest common token prefix of consecutive calls.
//!
//! ```no_run
//! use repohop::llm::{CandleLlm, Constraint, GenerateRequest, Llm, LlmOptions, Message, Prompt};
//! let mut llm = CandleLlm::load("qwen2.5-coder-1.5b", &LlmOptions::default())?;
//! let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user("2+2=? Answer only.")]));
//! req.constraint = Some(Constraint::OneOf(vec!["3".into(), "4".into()]));
//! let resp = llm.generate(&req)?;
//! assert_eq!(resp.text, "4");
//! # Ok::<(), repohop::llm::LlmError>(())
//! ```

mod chat;
mod constraint;
#[cfg(feature = "cuda")]
mod cuda_batch;
#[cfg(feature = "cuda")]
mod cuda_decode;
#[cfg(feature = "cuda")]
mod cuda_prefill;
mod engine;
mod kernels;
mod linear;
mod load;
mod quantized;
pub mod qwen;
mod remote;
mod sample;
mod shared;
pub mod synth;
mod token_bytes;

pub use chat::{chatml, fim_prompt, Message, Role};
pub use constraint::{Constraint, IdentPattern, Matcher};
pub use engine::{CandleLlm, LlmOptions, Speculation, PREFILL_CHUNK};
pub use load::{read_gguf, read_tokenizer, resolve, tokenizer_from_bytes, ModelFiles};
pub use remote::{Dialect, RemoteLlm, RemoteOptions};
pub use shared::{SharedLlm, Ticket};
pub use token_bytes::TokenBytes;

use std::path::PathBuf;

/// Errors of the LLM runtime; each names the model, file or request field concerned.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("model {name:?} not found: {hint}")]
    ModelNotFound { name: String, hint: String },
    #[error("cannot load model {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("{path}: architecture {arch:?} is not supported (supported: qwen2, qwen3); use a Qwen2/Qwen2.5/Qwen3 model")]
    UnsupportedArchitecture { path: PathBuf, arch: String },
    #[error("{path} is truncated: {actual} bytes, its tensors need {expected}; download it again (repohop models fetch)")]
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error("tokenizer {path} does not match the model: {reason}")]
    TokenizerMismatch { path: PathBuf, reason: String },
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("the prompt is {tokens} tokens but {model} has a context window of {window}: shorten the prompt")]
    PromptTooLong {
        tokens: usize,
        window: usize,
        model: String,
    },
    #[error("LLM server {endpoint}: {reason}")]
    Remote { endpoint: String, reason: String },
    /// The cause is in the message, not chained, so `{:#}` prints it once.
    #[error("inference failed: {0}")]
    Inference(candle_core::Error),
}

impl From<candle_core::Error> for LlmError {
    fn from(err: candle_core::Error) -> Self {
        LlmError::Inference(err)
    }
}

/// What to generate from.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prompt {
    /// Raw text, tokenized as is (special tokens such as `<|im_start|>` are recognised).
    Text(String),
    /// Messages rendered with the model's chat template (ChatML), ending with the assistant
    /// header so the model answers.
    Chat(Vec<Message>),
    /// Fill-in-the-middle: the model writes what goes between `prefix` and `suffix`. The
    /// Instruct models run on past the middle; give a stop string (e.g. `"\n"`) as the cutoff.
    Fim { prefix: String, suffix: String },
}

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Sampling {
    /// Argmax (temperature 0), the default.
    Greedy,
    /// Temperature sampling restricted to the smallest set of tokens with probability mass
    /// `top_p`, reproducible for a given `seed`.
    Sample {
        temperature: f32,
        top_p: f32,
        seed: u64,
    },
}

/// One generation call.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    /// Upper bound on generated tokens (must be ≥ 1). A constrained answer cut by it is closed
    /// with the shortest valid completion, so it still parses (finish reason `length`).
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Extra stop strings, matched on the decoded text and trimmed from it. Ignored while a
    /// constraint is active (the constraint decides where the answer ends).
    pub stop: Vec<String>,
    /// Stop once the answer holds a complete statement of this language (its first logical
    /// line, brackets balanced): line completion wants one statement, not 64 tokens. The text
    /// is cut after that statement. Ignored while a constraint is active.
    pub until_statement: Option<crate::repo::model::Lang>,
    /// With `until_statement`: the answer may not open with a comment or a Markdown fence, so
    /// its first non-blank token is code. A small model shown context as comments tends to
    /// copy that scaffolding on instead of completing the line.
    pub code_first: bool,
    /// Stop before the first line that starts at this column or left of it: an infilled body
    /// ends where the code around it resumes (the model does not end a fill-in-the-middle
    /// answer by itself). The text is cut there. Ignored while a constraint is active.
    pub until_dedent: Option<usize>,
    pub constraint: Option<Constraint>,
}

impl GenerateRequest {
    /// Greedy, 256 new tokens, no stops, no constraint.
    pub fn new(prompt: Prompt) -> Self {
        Self {
            prompt,
            max_new_tokens: 256,
            sampling: Sampling::Greedy,
            stop: Vec::new(),
            until_statement: None,
            code_first: false,
            until_dedent: None,
            constraint: None,
        }
    }
}

/// A continuation's log-probability under a prompt (see [`Llm::score`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Scored {
    pub logprob: f64,
    /// The prompt's tokens.
    pub prompt_tokens: usize,
    /// The continuation's tokens.
    pub tokens: usize,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// An end-of-turn/end-of-text token or a caller stop string.
    Stop,
    /// `max_new_tokens` or the context window was reached.
    Length,
    /// The constraint's answer was complete.
    Constraint,
}

/// The answer and its accounting.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GenerateResponse {
    pub text: String,
    pub finish_reason: FinishReason,
    /// Tokens in the rendered prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix KV cache (not recomputed).
    pub cached_prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Time spent checking and masking tokens for the constraint (part of `decode_ms`).
    pub constraint_ms: f64,
    /// Speculative decoding: tokens drafted from the prompt, and how many the model agreed with
    /// (each agreed token saved a decode step).
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    /// The generated token ids (stop tokens excluded).
    pub tokens: Vec<u32>,
}

impl GenerateResponse {
    /// `text` with no accounting yet (all counts and times zero).
    pub fn new(text: String, finish_reason: FinishReason) -> Self {
        Self {
            text,
            finish_reason,
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
            generated_tokens: 0,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            constraint_ms: 0.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
            tokens: Vec::new(),
        }
    }
}

/// A text generator. The seam between the retrieval pipelines and a model: the candle engine
/// and a remote server ([`RemoteLlm`]) implement it; tests script it. Calls take `&mut self`
/// because a model holds KV state; [`Engine`] gives several threads their own handles.
pub trait Llm: Send {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError>;
    /// Answers several requests, each result in its request's place: the same answers as
    /// calling `generate` on each in turn. The candle engine decodes them together.
    fn generate_batch(
        &mut self,
        requests: &[GenerateRequest],
    ) -> Vec<Result<GenerateResponse, LlmError>> {
        requests.iter().map(|r| self.generate(r)).collect()
    }
    /// Tokens the prompt would take (after templating), for context budgeting.
    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError>;
    /// How likely the model finds `continuation` right after `prompt`: the natural-log
    /// probability summed over its tokens (e.g. a docstring after a candidate function).
    fn score(&mut self, prompt: &Prompt, continuation: &str) -> Result<Scored, LlmError> {
        let _ = (prompt, continuation);
        Err(LlmError::InvalidRequest(format!(
            "{} does not score texts",
            self.name()
        )))
    }
    /// Maximum prompt + generated tokens.
    fn context_window(&self) -> usize;
    /// Model name for reports.
    fn name(&self) -> &str;
    /// The calls that follow belong to the task `key` (`None`: to none): a remote engine sends
    /// it so a router keeps them on the replica whose prefix cache holds their shared start.
    fn set_session(&mut self, key: Option<&str>) {
        let _ = key;
    }
}

/// An engine several pipelines use at the same time, each through its own handle.
#[derive(Clone, Debug)]
pub enum Engine {
    /// The local model on a thread of its own, decoding the callers' answers together.
    Local(SharedLlm),
    /// An OpenAI-compatible server.
    Remote(RemoteLlm),
}

impl Engine {
    pub fn handle(&self) -> Box<dyn Llm> {
        match self {
            Engine::Local(shared) => Box::new(shared.clone()),
            Engine::Remote(remote) => Box::new(remote.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inference_error_names_its_cause_once() {
        let err = anyhow::Error::new(LlmError::from(candle_core::Error::Msg("no memory".into())));
        assert_eq!(format!("{err:#}"), "inference failed: no memory");
    }
}
