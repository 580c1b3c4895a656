//! Line completion at a cursor: retrieve (SaraCoder, one of its baselines, or nothing), build
//! the line prompt, let the model continue the unfinished code until its first complete
//! statement.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::line::{line_prompt, LinePrompt};
use crate::embed::Embedder;
use crate::graph::SliceLimits;
use crate::index::vectors::IndexError;
use crate::llm::{GenerateRequest, Llm, LlmError, Prompt};
use crate::repo::lang::lexical::first_statement;
use crate::repo::model::Lang;
use crate::repo::Repository;
use crate::retrieve::saracoder::eaid::{eaid, Eaid};
use crate::retrieve::saracoder::{
    cut_before, retrieve, Codebase, Cursor, Options, Rank, Retrieval, RetrieveError, StoreReport,
    Units,
};

/// Which retrieval feeds the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LineMethod {
    /// The unfinished code alone.
    None,
    /// RepoCoder's sliding windows (20 lines every 10), the best by Jaccard similarity.
    Vanilla,
    /// Vanilla retrieval, a first completion, then retrieval again with the completed line.
    Repocoder,
    /// GraphCoder: context-graph slices, the best ten by Jaccard reranked by D-SED.
    Graphcoder,
    /// Slices through SaraCoder's layers, plus the imported entities (EAID).
    Saracoder,
}

impl LineMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            LineMethod::None => "none",
            LineMethod::Vanilla => "vanilla",
            LineMethod::Repocoder => "repocoder",
            LineMethod::Graphcoder => "graphcoder",
            LineMethod::Saracoder => "saracoder",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CompleteOptions {
    pub method: LineMethod,
    /// `top_k`, pool and weights; the ranking follows from the method and switches.
    pub retrieval: Options,
    pub limits: SliceLimits,
    /// SaraCoder: imported entities and external names in the prompt (`--no-eaid`).
    pub eaid: bool,
    /// SaraCoder: the hierarchical layers (`--no-hfop`: the best by Jaccard).
    pub hfop: bool,
    /// SaraCoder: context-graph slices (`--no-ccg`: windows, no structural score).
    pub ccg: bool,
    /// Prompt tokens; the unfinished code takes at most half.
    pub budget: usize,
    pub max_new_tokens: usize,
}

impl Default for CompleteOptions {
    fn default() -> Self {
        Self {
            method: LineMethod::Saracoder,
            retrieval: Options::default(),
            limits: SliceLimits::default(),
            eaid: true,
            hfop: true,
            ccg: true,
            // The paper's window (A.5.2).
            budget: 2048,
            // One statement; generation stops at its end, long calls span a few lines.
            max_new_tokens: 64,
        }
    }
}

impl CompleteOptions {
    /// The units, ranking and EAID switch the method and its switches come to; `None` for no
    /// retrieval.
    pub fn plan(&self) -> Option<(Units, Rank, bool)> {
        match self.method {
            LineMethod::None => None,
            LineMethod::Vanilla | LineMethod::Repocoder => {
                Some((Units::Windows, Rank::Jaccard, false))
            }
            LineMethod::Graphcoder => Some((Units::Slices, Rank::Dsed, false)),
            LineMethod::Saracoder => Some((
                if self.ccg {
                    Units::Slices
                } else {
                    Units::Windows
                },
                if self.hfop { Rank::Hfop } else { Rank::Jaccard },
                self.eaid,
            )),
        }
    }

    /// Whether the method needs an embedder.
    pub fn needs_embedder(&self) -> bool {
        matches!(self.plan(), Some((_, Rank::Hfop, _)))
    }

    /// The method with its switches, as runs are named: `saracoder-noeaid-noccg`.
    pub fn variant_name(&self) -> String {
        let mut name = self.method.as_str().to_string();
        if self.method == LineMethod::Saracoder {
            for (on, tag) in [
                (self.eaid, "noeaid"),
                (self.hfop, "nohfop"),
                (self.ccg, "noccg"),
            ] {
                if !on {
                    name.push('-');
                    name.push_str(tag);
                }
            }
        }
        if self.retrieval.top_k != Options::default().top_k && self.method != LineMethod::None {
            name.push_str(&format!("-top{}", self.retrieval.top_k));
        }
        name
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    #[error("{0} is not a Python or Java file of the repository")]
    Unsupported(String),
    #[error("line {line} is past the end of {path} ({lines} lines)")]
    PastEnd {
        path: String,
        line: usize,
        lines: usize,
    },
    #[error(transparent)]
    Retrieve(#[from] RetrieveError),
    #[error(transparent)]
    Llm(#[from] LlmError),
}

#[derive(Debug, Clone, Serialize)]
pub struct LineCompletion {
    pub method: String,
    /// The first complete statement of the model's continuation.
    pub completion: String,
    /// What the model wrote before the cut.
    pub raw: String,
    /// RepoCoder: the first round's completion, whose line the second retrieval used.
    pub first_round: Option<String>,
    pub prompt: LinePrompt,
    pub retrieval: Option<Retrieval>,
    pub eaid: Option<Eaid>,
    /// Building the repository's codebase (0 when an earlier cursor built it).
    pub codebase_ms: f64,
    /// What reading and writing the stored codebase did, when this cursor opened it.
    pub store: Option<StoreReport>,
    pub retrieve_ms: f64,
    pub generate_ms: f64,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
}

/// Completes cursors of one repository, building each kind of codebase once (for one set of
/// slice limits: make a new completer for others).
pub struct Completer {
    repo: Arc<Repository>,
    codebases: HashMap<Units, Codebase>,
    /// Where codebases and key vectors are kept between processes; `None`: in memory only.
    store: Option<PathBuf>,
}

impl Completer {
    pub fn new(repo: Arc<Repository>) -> Self {
        Self {
            repo,
            codebases: HashMap::new(),
            store: None,
        }
    }

    /// A completer that reads its codebases and key vectors from `dir` (the repository's cache
    /// folder) and writes back what it built; [`Completer::save_vectors`] writes the vectors.
    pub fn with_store(repo: Arc<Repository>, dir: PathBuf) -> Self {
        Self {
            store: Some(dir),
            ..Self::new(repo)
        }
    }

    /// Writes the key vectors embedded since the store was read, for each codebase; returns
    /// whether anything was written. Nothing without a store.
    pub fn save_vectors(&self, embedder: &dyn Embedder) -> Result<bool, IndexError> {
        let Some(dir) = &self.store else {
            return Ok(false);
        };
        let mut wrote = false;
        for codebase in self.codebases.values() {
            wrote |= codebase.save_vectors(&store_dir(dir, codebase.units), embedder.info())?;
        }
        Ok(wrote)
    }

    /// Completes the line `line` (1-based) of `path`: the code above it is the unfinished
    /// code, everything from it on is hidden from retrieval and prompt.
    pub fn complete_line(
        &mut self,
        llm: &mut dyn Llm,
        embedder: Option<&dyn Embedder>,
        path: &str,
        line: usize,
        opts: &CompleteOptions,
    ) -> Result<LineCompletion, CompleteError> {
        let repo = Arc::clone(&self.repo);
        let unfinished = unfinished_at(&repo, path, line)?;
        self.complete_unfinished(llm, embedder, path, unfinished, opts)
    }

    /// The prompt [`Completer::complete_line`] would give the model, without running it
    /// (RepoCoder's first round: its second depends on what the model writes).
    pub fn prompt_line(
        &mut self,
        llm: &dyn Llm,
        embedder: Option<&dyn Embedder>,
        path: &str,
        line: usize,
        opts: &CompleteOptions,
    ) -> Result<LineContext, CompleteError> {
        let repo = Arc::clone(&self.repo);
        let unfinished = unfinished_at(&repo, path, line)?;
        self.prompt_unfinished(llm, embedder, path, unfinished, opts)
    }

    /// The prompt [`Completer::complete_unfinished`] would give the model, without running it.
    pub fn prompt_unfinished(
        &mut self,
        llm: &dyn Llm,
        embedder: Option<&dyn Embedder>,
        path: &str,
        unfinished: &str,
        opts: &CompleteOptions,
    ) -> Result<LineContext, CompleteError> {
        let p = self.prepare(embedder, path, unfinished, opts)?;
        let input = LineInput {
            lang: p.lang,
            unfinished,
            external: p.external.as_ref(),
        };
        let prompt = build_prompt(llm, p.retrieval.as_ref(), &input, opts);
        let prompt_tokens = count(llm, &prompt.text);
        Ok(LineContext {
            method: opts.variant_name(),
            prompt,
            prompt_tokens,
            retrieval: p.retrieval,
            eaid: p.external,
            codebase_ms: p.codebase_ms,
            store: p.store,
            retrieve_ms: p.retrieve_ms,
        })
    }

    /// Completes the code `unfinished` of a file at `path` (given by an editor: it need not
    /// match the file on disk, nor exist there). The cursor is at its end. Imported entities
    /// come from the repository's own copy of the file, above the cursor's line.
    pub fn complete_unfinished(
        &mut self,
        llm: &mut dyn Llm,
        embedder: Option<&dyn Embedder>,
        path: &str,
        unfinished: &str,
        opts: &CompleteOptions,
    ) -> Result<LineCompletion, CompleteError> {
        let mut p = self.prepare(embedder, path, unfinished, opts)?;
        let line = LineInput {
            lang: p.lang,
            unfinished,
            external: p.external.as_ref(),
        };
        let mut done = generate(llm, p.retrieval.as_ref(), &line, opts)?;
        let mut first_round = None;
        if let (LineMethod::Repocoder, Some(c)) = (opts.method, p.cursor.as_mut()) {
            let started = Instant::now();
            c.requery(unfinished, &done.completion);
            p.retrieval = Some(retrieve(c, embedder, &p.retrieval_opts)?);
            p.retrieve_ms += started.elapsed().as_secs_f64() * 1e3;
            let second = generate(llm, p.retrieval.as_ref(), &line, opts)?;
            let first = std::mem::replace(&mut done, second);
            // Both rounds' cost counts.
            done.prompt_tokens += first.prompt_tokens;
            done.generated_tokens += first.generated_tokens;
            done.generate_ms += first.generate_ms;
            first_round = Some(first.completion);
        }
        Ok(LineCompletion {
            method: opts.variant_name(),
            completion: done.completion,
            raw: done.raw,
            first_round,
            prompt: done.prompt,
            retrieval: p.retrieval,
            eaid: p.external,
            codebase_ms: p.codebase_ms,
            store: p.store,
            retrieve_ms: p.retrieve_ms,
            generate_ms: done.generate_ms,
            prompt_tokens: done.prompt_tokens,
            generated_tokens: done.generated_tokens,
        })
    }

    /// Everything before the model: the codebase (built on first use), the cursor's
    /// retrieval and its imported entities.
    fn prepare(
        &mut self,
        embedder: Option<&dyn Embedder>,
        path: &str,
        unfinished: &str,
        opts: &CompleteOptions,
    ) -> Result<Prepared<'_>, CompleteError> {
        let lang = crate::repo::lang::for_path(path)
            .map(|l| l.lang())
            .ok_or_else(|| CompleteError::Unsupported(path.to_string()))?;
        let plan = opts.plan();
        if matches!(plan, Some((_, Rank::Hfop, _))) && embedder.is_none() {
            return Err(RetrieveError::NoEmbedder.into());
        }
        let repo = &*self.repo;
        let started = Instant::now();
        let mut store = None;
        let codebase = match plan {
            Some((units, _, _)) => Some(&*match self.codebases.entry(units) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(v) => {
                    let (codebase, report) =
                        open_codebase(repo, units, &opts.limits, self.store.as_deref(), embedder);
                    store = report;
                    v.insert(codebase)
                }
            }),
            None => None,
        };
        let codebase_ms = started.elapsed().as_secs_f64() * 1e3;
        let cursor_line = unfinished.lines().count() + 1;

        let started = Instant::now();
        let cursor = codebase.map(|c| c.cursor(path, unfinished));
        let retrieval_opts = Options {
            rank: plan.map_or(Rank::Jaccard, |p| p.1),
            ..opts.retrieval.clone()
        };
        let retrieval = match &cursor {
            Some(c) => Some(retrieve(c, embedder, &retrieval_opts)?),
            None => None,
        };
        let external = plan.filter(|p| p.2).map(|_| eaid(repo, path, cursor_line));
        Ok(Prepared {
            lang,
            cursor,
            retrieval_opts,
            retrieval,
            external,
            codebase_ms,
            store,
            retrieve_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// The prompt of a cursor and what went into it, the model not run.
#[derive(Debug, Clone, Serialize)]
pub struct LineContext {
    pub method: String,
    pub prompt: LinePrompt,
    pub prompt_tokens: usize,
    pub retrieval: Option<Retrieval>,
    pub eaid: Option<Eaid>,
    pub codebase_ms: f64,
    /// What reading and writing the stored codebase did, when this cursor opened it.
    pub store: Option<StoreReport>,
    pub retrieve_ms: f64,
}

/// A cursor's retrieval and imported entities, ready for the prompt.
struct Prepared<'c> {
    lang: Lang,
    cursor: Option<Cursor<'c>>,
    retrieval_opts: Options,
    retrieval: Option<Retrieval>,
    external: Option<Eaid>,
    codebase_ms: f64,
    store: Option<StoreReport>,
    retrieve_ms: f64,
}

/// The code of `path` above `line` (1-based), checked to be a line of a source file of `repo`.
fn unfinished_at<'r>(
    repo: &'r Repository,
    path: &str,
    line: usize,
) -> Result<&'r str, CompleteError> {
    let file = repo
        .file_id(path)
        .map(|f| repo.file(f))
        .filter(|f| f.lang.is_some())
        .ok_or_else(|| CompleteError::Unsupported(path.to_string()))?;
    let text = file.text.as_deref().unwrap_or_default();
    let lines = text.lines().count();
    if line == 0 || line > lines + 1 {
        return Err(CompleteError::PastEnd {
            path: path.to_string(),
            line,
            lines,
        });
    }
    Ok(cut_before(text, line))
}

/// The folder of the stored codebase of `units` (slices and windows keep separate vectors).
fn store_dir(dir: &Path, units: Units) -> PathBuf {
    dir.join(match units {
        Units::Slices => "saracoder-slices",
        Units::Windows => "saracoder-windows",
    })
}

/// A codebase built, or read from the store in `dir` with the key vectors of `embedder`.
fn open_codebase(
    repo: &Repository,
    units: Units,
    limits: &SliceLimits,
    dir: Option<&Path>,
    embedder: Option<&dyn Embedder>,
) -> (Codebase, Option<StoreReport>) {
    let Some(dir) = dir else {
        return (Codebase::build(repo, units, limits), None);
    };
    let dir = store_dir(dir, units);
    let (codebase, mut report) = Codebase::open(repo, units, limits, &dir);
    if let Some(e) = embedder {
        match codebase.load_vectors(&dir, e.info()) {
            Ok(n) => report.vectors_read = n,
            Err(err) => report.problem = Some(format!("key vectors not read ({err})")),
        }
    }
    (codebase, Some(report))
}

/// Tokens of `text` for `llm` (a third of its bytes if it cannot say).
fn count(llm: &dyn Llm, text: &str) -> usize {
    llm.count_tokens(&Prompt::Text(text.to_string()))
        .unwrap_or(text.len() / 3)
}

/// The line prompt of `line` with what was retrieved for it, within the budget.
fn build_prompt(
    llm: &dyn Llm,
    retrieval: Option<&Retrieval>,
    line: &LineInput,
    opts: &CompleteOptions,
) -> LinePrompt {
    let picks = retrieval.map_or(&[][..], |r| &r.picks[..]);
    line_prompt(
        picks,
        line.external.unwrap_or(&Eaid::default()),
        line.unfinished,
        line.lang,
        opts.budget,
        &|s: &str| count(llm, s),
    )
}

/// One prompt and one generation.
struct Generated {
    completion: String,
    raw: String,
    prompt: LinePrompt,
    prompt_tokens: usize,
    generated_tokens: usize,
    generate_ms: f64,
}

/// What the prompt is built around.
struct LineInput<'a> {
    lang: Lang,
    unfinished: &'a str,
    external: Option<&'a Eaid>,
}

fn generate(
    llm: &mut dyn Llm,
    retrieval: Option<&Retrieval>,
    line: &LineInput,
    opts: &CompleteOptions,
) -> Result<Generated, CompleteError> {
    let prompt = build_prompt(llm, retrieval, line, opts);
    let mut request = GenerateRequest::new(Prompt::Text(prompt.text.clone()));
    request.max_new_tokens = opts.max_new_tokens;
    request.until_statement = Some(line.lang);
    request.code_first = true;
    let started = Instant::now();
    let response = llm.generate(&request)?;
    let generate_ms = started.elapsed().as_secs_f64() * 1e3;
    let completion = first_statement(response.text.trim_start_matches('\n'), line.lang)
        .trim_end()
        .to_string();
    Ok(Generated {
        completion,
        raw: response.text,
        prompt,
        prompt_tokens: response.prompt_tokens,
        generated_tokens: response.generated_tokens,
        generate_ms,
    })
}
