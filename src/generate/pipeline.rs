//! DyCoder and its ablations on one code path: dense retrieval and DyRetriever over the masked
//! view, one deduplicated context, then generation.

use std::collections::HashSet;
use std::time::Instant;

use serde::Serialize;

use super::{generate, ContextSnippet, GenerateError, GenerateOptions, Generation, Target};
use crate::embed::{text, Embedder};
use crate::index::vectors::VectorIndex;
use crate::llm::Llm;
use crate::repo::mask::MaskedView;
use crate::retrieve::dense::{self, DenseError};
use crate::retrieve::dyretriever::{self, DyError, DyOptions, DyTrace};

/// Which context the generator gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// DyRetriever's extracted functions plus the dense top-k (the paper's DyCoder).
    Dycoder,
    /// DyRetriever's extracted functions only (the paper's "w/o similarity").
    Dyretriever,
    /// The dense top-k only (the paper's "w/o DyRetriever").
    Dense,
    /// No retrieved context: the signature and docstring only (the Direct baseline).
    Direct,
}

impl Method {
    pub fn uses_dense(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dense)
    }
    pub fn uses_dyretriever(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dyretriever)
    }
    pub fn name(self) -> &'static str {
        match self {
            Method::Dycoder => "dycoder",
            Method::Dyretriever => "dyretriever",
            Method::Dense => "dense",
            Method::Direct => "direct",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub method: Method,
    pub dy: DyOptions,
    /// Functions from dense retrieval (the paper's top-10 similar functions).
    pub top_sim: usize,
    pub generation: GenerateOptions,
}

impl PipelineOptions {
    pub fn new(method: Method) -> Self {
        Self {
            method,
            dy: DyOptions::default(),
            top_sim: 10,
            generation: GenerateOptions::default(),
        }
    }
}

/// The embedder and the repository's vectors, for methods with dense retrieval.
pub struct Embeddings<'a> {
    pub embedder: &'a dyn Embedder,
    pub index: &'a VectorIndex,
}

/// A function in the final context.
#[derive(Debug, Clone, Serialize)]
pub struct ContextItem {
    pub qualname: String,
    pub path: String,
    pub start_line: usize,
    /// `dyretriever` or `dense`.
    pub source: &'static str,
    pub code: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct DenseItem {
    pub qualname: String,
    pub path: String,
    pub score: f32,
}

/// Everything a run did, for traces and reports.
#[derive(Debug, Serialize)]
pub struct PipelineRun {
    pub method: Method,
    pub context: Vec<ContextItem>,
    pub dyretriever: DyTrace,
    pub dense: Vec<DenseItem>,
    pub generation: Generation,
    pub dense_s: f64,
    pub dyretriever_s: f64,
    pub generation_s: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("method {0} needs embeddings, and none were given")]
    NoEmbeddings(&'static str),
    #[error(transparent)]
    Dense(Box<DenseError>),
    #[error(transparent)]
    DyRetriever(#[from] DyError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
}

impl From<DenseError> for PipelineError {
    fn from(e: DenseError) -> Self {
        PipelineError::Dense(Box::new(e))
    }
}

/// Runs `opts.method` for the view's target. The paper runs dense retrieval and DyRetriever
/// concurrently; on a CPU both compete for the same cores, so they run one after the other.
pub fn run(
    llm: &mut dyn Llm,
    view: &MaskedView,
    target: &Target,
    embeddings: Option<&Embeddings>,
    opts: &PipelineOptions,
) -> Result<PipelineRun, PipelineError> {
    let mut dense_hits = Vec::new();
    let mut dense_s = 0.0;
    if opts.method.uses_dense() {
        let e = embeddings.ok_or(PipelineError::NoEmbeddings(opts.method.name()))?;
        let started = Instant::now();
        let query = text::query_text(&target.signature, target.docstring.as_deref());
        dense_hits = dense::top_k(view, e.embedder, e.index, &query, opts.top_sim)?;
        dense_s = started.elapsed().as_secs_f64();
    }
    let mut dy_trace = DyTrace::default();
    let mut dy_functions = Vec::new();
    let mut dyretriever_s = 0.0;
    if opts.method.uses_dyretriever() {
        let started = Instant::now();
        let result =
            dyretriever::retrieve(llm, view, &target.prompt_text(), &target.path, &opts.dy)?;
        dy_functions = result.functions;
        dy_trace = result.trace;
        dyretriever_s = started.elapsed().as_secs_f64();
    }

    // One deduplicated context: DyRetriever's picks first, then the similar functions.
    let mut seen = HashSet::new();
    let mut context = Vec::new();
    let sources = dy_functions
        .iter()
        .map(|&f| (f, "dyretriever"))
        .chain(dense_hits.iter().map(|h| (h.id, "dense")));
    for (id, source) in sources {
        let (Some(f), Some(code)) = (view.function(id), view.function_code(id)) else {
            continue;
        };
        if seen.insert(id) {
            context.push(ContextItem {
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                start_line: f.span.start_line,
                source,
                code: code.into_owned(),
            });
        }
    }
    let snippets: Vec<ContextSnippet> = context
        .iter()
        .map(|c| ContextSnippet {
            qualname: c.qualname.clone(),
            path: c.path.clone(),
            code: c.code.clone(),
        })
        .collect();
    let started = Instant::now();
    let generation = generate(llm, target, &snippets, &opts.generation)?;
    let generation_s = started.elapsed().as_secs_f64();
    let dense = dense_hits
        .iter()
        .filter_map(|h| {
            view.function(h.id).map(|f| DenseItem {
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                score: h.score,
            })
        })
        .collect();
    Ok(PipelineRun {
        method: opts.method,
        context,
        dyretriever: dy_trace,
        dense,
        generation,
        dense_s,
        dyretriever_s,
        generation_s,
    })
}
