//! Retrieval for a cursor, over one codebase of the repository's units (GraphCoder's
//! context-graph slices, one per statement, or RepoCoder's sliding windows), ranked one of
//! three ways:
//! - **Jaccard**: the `top_k` of highest Jaccard similarity of token sets (RepoCoder's vanilla
//!   retrieval; SaraCoder without HFOP);
//! - **D-SED** (GraphCoder): the `max(top_k, 10)` best by Jaccard, reranked by decayed subgraph
//!   edit distance;
//! - **HFOP** (SaraCoder 3.2), each layer narrowing the last:
//!   1. candidates: the `top_k × pool` best by Jaccard (A.4.1);
//!   2. semantic alignment distillation (SAD): cosine of embedder vectors, keeping those at or
//!      above the 0.75 quantile of the candidates' cosines;
//!   3. redundancy-aware pruning (RAP): exact duplicates dropped (by a hash of the text; the
//!      paper uses MD5, any exact hash does);
//!   4. topological proximity (TPM): `score = α·Jaccard + (1−α)·D-SED similarity` (Jaccard
//!      alone over windows, which have no graph: the paper's "w/o CCG");
//!   5. diversity-aware reranking: MMR over the scores, vectors' cosines as redundancy.
//!
//! The codebase is built once per repository from whole files; a [`Cursor`] replaces the
//! cursor's file by the code above the cursor, so only those lines take part (as query and as
//! candidates), and the query itself is not a candidate. Later code of other files is not
//! hidden (A.4). Candidate vectors are kept between cursors.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::rank::{dsed, mmr, token_spans, GAMMA, LAMBDA};
use crate::embed::{EmbedError, Embedder, TextKind};
use crate::graph::{slice, Ccg, Slice, SliceLimits};
use crate::index::vectors::dot;
use crate::repo::model::Lang;
use crate::repo::Repository;
use crate::retrieve::slices::{windows, WINDOW_LINES};

/// What the codebase is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Units {
    /// One context-graph slice per statement.
    Slices,
    /// RepoCoder's windows: 20 lines every 10.
    Windows,
}

/// How candidates are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rank {
    Jaccard,
    Dsed,
    Hfop,
}

#[derive(Debug, Clone, Serialize)]
pub struct Options {
    /// Snippets kept at the end (the paper saturates at 3–4).
    pub top_k: usize,
    /// Candidates per kept snippet taken by Jaccard similarity (the paper's `p`).
    pub pool: usize,
    /// SAD keeps cosines at or above this quantile of the candidates'.
    pub quantile: f64,
    /// Weight of text similarity against D-SED similarity in the TPM score.
    pub alpha: f64,
    pub gamma: f64,
    pub lambda: f64,
    pub rank: Rank,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            top_k: 4,
            pool: 10,
            quantile: 0.75,
            alpha: 0.5,
            gamma: GAMMA,
            lambda: LAMBDA,
            rank: Rank::Hfop,
        }
    }
}

/// GraphCoder's coarse stage keeps this many by Jaccard before the D-SED rerank.
const COARSE: usize = 10;

/// Lines of the file after a slice's statement that its snippet shows: what followed a similar
/// context is what the model needs to see.
pub const FOLLOW_LINES: usize = 4;

/// Which graph a slice belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum GraphRef {
    Base(usize),
    Cursor,
}

/// One unit of the codebase.
#[derive(Debug, Clone)]
pub struct Snippet {
    pub path: String,
    /// Lines the key spans (1-based, inclusive).
    pub start_line: usize,
    pub end_line: usize,
    /// What similarity compares: the slice's statements, or the window's lines.
    pub key: String,
    /// What the prompt shows: the key, then (for a slice) the next lines of its file.
    pub text: String,
    /// The key's token set, as ids of the codebase's vocabulary, ascending.
    tokens: Vec<u32>,
    slice: Option<(GraphRef, Slice)>,
}

/// Every unit of a repository's source files.
pub struct Codebase {
    pub units: Units,
    limits: SliceLimits,
    graphs: Vec<Ccg>,
    snippets: Vec<Snippet>,
    /// Embedder vectors of keys (by hash of the key), kept across cursors.
    vectors: Mutex<HashMap<[u8; 32], Vec<f32>>>,
    /// How many of them the disk store holds (see `store`).
    pub(super) stored_vectors: AtomicUsize,
    /// Token ids: Jaccard similarity over thousands of units compares integers, not strings.
    vocab: HashMap<String, u32>,
}

/// Ascending ids of `text`'s tokens; `id` names each token.
fn token_ids(text: &str, id: &mut dyn FnMut(&str) -> u32) -> Vec<u32> {
    let mut out: Vec<u32> = token_spans(text).map(id).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The id of `token` in `vocab`, a new one (`first` + its size) when missing; a token is
/// copied only the first time it is seen.
fn intern(vocab: &mut HashMap<String, u32>, token: &str, first: usize) -> u32 {
    if let Some(&id) = vocab.get(token) {
        return id;
    }
    let id = (first + vocab.len()) as u32;
    vocab.insert(token.to_string(), id);
    id
}

/// Jaccard similarity of two ascending id sets (1 for two empty sets, as [`jaccard`]).
fn jaccard_ids(a: &[u32], b: &[u32]) -> f64 {
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - common;
    if union == 0 {
        return 1.0;
    }
    common as f64 / union as f64
}

/// One unit of a file before its tokens are interned: what the disk cache keeps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Unit {
    start_line: usize,
    end_line: usize,
    key: String,
    text: String,
    slice: Option<Slice>,
}

/// The units of one file's text, with the graph their slices belong to.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct FileUnits {
    graph: Option<Ccg>,
    units: Vec<Unit>,
}

pub(super) fn file_units(text: &str, lang: Lang, units: Units, limits: &SliceLimits) -> FileUnits {
    let lines: Vec<&str> = text.lines().collect();
    let span = |a: usize, b: usize| lines[a - 1..b.min(lines.len())].join("\n");
    match units {
        Units::Windows => FileUnits {
            graph: None,
            units: windows(lines.len())
                .into_iter()
                .map(|(a, b)| (a, b, span(a, b)))
                .filter(|(_, _, t)| !t.trim().is_empty())
                .map(|(start_line, end_line, t)| Unit {
                    start_line,
                    end_line,
                    key: t.clone(),
                    text: t,
                    slice: None,
                })
                .collect(),
        },
        Units::Slices => {
            let Some(ccg) = Ccg::build(lang, text) else {
                return FileUnits::default();
            };
            let units = (0..ccg.statements.len())
                .map(|target| {
                    let s = slice(&ccg, target, limits);
                    let key = s.text(&ccg);
                    let members = s.statements.iter().map(|&id| &ccg.statements[id]);
                    let start = members.clone().map(|st| st.start_line).min().unwrap_or(1);
                    let end = members.map(|st| st.end_line).max().unwrap_or(start);
                    let mut text = key.clone();
                    if end < lines.len() {
                        text.push('\n');
                        text.push_str(&span(end + 1, end + FOLLOW_LINES));
                    }
                    Unit {
                        start_line: start,
                        end_line: end,
                        key,
                        text,
                        slice: Some(s),
                    }
                })
                .collect();
            FileUnits {
                graph: Some(ccg),
                units,
            }
        }
    }
}

/// The snippets of a file's units; `graph` is where their slices' graph will be found.
fn snippets(
    path: &str,
    units: Vec<Unit>,
    graph: GraphRef,
    id: &mut dyn FnMut(&str) -> u32,
) -> Vec<Snippet> {
    units
        .into_iter()
        .map(|u| Snippet {
            path: path.to_string(),
            start_line: u.start_line,
            end_line: u.end_line,
            tokens: token_ids(&u.key, id),
            key: u.key,
            text: u.text,
            slice: u.slice.map(|s| (graph, s)),
        })
        .collect()
}

/// Each Python and Java file of `repo` with its text.
pub(super) fn sources(repo: &Repository) -> impl Iterator<Item = (&str, Lang, &str)> {
    repo.files()
        .iter()
        .filter_map(|f| match (f.lang, f.text.as_deref()) {
            (Some(lang), Some(text)) => Some((f.path.as_str(), lang, text)),
            _ => None,
        })
}

impl Codebase {
    /// The units of every Python and Java file of `repo`, whole.
    pub fn build(repo: &Repository, units: Units, limits: &SliceLimits) -> Self {
        Self::assemble(
            units,
            limits,
            sources(repo).map(|(path, lang, text)| (path, file_units(text, lang, units, limits))),
        )
    }

    /// A codebase of each file's units, in order.
    pub(super) fn assemble<'a>(
        units: Units,
        limits: &SliceLimits,
        files: impl Iterator<Item = (&'a str, FileUnits)>,
    ) -> Self {
        let mut out = Codebase {
            units,
            limits: *limits,
            graphs: Vec::new(),
            snippets: Vec::new(),
            vectors: Mutex::new(HashMap::new()),
            stored_vectors: AtomicUsize::new(0),
            vocab: HashMap::new(),
        };
        let mut vocab: HashMap<String, u32> = HashMap::new();
        let mut id = |t: &str| intern(&mut vocab, t, 0);
        for (path, file) in files {
            let g = GraphRef::Base(out.graphs.len());
            out.graphs.extend(file.graph);
            out.snippets.extend(snippets(path, file.units, g, &mut id));
        }
        out.vocab = vocab;
        out
    }

    pub fn len(&self) -> usize {
        self.snippets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.snippets.is_empty()
    }

    /// The codebase as seen from a cursor in `path`, whose code above the cursor is
    /// `unfinished`: that file's units come from `unfinished`, and the query is its last
    /// statement's slice (slices) or its last 20 lines (windows).
    pub fn cursor(&self, path: &str, unfinished: &str) -> Cursor<'_> {
        let lang = crate::repo::lang::for_path(path).map_or(Lang::Python, |l| l.lang());
        let mut extra: HashMap<String, u32> = HashMap::new();
        let mut id = |t: &str| self.token_id(&mut extra, t);
        let file = file_units(unfinished, lang, self.units, &self.limits);
        let graph = file.graph;
        let mut own = snippets(path, file.units, GraphRef::Cursor, &mut id);
        let query = match self.units {
            Units::Slices => own.pop().filter(|_| graph.is_some()),
            Units::Windows => {
                let lines = unfinished.lines().count();
                let first = lines.saturating_sub(WINDOW_LINES) + 1;
                // Windows overlapping the query would only repeat it.
                own.retain(|s| s.end_line < first);
                let text = last_lines(unfinished, WINDOW_LINES);
                (!text.trim().is_empty()).then(|| Snippet {
                    path: path.to_string(),
                    start_line: first,
                    end_line: lines,
                    tokens: token_ids(&text, &mut id),
                    key: text.clone(),
                    text,
                    slice: None,
                })
            }
        };
        Cursor {
            base: self,
            path: path.to_string(),
            graph,
            own,
            query,
            extra,
        }
    }

    /// The id of a token of a cursor's code: the codebase's, or a new one kept in `extra`.
    fn token_id(&self, extra: &mut HashMap<String, u32>, token: &str) -> u32 {
        match self.vocab.get(token) {
            Some(&id) => id,
            None => intern(extra, token, self.vocab.len()),
        }
    }

    pub(super) fn vector_cache(&self) -> MutexGuard<'_, HashMap<[u8; 32], Vec<f32>>> {
        self.vectors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Vectors of `keys`, embedding only those not seen before.
    fn vectors(&self, embedder: &dyn Embedder, keys: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let hashes: Vec<[u8; 32]> = keys.iter().map(|k| digest(k)).collect();
        let mut cache = self.vector_cache();
        let mut fresh = HashSet::new();
        let missing: Vec<usize> = (0..keys.len())
            .filter(|&i| !cache.contains_key(&hashes[i]) && fresh.insert(hashes[i]))
            .collect();
        if !missing.is_empty() {
            let texts: Vec<&str> = missing.iter().map(|&i| keys[i]).collect();
            let vs = embedder.embed(&texts, TextKind::Document)?;
            for (k, &i) in missing.iter().enumerate() {
                cache.insert(hashes[i], vs.row(k).to_vec());
            }
        }
        Ok(hashes.iter().map(|h| cache[h].clone()).collect())
    }
}

fn digest(text: &str) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(&Sha256::digest(text.as_bytes()));
    out
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The text of the lines before `line` (1-based): the code above a cursor.
pub fn cut_before(text: &str, line: usize) -> &str {
    let end = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    &text[..end]
}

/// A codebase seen from a cursor.
pub struct Cursor<'a> {
    base: &'a Codebase,
    path: String,
    graph: Option<Ccg>,
    /// The units of the code above the cursor, the query left out.
    own: Vec<Snippet>,
    query: Option<Snippet>,
    /// Ids of the cursor's tokens the codebase has not seen.
    extra: HashMap<String, u32>,
}

impl Cursor<'_> {
    /// The query's text, when the code above the cursor has a statement.
    pub fn query_text(&self) -> Option<&str> {
        self.query.as_ref().map(|q| q.key.as_str())
    }

    /// Every candidate: the other files' units and those of the code above the cursor.
    pub fn candidates(&self) -> Vec<&Snippet> {
        self.base
            .snippets
            .iter()
            .filter(|s| s.path != self.path)
            .chain(&self.own)
            .collect()
    }

    /// RepoCoder's second round: the query becomes the last lines of the code above the cursor
    /// followed by the generated lines, 20 lines in all (windows only; slices keep theirs).
    pub fn requery(&mut self, unfinished: &str, generated: &str) {
        if self.base.units != Units::Windows || generated.trim().is_empty() {
            return;
        }
        let joined = format!("{}{}", unfinished, generated.trim_end_matches('\n'));
        let text = last_lines(&joined, WINDOW_LINES);
        let (base, extra) = (self.base, &mut self.extra);
        let ids = token_ids(&text, &mut |t| base.token_id(extra, t));
        if let Some(q) = &mut self.query {
            q.tokens = ids;
            q.key = text.clone();
            q.text = text;
        }
    }

    fn graph(&self, r: GraphRef) -> &Ccg {
        match r {
            GraphRef::Base(i) => &self.base.graphs[i],
            GraphRef::Cursor => self.graph.as_ref().expect("cursor slices have a graph"),
        }
    }
}

/// One snippet kept, with the scores that kept it.
#[derive(Debug, Clone, Serialize)]
pub struct Pick {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    pub jaccard: f64,
    /// HFOP only.
    pub cosine: Option<f64>,
    /// Over slices, with D-SED or HFOP.
    pub dsed: Option<f64>,
    pub score: f64,
}

/// What each layer did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Retrieval {
    pub query: String,
    pub candidates: usize,
    pub sad_threshold: Option<f64>,
    pub sad_kept: usize,
    pub rap_dropped: usize,
    /// Most relevant first.
    pub picks: Vec<Pick>,
    /// Milliseconds per layer (`jaccard`, `dsed`, `sad`, `rap`, `tpm`, `mmr`).
    pub stages_ms: BTreeMap<&'static str, f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RetrieveError {
    #[error("SaraCoder's HFOP ranking needs an embedder")]
    NoEmbedder,
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// Ranks the cursor's candidates; an empty retrieval when the code above the cursor has no
/// statement. HFOP needs `embedder`.
pub fn retrieve(
    cursor: &Cursor,
    embedder: Option<&dyn Embedder>,
    opts: &Options,
) -> Result<Retrieval, RetrieveError> {
    let Some(q) = &cursor.query else {
        return Ok(Retrieval::default());
    };
    let mut clock = Instant::now();
    let mut lap = |out: &mut Retrieval, stage: &'static str| {
        out.stages_ms
            .insert(stage, clock.elapsed().as_secs_f64() * 1e3);
        clock = Instant::now();
    };
    let all = cursor.candidates();
    let mut scored: Vec<(&Snippet, f64)> = all
        .iter()
        .map(|s| (*s, jaccard_ids(&q.tokens, &s.tokens)))
        .collect();
    // Ties go to the earlier unit: the order of files and lines.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let pick = |s: &Snippet, jac: f64| Pick {
        path: s.path.clone(),
        start_line: s.start_line,
        end_line: s.end_line,
        text: s.text.clone(),
        jaccard: jac,
        cosine: None,
        dsed: None,
        score: jac,
    };
    let structure = |s: &Snippet| -> Option<f64> {
        let ((qr, qs), (cr, cs)) = (q.slice.as_ref()?, s.slice.as_ref()?);
        Some(dsed(cursor.graph(*qr), qs, cursor.graph(*cr), cs, opts.gamma).similarity())
    };
    let mut out = Retrieval {
        query: q.key.clone(),
        ..Retrieval::default()
    };
    lap(&mut out, "jaccard");
    let hfop = match (opts.rank, embedder) {
        (Rank::Jaccard, _) => None,
        (Rank::Dsed, _) => {
            scored.truncate(opts.top_k.max(COARSE));
            out.candidates = scored.len();
            let mut ranked: Vec<Pick> = scored
                .iter()
                .map(|&(s, jac)| {
                    let mut p = pick(s, jac);
                    p.dsed = structure(s);
                    p.score = p.dsed.unwrap_or(jac);
                    p
                })
                .collect();
            ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
            ranked.truncate(opts.top_k);
            out.picks = ranked;
            lap(&mut out, "dsed");
            return Ok(out);
        }
        (Rank::Hfop, Some(e)) => Some(e),
        (Rank::Hfop, None) => return Err(RetrieveError::NoEmbedder),
    };
    let Some(embedder) = hfop else {
        scored.truncate(opts.top_k);
        out.candidates = scored.len();
        out.picks = scored.iter().map(|&(s, j)| pick(s, j)).collect();
        return Ok(out);
    };
    scored.truncate(opts.top_k * opts.pool);
    out.candidates = scored.len();
    if scored.is_empty() {
        return Ok(out);
    }

    // SAD
    let keys: Vec<&str> = scored.iter().map(|(s, _)| s.key.as_str()).collect();
    let qv = embedder.embed(&[q.key.as_str()], TextKind::Query)?;
    let vs = cursor.base.vectors(embedder, &keys)?;
    let cosines: Vec<f64> = vs.iter().map(|v| f64::from(dot(qv.row(0), v))).collect();
    let threshold = quantile(&cosines, opts.quantile);
    out.sad_threshold = Some(threshold);
    let kept: Vec<usize> = (0..scored.len())
        .filter(|&k| cosines[k] >= threshold)
        .collect();
    out.sad_kept = kept.len();
    lap(&mut out, "sad");

    // RAP
    let mut seen = HashSet::new();
    let unique: Vec<usize> = kept
        .into_iter()
        .filter(|&k| seen.insert(digest(&scored[k].0.text)))
        .collect();
    out.rap_dropped = out.sad_kept - unique.len();
    lap(&mut out, "rap");

    // TPM
    let ranked: Vec<Pick> = unique
        .iter()
        .map(|&k| {
            let (s, jac) = scored[k];
            let mut p = pick(s, jac);
            p.cosine = Some(cosines[k]);
            p.dsed = structure(s);
            p.score = match p.dsed {
                Some(d) => opts.alpha * jac + (1.0 - opts.alpha) * d,
                None => jac,
            };
            p
        })
        .collect();
    lap(&mut out, "tpm");

    // MMR
    let relevance: Vec<f64> = ranked.iter().map(|p| p.score).collect();
    let order = mmr(
        &relevance,
        |a, b| f64::from(dot(&vs[unique[a]], &vs[unique[b]])),
        opts.lambda,
        opts.top_k,
    );
    out.picks = order.into_iter().map(|k| ranked[k].clone()).collect();
    lap(&mut out, "mmr");
    Ok(out)
}

/// The `q` quantile of `values`, interpolating linearly between order statistics.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedder() -> crate::embed::LocalEmbedder {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/embed/tiny-roberta");
        crate::embed::load(dir.to_str().unwrap(), &candle_core::Device::Cpu).unwrap()
    }

    const STORE: &str = "\
def load(path):
    with open(path) as f:
        data = f.read()
    items = parse(data)
    return items
";

    #[test]
    fn jaccard_over_ids_is_jaccard_over_tokens() {
        use super::super::rank::{jaccard, tokens};
        let mut vocab = HashMap::new();
        let mut id = |t: &str| intern(&mut vocab, t, 0);
        for (a, b) in [
            ("x = f(a, b)", "y = f(a)"),
            ("", ""),
            ("return self.items", "self.items.append(x)"),
            ("a", "b"),
        ] {
            let (ia, ib) = (token_ids(a, &mut id), token_ids(b, &mut id));
            let expected = jaccard(&tokens(a), &tokens(b));
            assert!(
                (jaccard_ids(&ia, &ib) - expected).abs() < 1e-12,
                "{a:?} {b:?}"
            );
        }
    }

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.0), 1.0);
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 1.0), 4.0);
        assert!((quantile(&[4.0, 1.0, 3.0, 2.0], 0.75) - 3.25).abs() < 1e-12);
        assert_eq!(quantile(&[0.5], 0.75), 0.5);
        assert_eq!(cut_before("a\nb\nc\n", 3), "a\nb\n");
        assert_eq!(cut_before("a\nb", 1), "");
    }

    #[test]
    fn layers_narrow_the_candidates_and_drop_duplicates() {
        // `copy.py` repeats `store.py` verbatim: their slices are exact duplicates.
        let source = "def read_all(path):\n    with open(path) as f:\n        text = f.read()\n    rows = parse(text)\n    return rows\n";
        let (_dir, repo) = crate::repo::temp_repository(&[
            ("store.py", STORE),
            ("copy.py", STORE),
            ("other.py", "class Point:\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n"),
            ("main.py", source),
        ]);
        let e = embedder();
        let codebase = Codebase::build(&repo, Units::Slices, &SliceLimits::default());
        let cursor = codebase.cursor("main.py", cut_before(source, 4));
        let query = cursor.query_text().unwrap().to_string();
        assert_eq!(
            query,
            "def read_all(path):\n    with open(path) as f:\n        text = f.read()"
        );
        // Nothing at or below the cursor line is a candidate.
        assert!(cursor
            .candidates()
            .iter()
            .all(|s| s.path != "main.py" || s.end_line < 4));
        // A slice's snippet goes on with the lines after it.
        let first = codebase
            .snippets
            .iter()
            .find(|s| s.path == "store.py")
            .unwrap();
        assert_eq!(first.key, "def load(path):");
        assert!(first
            .text
            .starts_with("def load(path):\n    with open(path) as f:\n"));

        let opts = Options {
            top_k: 3,
            pool: 3,
            ..Options::default()
        };
        let r = retrieve(&cursor, Some(&e), &opts).unwrap();
        assert_eq!(r.query, query);
        assert_eq!(r.candidates, 9);
        assert!(r.sad_kept >= 1 && r.sad_kept <= r.candidates);
        // The best candidates come in identical pairs from `store.py` and `copy.py`.
        assert!(r.rap_dropped >= 1, "{r:?}");
        let texts: Vec<&str> = r.picks.iter().map(|p| p.text.as_str()).collect();
        let unique: HashSet<&str> = texts.iter().copied().collect();
        assert_eq!(
            unique.len(),
            texts.len(),
            "RAP leaves no duplicate: {texts:?}"
        );
        assert!(r.picks.len() <= 3);
        for p in &r.picks {
            assert!(p.cosine.unwrap() >= r.sad_threshold.unwrap());
            let expected = 0.5 * p.jaccard + 0.5 * p.dsed.unwrap();
            assert!((p.score - expected).abs() < 1e-12);
        }
        // Same inputs, same answer; the candidates' vectors were kept, not computed again.
        let cached = codebase.vectors.lock().unwrap().len();
        assert!(cached >= r.sad_kept);
        let again = retrieve(&cursor, Some(&e), &opts).unwrap();
        assert_eq!(
            again.picks.iter().map(|p| &p.text).collect::<Vec<_>>(),
            r.picks.iter().map(|p| &p.text).collect::<Vec<_>>()
        );
        assert_eq!(codebase.vectors.lock().unwrap().len(), cached);

        // Without HFOP: the top_k by Jaccard, duplicates and all, no embedder needed.
        let jaccard_only = Options {
            rank: Rank::Jaccard,
            ..opts.clone()
        };
        let plain = retrieve(&cursor, None, &jaccard_only).unwrap();
        assert_eq!(plain.picks.len(), 3);
        assert!(plain.picks.windows(2).all(|w| w[0].jaccard >= w[1].jaccard));
        assert!(plain.picks[0].path == "store.py" || plain.picks[0].path == "copy.py");
        assert!(matches!(
            retrieve(&cursor, None, &opts),
            Err(RetrieveError::NoEmbedder)
        ));

        // GraphCoder: Jaccard's best ten, reranked by D-SED alone.
        let graph = Options {
            rank: Rank::Dsed,
            ..opts
        };
        let g = retrieve(&cursor, None, &graph).unwrap();
        assert_eq!(g.candidates, 10);
        assert_eq!(g.picks.len(), 3);
        assert!(g.picks.windows(2).all(|w| w[0].score >= w[1].score));
        assert!(g.picks.iter().all(|p| Some(p.score) == p.dsed));
    }

    #[test]
    fn windows_leave_out_the_query_and_repocoder_requeries_with_the_generated_line() {
        let long: String = (1..=45)
            .map(|i| format!("v{i} = f{i}(v{})\n", i - 1))
            .collect();
        let (_dir, repo) = crate::repo::temp_repository(&[("store.py", STORE), ("main.py", &long)]);
        let codebase = Codebase::build(&repo, Units::Windows, &SliceLimits::default());
        // store.py is one window; main.py's windows start at lines 1, 11, 21 and 31.
        assert_eq!(codebase.len(), 1 + 4);
        let unfinished = cut_before(&long, 41);
        let mut cursor = codebase.cursor("main.py", unfinished);
        // The query is lines 21–40; only main.py's window 1–20 is clear of it.
        assert_eq!(cursor.query_text().unwrap().lines().count(), 20);
        assert!(cursor.query_text().unwrap().starts_with("v21 = "));
        let own: Vec<(usize, usize)> = cursor
            .candidates()
            .iter()
            .filter(|s| s.path == "main.py")
            .map(|s| (s.start_line, s.end_line))
            .collect();
        assert_eq!(own, vec![(1, 20)]);

        cursor.requery(unfinished, "v41 = f41(v40)\n");
        let q = cursor.query_text().unwrap();
        assert!(
            q.starts_with("v22 = ") && q.ends_with("v41 = f41(v40)"),
            "{q}"
        );
        let jaccard_only = Options {
            rank: Rank::Jaccard,
            ..Options::default()
        };
        let r = retrieve(&cursor, None, &jaccard_only).unwrap();
        assert_eq!((r.candidates, r.picks.len()), (2, 2));
        assert_eq!(r.query, q);
    }
}
