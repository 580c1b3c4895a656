//! A remote engine: an OpenAI-compatible server (vLLM, SGLang, llama.cpp's `llama-server`)
//! behind the same [`Llm`] trait as the local one, for models or batch jobs larger than one
//! machine.
//!
//! - Chat prompts go to `/v1/chat/completions` (the server applies the model's own template);
//!   text and fill-in-the-middle prompts to `/v1/completions` as raw text.
//! - Constraints are sent in the server's dialect (vLLM `structured_outputs`, SGLang `regex` /
//!   `response_format`, llama.cpp `grammar` / `json_schema`), and whatever comes back is checked
//!   here against the same automaton the local engine decodes with: an invalid answer gets one
//!   retry, then an error.
//! - Stop rules the server cannot express (first statement, dedent) cut the answer here.
//! - A task's calls carry one session key (`user` and `X-Session-Id`), so a router can keep
//!   them on one replica, whose prefix cache then serves their shared start.
//!
//! `ureq`: blocking calls fit the synchronous trait (no async runtime to own), it is already
//! built for the model hub client, and it speaks TLS for remote endpoints.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::constraint::Matcher;
use super::engine::{block_end, find_stop, statement_end};
use super::{
    fim_prompt, Constraint, FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError,
    Message, Prompt, Role, Sampling,
};

/// How a server takes constrained answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    /// vLLM ≥ 0.12: `structured_outputs` (`choice`, `json`).
    Vllm,
    /// SGLang: `regex`, and `response_format` with a JSON schema.
    Sglang,
    /// llama.cpp's `llama-server`: `grammar` (GBNF) and `json_schema`.
    Llamacpp,
    /// Any other OpenAI-compatible server: no constraint is sent; answers are still checked.
    Openai,
}

/// Where the server is and how to talk to it.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Base URL, with or without the trailing `/v1` (`http://gpu-box:8000/v1`).
    pub endpoint: String,
    /// The served model; `None`: the only one the server lists.
    pub model: Option<String>,
    /// Sent as a bearer token.
    pub api_key: Option<String>,
    /// `None`: detected from the server's model list.
    pub dialect: Option<Dialect>,
    /// Limit for one request.
    pub timeout: Duration,
    /// Further tries after a 429, a 5xx or a dropped connection (backing off each time).
    pub retries: u32,
    /// Requests in flight at once, over every handle of this engine.
    pub max_in_flight: usize,
}

impl RemoteOptions {
    pub fn new(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_string(),
            model: None,
            api_key: None,
            dialect: None,
            timeout: Duration::from_secs(600),
            retries: 4,
            max_in_flight: 8,
        }
    }
}

/// Context window assumed when the server does not say.
const DEFAULT_WINDOW: usize = 8192;

/// A handle on a server; clones share its connections and in-flight limit, and each carries
/// its own session key.
#[derive(Clone)]
pub struct RemoteLlm {
    server: Arc<Server>,
    session: Option<String>,
}

impl std::fmt::Debug for RemoteLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLlm")
            .field("endpoint", &self.server.base)
            .field("model", &self.server.model)
            .field("dialect", &self.server.dialect)
            .finish()
    }
}

struct Server {
    agent: ureq::Agent,
    /// The URL without a trailing `/` or `/v1`.
    base: String,
    api_key: Option<String>,
    model: String,
    dialect: Dialect,
    window: usize,
    retries: u32,
    gate: Gate,
}

/// A counting semaphore: at most `max` requests in flight.
struct Gate {
    busy: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

struct Pass<'a>(&'a Gate);

impl Gate {
    fn enter(&self) -> Pass<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy >= self.max {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy += 1;
        Pass(self)
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.0.freed.notify_one();
    }
}

/// A failed HTTP exchange, before it is worded for the user.
enum Failure {
    /// No answer: refused, reset, timed out, name not resolved.
    Unreachable(String),
    Status(u16, String),
    /// A 2xx whose body is not the JSON expected.
    Garbled(String),
}

impl RemoteLlm {
    /// Asks the server which models it serves, picks the model and the dialect, and reads the
    /// context window: every misconfiguration surfaces here, before any work is done.
    pub fn connect(options: &RemoteOptions) -> Result<Self, LlmError> {
        let base = base_url(&options.endpoint)?;
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout(options.timeout)
            .build();
        let mut server = Server {
            agent,
            base,
            api_key: options.api_key.clone(),
            model: String::new(),
            dialect: Dialect::Openai,
            window: DEFAULT_WINDOW,
            retries: options.retries,
            gate: Gate {
                busy: Mutex::new(0),
                freed: Condvar::new(),
                max: options.max_in_flight.max(1),
            },
        };
        let listing = server
            .call("GET", "/v1/models", None, None)
            .map_err(|f| server.error(f))?;
        let served: Vec<&Value> = listing["data"].as_array().into_iter().flatten().collect();
        let ids: Vec<&str> = served.iter().filter_map(|m| m["id"].as_str()).collect();
        let entry = match &options.model {
            Some(want) => served
                .iter()
                .find(|m| m["id"].as_str() == Some(want))
                .ok_or_else(|| {
                    server.fail(format!(
                        "model {want:?} is not served here; it serves: {}",
                        ids.join(", ")
                    ))
                })?,
            None => match served.as_slice() {
                [one] => one,
                [] => return Err(server.fail("the server lists no model".into())),
                _ => {
                    return Err(server.fail(format!(
                        "the server serves several models ({}): choose one with --llm-model",
                        ids.join(", ")
                    )))
                }
            },
        };
        server.model = entry["id"].as_str().unwrap_or_default().to_string();
        server.dialect = options
            .dialect
            .unwrap_or_else(|| match entry["owned_by"].as_str() {
                Some("vllm") => Dialect::Vllm,
                Some("sglang") => Dialect::Sglang,
                Some("llamacpp") => Dialect::Llamacpp,
                _ => Dialect::Openai,
            });
        // vLLM and SGLang list `max_model_len`; llama.cpp the slot's `n_ctx`.
        server.window = entry["max_model_len"]
            .as_u64()
            .or_else(|| entry["meta"]["n_ctx"].as_u64())
            .map_or(DEFAULT_WINDOW, |n| n as usize);
        Ok(Self {
            server: Arc::new(server),
            session: None,
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.server.dialect
    }

    pub fn endpoint(&self) -> &str {
        &self.server.base
    }

    /// Sends one request (retrying an answer that breaks its constraint once) and shapes the
    /// response like the local engine's.
    fn run(&self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        if request.max_new_tokens == 0 {
            return Err(LlmError::InvalidRequest(
                "max_new_tokens must be ≥ 1".into(),
            ));
        }
        let matcher = request.constraint.as_ref().map(Matcher::new).transpose()?;
        if let Some(only) = matcher.as_ref().and_then(|m| m.single_answer()) {
            return Ok(GenerateResponse::new(
                only.to_string(),
                FinishReason::Constraint,
            ));
        }
        let (path, body) = self.body(request);
        let mut last = String::new();
        for _ in 0..2 {
            let started = Instant::now();
            let reply = self
                .server
                .call("POST", path, Some(&body), self.session.as_deref())
                .map_err(|f| self.server.error(f))?;
            let mut resp = response(&reply, started.elapsed())
                .ok_or_else(|| self.server.fail(format!("unexpected answer: {reply}")))?;
            let Some(matcher) = &matcher else {
                cut(&mut resp, request);
                return Ok(resp);
            };
            match checked(matcher, request.constraint.as_ref(), &resp.text) {
                Some(text) => {
                    resp.text = text;
                    resp.finish_reason = FinishReason::Constraint;
                    return Ok(resp);
                }
                None => last = resp.text,
            }
        }
        Err(self.server.fail(format!(
            "the answer {last:?} breaks the request's constraint (after one retry)"
        )))
    }

    /// The route and JSON body of `request` in this server's dialect.
    fn body(&self, request: &GenerateRequest) -> (&'static str, Value) {
        let s = &self.server;
        let (path, mut body) = match &request.prompt {
            Prompt::Chat(messages) => (
                "/v1/chat/completions",
                json!({ "messages": messages_json(messages) }),
            ),
            Prompt::Text(text) => ("/v1/completions", json!({ "prompt": text })),
            Prompt::Fim { prefix, suffix } => (
                "/v1/completions",
                json!({ "prompt": fim_prompt(prefix, suffix) }),
            ),
        };
        body["model"] = json!(s.model);
        body["max_tokens"] = json!(request.max_new_tokens);
        match request.sampling {
            Sampling::Greedy => body["temperature"] = json!(0.0),
            Sampling::Sample {
                temperature,
                top_p,
                seed,
            } => {
                body["temperature"] = json!(temperature);
                body["top_p"] = json!(top_p);
                body["seed"] = json!(seed);
            }
        }
        if let Some(key) = &self.session {
            body["user"] = json!(key);
        }
        match &request.constraint {
            Some(c) => constrain(&mut body, s.dialect, c),
            None => {
                let stops: Vec<&String> = request.stop.iter().filter(|s| !s.is_empty()).collect();
                if !stops.is_empty() {
                    body["stop"] = json!(stops);
                }
            }
        }
        (path, body)
    }

    /// Tokens the server's `/tokenize` counts for `body` (llama.cpp: `content`; vLLM: `prompt`
    /// or `messages`).
    fn token_count(&self, body: &Value) -> Result<usize, LlmError> {
        let s = &self.server;
        let reply = s
            .call("POST", "/tokenize", Some(body), None)
            .map_err(|f| s.error(f))?;
        reply["count"]
            .as_u64()
            .map(|n| n as usize)
            .or_else(|| reply["tokens"].as_array().map(Vec::len))
            .ok_or_else(|| s.fail(format!("/tokenize answered without tokens: {reply}")))
    }

    /// Chat messages as the server's template renders them (llama.cpp's `/apply-template`).
    fn render_chat(&self, messages: &[Message]) -> Result<String, LlmError> {
        let s = &self.server;
        let body = json!({ "messages": messages_json(messages) });
        let reply = s
            .call("POST", "/apply-template", Some(&body), None)
            .map_err(|f| s.error(f))?;
        reply["prompt"].as_str().map(str::to_string).ok_or_else(|| {
            s.fail(format!(
                "/apply-template answered without a prompt: {reply}"
            ))
        })
    }
}

impl Server {
    /// One HTTP exchange with retries and backoff: 429 and 5xx answers and lost connections
    /// are tried again (a server's `Retry-After` is honoured); other statuses are final.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        session: Option<&str>,
    ) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let mut attempt = 0;
        loop {
            let outcome = {
                let _pass = self.gate.enter();
                let mut req = self.agent.request(method, &url);
                if let Some(key) = &self.api_key {
                    req = req.set("Authorization", &format!("Bearer {key}"));
                }
                if let Some(key) = session {
                    req = req.set("X-Session-Id", key);
                }
                match body {
                    Some(b) => req.send_json(b),
                    None => req.call(),
                }
            };
            let (failure, wait) = match outcome {
                Ok(resp) => {
                    let text = resp
                        .into_string()
                        .map_err(|e| Failure::Unreachable(e.to_string()))?;
                    return serde_json::from_str(&text).map_err(|_| Failure::Garbled(text));
                }
                Err(ureq::Error::Status(code, resp)) => {
                    let wait = resp
                        .header("Retry-After")
                        .and_then(|v| v.trim().parse::<f64>().ok());
                    let text = resp.into_string().unwrap_or_default();
                    let retry = code == 429 || code >= 500;
                    let failure = Failure::Status(code, server_message(&text));
                    if !retry {
                        return Err(failure);
                    }
                    (failure, wait)
                }
                Err(ureq::Error::Transport(t)) => (Failure::Unreachable(t.to_string()), None),
            };
            if attempt >= self.retries {
                return Err(failure);
            }
            let backoff = 0.5 * f64::from(1u32 << attempt.min(4));
            std::thread::sleep(Duration::from_secs_f64(wait.unwrap_or(backoff).min(30.0)));
            attempt += 1;
        }
    }

    fn fail(&self, reason: String) -> LlmError {
        LlmError::Remote {
            endpoint: self.base.clone(),
            reason,
        }
    }

    /// A failure in words a user can act on.
    fn error(&self, failure: Failure) -> LlmError {
        let reason = match failure {
            Failure::Unreachable(why) => format!(
                "cannot reach the server ({why}): is it running, and is --llm-endpoint right?"
            ),
            Failure::Status(401 | 403, msg) => format!(
                "the server refused the credentials ({msg}): give the API key's variable with --llm-api-key-env"
            ),
            Failure::Status(404, msg) if msg.contains("model") => {
                format!("model {:?} is not served here ({msg})", self.model)
            }
            Failure::Status(code, msg) if is_context_overflow(&msg) => format!(
                "the prompt does not fit the server's context window (HTTP {code}: {msg})"
            ),
            Failure::Status(code, msg) => format!("HTTP {code}: {msg}"),
            Failure::Garbled(text) => {
                let head: String = text.chars().take(200).collect();
                format!("the answer is not JSON: {head:?}")
            }
        };
        self.fail(reason)
    }
}

/// `http://h:8000/v1/` → `http://h:8000`.
fn base_url(endpoint: &str) -> Result<String, LlmError> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) {
        return Err(LlmError::InvalidRequest(format!(
            "--llm-endpoint {endpoint:?}: give an http:// or https:// URL"
        )));
    }
    Ok(trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string())
}

/// Messages in the OpenAI form.
fn messages_json(messages: &[Message]) -> Value {
    let role = |r: Role| match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    messages
        .iter()
        .map(|m| json!({"role": role(m.role), "content": m.content}))
        .collect()
}

/// The `error.message` (OpenAI, vLLM, llama.cpp) or `message` of an error body, else its text.
fn server_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["message"].as_str())
            .or_else(|| v["detail"].as_str())
            .map(str::to_string)
    });
    msg.unwrap_or_else(|| body.chars().take(300).collect())
}

fn is_context_overflow(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("context length") || m.contains("context size") || m.contains("context window")
}

/// Adds `constraint` to `body` in the server's dialect.
fn constrain(body: &mut Value, dialect: Dialect, constraint: &Constraint) {
    let schema = match constraint {
        Constraint::OneOf(_) => None,
        Constraint::Subset { items, max_items } => Some(json!({
            "type": "array",
            "items": {"type": "string", "enum": items},
            "minItems": 1,
            "maxItems": max_items,
            "uniqueItems": true,
        })),
        Constraint::IdentArray { pattern, max_items } => Some(json!({
            "type": "array",
            "items": {"type": "string", "pattern": pattern.regex(), "maxLength": pattern.max_len()},
            "maxItems": max_items,
        })),
    };
    match (dialect, constraint, schema) {
        (Dialect::Openai, ..) => {}
        (Dialect::Vllm, Constraint::OneOf(choices), _) => {
            body["structured_outputs"] = json!({ "choice": choices });
        }
        (Dialect::Sglang, Constraint::OneOf(choices), _) => {
            let alternatives: Vec<String> = choices.iter().map(|c| regex::escape(c)).collect();
            body["regex"] = json!(format!("^(?:{})$", alternatives.join("|")));
        }
        (Dialect::Llamacpp, Constraint::OneOf(choices), _) => {
            let alternatives: Vec<String> = choices.iter().map(|c| gbnf_literal(c)).collect();
            body["grammar"] = json!(format!("root ::= {}", alternatives.join(" | ")));
        }
        (Dialect::Vllm, _, Some(schema)) => body["structured_outputs"] = json!({ "json": schema }),
        (Dialect::Sglang, _, Some(schema)) => {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema},
            });
        }
        (Dialect::Llamacpp, _, Some(schema)) => body["json_schema"] = schema,
        (_, _, None) => {}
    }
}

/// A GBNF string literal.
fn gbnf_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The answer in the form the local engine would give it, if it meets the constraint: a
/// one-of member verbatim (surrounding blanks dropped), an array re-written compactly.
fn checked(matcher: &Matcher, constraint: Option<&Constraint>, text: &str) -> Option<String> {
    let canonical = match constraint? {
        Constraint::OneOf(_) => text.trim().to_string(),
        _ => {
            let items: Vec<String> = serde_json::from_str(text.trim()).ok()?;
            serde_json::to_string(&items).ok()?
        }
    };
    let mut m = matcher.clone();
    (m.consume(canonical.as_bytes()) && m.is_final()).then_some(canonical)
}

/// Cuts the answer where the local engine would have stopped decoding: at a stop string (a
/// server may keep it), after the first statement, or where the code dedents.
fn cut(resp: &mut GenerateResponse, request: &GenerateRequest) {
    let bytes = resp.text.as_bytes();
    let at = find_stop(bytes, &request.stop)
        .or_else(|| {
            request
                .until_statement
                .and_then(|l| statement_end(bytes, l))
        })
        .or_else(|| request.until_dedent.and_then(|col| block_end(bytes, col)));
    if let Some(at) = at {
        resp.text.truncate(at);
        resp.finish_reason = FinishReason::Stop;
    }
}

/// A completion reply as a response: its text, finish reason and the server's `usage` (cached
/// prompt tokens from `prompt_tokens_details`, or llama.cpp's `timings`). Without the
/// server's timings the whole wall time counts as decoding.
fn response(reply: &Value, wall: Duration) -> Option<GenerateResponse> {
    let choice = &reply["choices"][0];
    let text = choice["message"]["content"]
        .as_str()
        .or_else(|| choice["text"].as_str())?;
    let finish_reason = match choice["finish_reason"].as_str() {
        Some("length") => FinishReason::Length,
        _ => FinishReason::Stop,
    };
    let usage = &reply["usage"];
    let count = |v: &Value| v.as_u64().unwrap_or(0) as usize;
    let timings = &reply["timings"];
    let mut resp = GenerateResponse::new(text.to_string(), finish_reason);
    resp.prompt_tokens = count(&usage["prompt_tokens"]);
    resp.generated_tokens = count(&usage["completion_tokens"]);
    resp.cached_prompt_tokens = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| timings["cache_n"].as_u64())
        .unwrap_or(0) as usize;
    match (
        timings["prompt_ms"].as_f64(),
        timings["predicted_ms"].as_f64(),
    ) {
        (Some(p), Some(d)) => (resp.prefill_ms, resp.decode_ms) = (p, d),
        _ => resp.decode_ms = wall.as_secs_f64() * 1e3,
    }
    Some(resp)
}

impl Llm for RemoteLlm {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        self.run(request)
    }

    /// The requests go out at once (up to the in-flight limit): the server batches them.
    fn generate_batch(
        &mut self,
        requests: &[GenerateRequest],
    ) -> Vec<Result<GenerateResponse, LlmError>> {
        let this = &*self;
        std::thread::scope(|scope| {
            let running: Vec<_> = requests
                .iter()
                .map(|r| scope.spawn(move || this.run(r)))
                .collect();
            running
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(LlmError::InvalidRequest("a request thread panicked".into()))
                    })
                })
                .collect()
        })
    }

    /// The server's count where it has a tokenizer endpoint (llama.cpp, vLLM); elsewhere an
    /// estimate of one token per three bytes (code runs 3.5–4 with Qwen's tokenizer), so
    /// budgets err on the short side.
    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
        let s = &self.server;
        let text = match (prompt, s.dialect) {
            (Prompt::Chat(messages), Dialect::Vllm) => {
                return self.token_count(&json!({
                    "model": s.model,
                    "messages": messages_json(messages),
                    "add_generation_prompt": true,
                }))
            }
            (Prompt::Chat(messages), Dialect::Llamacpp) => self.render_chat(messages)?,
            (Prompt::Chat(messages), _) => super::chatml(messages, None),
            (Prompt::Text(t), _) => t.clone(),
            (Prompt::Fim { prefix, suffix }, _) => fim_prompt(prefix, suffix),
        };
        match s.dialect {
            Dialect::Llamacpp => self.token_count(
                &json!({"content": text, "add_special": false, "parse_special": true}),
            ),
            Dialect::Vllm => self.token_count(&json!({"model": s.model, "prompt": text})),
            Dialect::Sglang | Dialect::Openai => Ok(text.len().div_ceil(3)),
        }
    }

    fn context_window(&self) -> usize {
        self.server.window
    }

    fn name(&self) -> &str {
        &self.server.model
    }

    fn set_session(&mut self, key: Option<&str>) {
        self.session = key.map(str::to_string);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::IdentPattern;

    #[test]
    fn endpoints_are_normalised_and_must_be_http() {
        assert_eq!(base_url("http://h:8000/v1/").unwrap(), "http://h:8000");
        assert_eq!(base_url(" https://h/api ").unwrap(), "https://h/api");
        assert!(base_url("h:8000").is_err());
    }

    #[test]
    fn constraints_take_each_dialect_s_form() {
        let one_of = Constraint::OneOf(vec!["a.b".into(), "say \"hi\"".into()]);
        let mut body = json!({});
        constrain(&mut body, Dialect::Vllm, &one_of);
        assert_eq!(body["structured_outputs"]["choice"][1], "say \"hi\"");
        let mut body = json!({});
        constrain(&mut body, Dialect::Sglang, &one_of);
        assert_eq!(body["regex"], "^(?:a\\.b|say \"hi\")$");
        let mut body = json!({});
        constrain(&mut body, Dialect::Llamacpp, &one_of);
        assert_eq!(body["grammar"], "root ::= \"a.b\" | \"say \\\"hi\\\"\"");
        let subset = Constraint::Subset {
            items: vec!["x".into(), "y".into()],
            max_items: 1,
        };
        let mut body = json!({});
        constrain(&mut body, Dialect::Llamacpp, &subset);
        assert_eq!(body["json_schema"]["items"]["enum"], json!(["x", "y"]));
        assert_eq!(body["json_schema"]["maxItems"], 1);
        let mut body = json!({});
        constrain(&mut body, Dialect::Sglang, &subset);
        assert_eq!(
            body["response_format"]["json_schema"]["schema"]["minItems"],
            1
        );
        let mut body = json!({});
        constrain(&mut body, Dialect::Openai, &subset);
        assert_eq!(body, json!({}));
    }

    #[test]
    fn answers_are_checked_against_the_constraint_and_rewritten_compactly() {
        let check = |c: Constraint, text: &str| checked(&Matcher::new(&c).unwrap(), Some(&c), text);
        let one_of = || Constraint::OneOf(vec!["yes".into(), "no".into()]);
        assert_eq!(check(one_of(), " yes\n").as_deref(), Some("yes"));
        assert_eq!(check(one_of(), "maybe"), None);
        let subset = || Constraint::Subset {
            items: vec!["a".into(), "b".into(), "c".into()],
            max_items: 2,
        };
        assert_eq!(
            check(subset(), "[ \"a\",\n \"c\" ]").as_deref(),
            Some("[\"a\",\"c\"]")
        );
        assert_eq!(check(subset(), "[\"a\", \"a\"]"), None, "repeated member");
        assert_eq!(check(subset(), "[\"a\", \"b\", \"c\"]"), None, "too many");
        assert_eq!(check(subset(), "[\"d\"]"), None, "not a member");
        assert_eq!(check(subset(), "a, b"), None, "not JSON");
        let idents = || Constraint::IdentArray {
            pattern: IdentPattern::default(),
            max_items: 3,
        };
        assert_eq!(check(idents(), "[]").as_deref(), Some("[]"));
        assert_eq!(
            check(idents(), "[\"os.path\"]").as_deref(),
            Some("[\"os.path\"]")
        );
        assert_eq!(check(idents(), "[\"1x\"]"), None);
    }

    #[test]
    fn replies_carry_the_server_s_usage_and_timings() {
        let reply = json!({
            "choices": [{"message": {"content": "x = 1\ny = 2"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 9,
                      "prompt_tokens_details": {"cached_tokens": 100}},
            "timings": {"prompt_ms": 12.5, "predicted_ms": 80.0, "cache_n": 100}
        });
        let resp = response(&reply, Duration::from_secs(1)).unwrap();
        assert_eq!(
            (
                resp.prompt_tokens,
                resp.cached_prompt_tokens,
                resp.generated_tokens
            ),
            (120, 100, 9)
        );
        assert_eq!((resp.prefill_ms, resp.decode_ms), (12.5, 80.0));
        assert_eq!(resp.finish_reason, FinishReason::Length);
        let mut req = GenerateRequest::new(Prompt::Text(String::new()));
        req.until_statement = Some(crate::repo::model::Lang::Python);
        let mut resp = resp;
        cut(&mut resp, &req);
        assert_eq!(
            (resp.text.as_str(), resp.finish_reason),
            ("x = 1", FinishReason::Stop)
        );
        let plain = json!({"choices": [{"text": "t", "finish_reason": "stop"}]});
        let resp = response(&plain, Duration::from_millis(40)).unwrap();
        assert_eq!((resp.prompt_tokens, resp.decode_ms), (0, 40.0));
    }

    #[test]
    fn error_bodies_yield_their_message() {
        assert_eq!(
            server_message(r#"{"error": {"code": 400, "message": "too long"}}"#),
            "too long"
        );
        assert_eq!(server_message(r#"{"detail": "no"}"#), "no");
        assert_eq!(server_message("plain"), "plain");
        assert!(is_context_overflow(
            "This model's maximum context length is 8192 tokens"
        ));
    }
}
