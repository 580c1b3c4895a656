//! Line completion at a cursor: retrieve (SaraCoder or nothing), build the line prompt, let the
//! model continue the unfinished code, keep its first complete statement.

use std::time::Instant;

use serde::Serialize;

use super::line::{line_prompt, LinePrompt};
use crate::embed::{EmbedError, Embedder};
use crate::llm::{GenerateRequest, Llm, LlmError, Prompt};
use crate::repo::lang::lexical::first_statement;
use crate::repo::model::Lang;
use crate::repo::Repository;
use crate::retrieve::saracoder::eaid::{eaid, Eaid};
use crate::retrieve::saracoder::{retrieve, Codebase, Options, Retrieval};

/// Which retrieval feeds the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LineMethod {
    /// The unfinished code alone.
    None,
    /// Slices through SaraCoder's layers, plus the imported entities (EAID).
    Saracoder,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompleteOptions {
    pub method: LineMethod,
    pub retrieval: Options,
    /// Imported entities and external names in the prompt (`--no-eaid` turns them off).
    pub eaid: bool,
    /// Prompt tokens; the unfinished code takes at most half.
    pub budget: usize,
    pub max_new_tokens: usize,
}

impl Default for CompleteOptions {
    fn default() -> Self {
        Self {
            method: LineMethod::Saracoder,
            retrieval: Options::default(),
            eaid: true,
            // The paper's window (A.5.2).
            budget: 2048,
            // One statement; long calls span a few lines.
            max_new_tokens: 64,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    #[error("{0} is not a Python file of the repository (line completion reads Python for now)")]
    NotPython(String),
    #[error("line {line} is past the end of {path} ({lines} lines)")]
    PastEnd {
        path: String,
        line: usize,
        lines: usize,
    },
    #[error("the saracoder method needs an embedder")]
    NoEmbedder,
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Llm(#[from] LlmError),
}

#[derive(Debug, Clone, Serialize)]
pub struct LineCompletion {
    /// The first complete statement of the model's continuation.
    pub completion: String,
    /// What the model wrote before the cut.
    pub raw: String,
    pub prompt: LinePrompt,
    pub retrieval: Option<Retrieval>,
    pub eaid: Option<Eaid>,
    pub retrieve_ms: f64,
    pub generate_ms: f64,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
}

/// Completes the line `line` (1-based) of `path`: the code above it is the unfinished code,
/// everything from it on is hidden from retrieval and prompt.
pub fn complete_line(
    llm: &mut dyn Llm,
    embedder: Option<&dyn Embedder>,
    repo: &Repository,
    path: &str,
    line: usize,
    opts: &CompleteOptions,
) -> Result<LineCompletion, CompleteError> {
    let file = repo
        .file_id(path)
        .map(|f| repo.file(f))
        .filter(|f| f.lang == Some(Lang::Python))
        .ok_or_else(|| CompleteError::NotPython(path.to_string()))?;
    let text = file.text.as_deref().unwrap_or_default();
    let lines = text.lines().count();
    if line == 0 || line > lines + 1 {
        return Err(CompleteError::PastEnd {
            path: path.to_string(),
            line,
            lines,
        });
    }
    let unfinished = crate::retrieve::saracoder::cut_before(text, line);

    let started = Instant::now();
    let (retrieval, external) = match opts.method {
        LineMethod::None => (None, None),
        LineMethod::Saracoder => {
            let embedder = embedder.ok_or(CompleteError::NoEmbedder)?;
            let codebase = Codebase::build(repo, path, unfinished, &opts.retrieval.limits);
            let r = retrieve(&codebase, embedder, &opts.retrieval)?;
            let e = opts.eaid.then(|| eaid(repo, path, line));
            (Some(r), e)
        }
    };
    let retrieve_ms = started.elapsed().as_secs_f64() * 1e3;

    let count = |s: &str| {
        llm.count_tokens(&Prompt::Text(s.to_string()))
            .unwrap_or(s.len() / 3)
    };
    let picks = retrieval.as_ref().map_or(&[][..], |r| &r.picks[..]);
    let prompt = line_prompt(
        picks,
        external.as_ref().unwrap_or(&Eaid::default()),
        unfinished,
        Lang::Python,
        opts.budget,
        &count,
    );
    let mut request = GenerateRequest::new(Prompt::Text(prompt.text.clone()));
    request.max_new_tokens = opts.max_new_tokens;
    let started = Instant::now();
    let response = llm.generate(&request)?;
    let generate_ms = started.elapsed().as_secs_f64() * 1e3;
    let completion = first_statement(response.text.trim_start_matches('\n'), Lang::Python)
        .trim_end()
        .to_string();
    Ok(LineCompletion {
        completion,
        raw: response.text.clone(),
        prompt,
        retrieval,
        eaid: external,
        retrieve_ms,
        generate_ms,
        prompt_tokens: response.prompt_tokens,
        generated_tokens: response.generated_tokens,
    })
}
