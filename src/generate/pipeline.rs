//! DyCoder and its ablations on one code path: dense retrieval and DyRetriever over the masked
//! view, one deduplicated context, then generation.

use std::collections::HashSet;
use std::time::Instant;

use serde::Serialize;

use super::{generate, ContextSnippet, GenerateError, GenerateOptions, Generation, Target};
use crate::embed::{text, Embedder};
use crate::index::vectors::{Item, VectorIndex};
use crate::llm::Llm;
use crate::repo::mask::MaskedView;
use crate::repo::Repository;
use crate::retrieve::dense::{self, DenseError};
use crate::retrieve::dyretriever::{self, DyError, DyOptions, DyTrace};
use crate::retrieve::{bm25, slices};

/// Which context the generator gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// DyRetriever's extracted functions plus the similar functions (the paper's DyCoder).
    Dycoder,
    /// DyRetriever's extracted functions only (the paper's "w/o similarity").
    Dyretriever,
    /// The similar functions only (the paper's "w/o DyRetriever").
    Dense,
    /// Sliding-window code slices by cosine similarity (the paper's SimpleRAG baseline).
    Simplerag,
    /// No retrieved context: the signature and docstring only (the Direct baseline).
    Direct,
}

/// How the similar functions are found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Similarity {
    /// Cosine between embeddings (the paper's default).
    #[default]
    Dense,
    /// Okapi BM25 over identifiers and words (the paper's sparse variant).
    Bm25,
}

/// What a method embeds ahead of queries, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corpus {
    Functions,
    Slices,
}

impl Corpus {
    pub fn items(self, repo: &Repository) -> Vec<Item> {
        match self {
            Corpus::Functions => dense::function_items(repo),
            Corpus::Slices => slices::slice_items(repo),
        }
    }

    /// The cache folder's name under the repository's cache.
    pub fn cache_name(self) -> &'static str {
        match self {
            Corpus::Functions => "vectors",
            Corpus::Slices => "slices",
        }
    }
}

impl Method {
    /// Whether the method has a similarity part (dense or BM25 functions).
    pub fn uses_similar_functions(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dense)
    }
    /// Whether the method has a similarity part at all (functions or SimpleRAG slices).
    pub fn uses_similarity(self) -> bool {
        self.uses_similar_functions() || self == Method::Simplerag
    }
    pub fn uses_dyretriever(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dyretriever)
    }
    /// What has to be embedded for this method with `similarity`.
    pub fn corpus(self, similarity: Similarity) -> Option<Corpus> {
        match self {
            Method::Simplerag => Some(Corpus::Slices),
            _ if self.uses_similar_functions() && similarity == Similarity::Dense => {
                Some(Corpus::Functions)
            }
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Method::Dycoder => "dycoder",
            Method::Dyretriever => "dyretriever",
            Method::Dense => "dense",
            Method::Simplerag => "simplerag",
            Method::Direct => "direct",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub method: Method,
    pub similarity: Similarity,
    pub dy: DyOptions,
    /// Similar functions (or SimpleRAG slices) in the context (the paper's top-10).
    pub top_sim: usize,
    pub generation: GenerateOptions,
}

impl PipelineOptions {
    pub fn new(method: Method) -> Self {
        Self {
            method,
            similarity: Similarity::Dense,
            dy: DyOptions::default(),
            top_sim: 10,
            generation: GenerateOptions::default(),
        }
    }
}

/// The embedder and the repository's vectors of the method's [`Corpus`].
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
    /// `dyretriever`, `dense`, `bm25` or `simplerag`; a SimpleRAG slice is named `path:start-end`.
    pub source: &'static str,
    pub code: String,
}

/// A result of the similarity part: a function or a SimpleRAG slice, with its score.
#[derive(Debug, Clone, Serialize)]
pub struct SimilarItem {
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
    /// What the similarity part found, best first.
    pub similar: Vec<SimilarItem>,
    pub generation: Generation,
    pub similarity_s: f64,
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
    let started = Instant::now();
    let similar = similar_context(view, target, embeddings, opts)?;
    let similarity_s = started.elapsed().as_secs_f64();

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

    // One deduplicated context: DyRetriever's picks first, then the similar code.
    let mut seen = HashSet::new();
    let mut context = Vec::new();
    for id in dy_functions {
        let (Some(f), Some(code)) = (view.function(id), view.function_code(id)) else {
            continue;
        };
        if seen.insert((f.path.clone(), f.span.start_line)) {
            context.push(ContextItem {
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                start_line: f.span.start_line,
                source: "dyretriever",
                code: code.into_owned(),
            });
        }
    }
    for (item, _) in &similar {
        if seen.insert((item.path.clone(), item.start_line)) {
            context.push(item.clone());
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
    Ok(PipelineRun {
        method: opts.method,
        context,
        dyretriever: dy_trace,
        similar: similar
            .into_iter()
            .map(|(c, score)| SimilarItem {
                qualname: c.qualname,
                path: c.path,
                score,
            })
            .collect(),
        generation,
        similarity_s,
        dyretriever_s,
        generation_s,
    })
}

/// The similarity part of the method's context, best first, with scores.
fn similar_context(
    view: &MaskedView,
    target: &Target,
    embeddings: Option<&Embeddings>,
    opts: &PipelineOptions,
) -> Result<Vec<(ContextItem, f32)>, PipelineError> {
    let query = text::query_text(&target.signature, target.docstring.as_deref());
    let embeddings = || embeddings.ok_or(PipelineError::NoEmbeddings(opts.method.name()));
    let hits = match (opts.method, opts.similarity) {
        (Method::Simplerag, _) => {
            let e = embeddings()?;
            let found = slices::top_k(view, e.embedder, e.index, &query, opts.top_sim)?;
            return Ok(found
                .into_iter()
                .map(|s| {
                    let item = ContextItem {
                        qualname: s.name(),
                        path: s.path.clone(),
                        start_line: s.start_line,
                        source: "simplerag",
                        code: s.code.clone(),
                    };
                    (item, s.score)
                })
                .collect());
        }
        (m, _) if !m.uses_similar_functions() => return Ok(Vec::new()),
        (_, Similarity::Dense) => {
            let e = embeddings()?;
            dense::top_k(view, e.embedder, e.index, &query, opts.top_sim)?
        }
        (_, Similarity::Bm25) => bm25::top_k(view, &query, opts.top_sim),
    };
    let source = match opts.similarity {
        Similarity::Dense => "dense",
        Similarity::Bm25 => "bm25",
    };
    Ok(hits
        .iter()
        .filter_map(|h| {
            let (f, code) = (view.function(h.id)?, view.function_code(h.id)?);
            let item = ContextItem {
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                start_line: f.span.start_line,
                source,
                code: code.into_owned(),
            };
            Some((item, h.score))
        })
        .collect())
}
