//! Retrieval for a cursor (SaraCoder 3.2, over GraphCoder's slices): every statement of the
//! repository keys a slice; the slices of the code above the cursor's statement are compared
//! with them in four layers, each narrowing the last:
//! 1. candidates: the `top_k × pool` slices of highest Jaccard similarity (A.4.1);
//! 2. semantic alignment distillation (SAD): cosine of embedder vectors, keeping those at or
//!    above the 0.75 quantile of the candidates' cosines;
//! 3. redundancy-aware pruning (RAP): exact duplicates dropped (by a hash of the text; the paper
//!    uses MD5, any exact hash does);
//! 4. topological proximity (TPM): `score = α·Jaccard + (1−α)·D-SED similarity`;
//! 5. diversity-aware reranking: MMR over the scores, vectors' cosines as redundancy, `top_k`.
//!
//! The cursor's file is cut at the cursor: only its lines above take part (as query and as
//! candidates), and the query's own slice is not a candidate.

use std::collections::{BTreeSet, HashSet};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::rank::{dsed, jaccard, mmr, tokens, GAMMA, LAMBDA};
use crate::embed::{EmbedError, Embedder, TextKind};
use crate::graph::{slice, Ccg, Slice, SliceLimits};
use crate::index::vectors::dot;
use crate::repo::model::Lang;
use crate::repo::Repository;

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
    pub limits: SliceLimits,
    /// Hierarchical feature optimisation (layers 2–5); off, the `top_k` best by Jaccard are
    /// kept (the paper's "w/o HFOP" ablation).
    pub hfop: bool,
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
            limits: SliceLimits::default(),
            hfop: true,
        }
    }
}

/// A slice of the repository, keyed by the statement it was taken from.
#[derive(Debug, Clone)]
pub struct Snippet {
    pub path: String,
    /// Lines the slice's statements span (1-based, inclusive).
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    tokens: BTreeSet<String>,
    /// Index in the codebase's graphs.
    graph: usize,
    slice: Slice,
}

/// Every statement's slice of a repository, the cursor's file cut at the cursor.
pub struct Codebase {
    graphs: Vec<Ccg>,
    snippets: Vec<Snippet>,
    /// The cursor's slice: graph index and slice.
    query: Option<(usize, Slice)>,
}

impl Codebase {
    /// Slices of every Python file of `repo`, the file `path` replaced by `unfinished` (the code
    /// above the cursor), whose last statement is the query.
    pub fn build(repo: &Repository, path: &str, unfinished: &str, limits: &SliceLimits) -> Self {
        let mut out = Codebase {
            graphs: Vec::new(),
            snippets: Vec::new(),
            query: None,
        };
        for file in repo.files() {
            let (Some(Lang::Python), Some(text)) = (file.lang, file.text.as_deref()) else {
                continue;
            };
            let cursor_file = file.path == path;
            let text = if cursor_file { unfinished } else { text };
            let Some(ccg) = Ccg::build(Lang::Python, text) else {
                continue;
            };
            let g = out.graphs.len();
            let query = cursor_file
                .then(|| ccg.statements.len().checked_sub(1))
                .flatten();
            for target in 0..ccg.statements.len() {
                let s = slice(&ccg, target, limits);
                if query == Some(target) {
                    out.query = Some((g, s));
                    continue;
                }
                let text = s.text(&ccg);
                let lines = s.statements.iter().map(|&id| &ccg.statements[id]);
                let start_line = lines.clone().map(|st| st.start_line).min().unwrap_or(1);
                let end_line = lines.map(|st| st.end_line).max().unwrap_or(start_line);
                out.snippets.push(Snippet {
                    path: file.path.clone(),
                    start_line,
                    end_line,
                    tokens: tokens(&text),
                    text,
                    graph: g,
                    slice: s,
                });
            }
            out.graphs.push(ccg);
        }
        out
    }

    pub fn snippets(&self) -> &[Snippet] {
        &self.snippets
    }

    /// The query slice's text, when the code above the cursor has a statement.
    pub fn query_text(&self) -> Option<String> {
        self.query.as_ref().map(|(g, s)| s.text(&self.graphs[*g]))
    }
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

/// One snippet kept, with the scores that kept it.
#[derive(Debug, Clone, Serialize)]
pub struct Pick {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    pub jaccard: f64,
    /// `None` without HFOP.
    pub cosine: Option<f64>,
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
    /// In MMR order (most relevant first).
    pub picks: Vec<Pick>,
}

/// Runs the layers for the codebase's query; an empty retrieval when the code above the cursor
/// has no statement.
pub fn retrieve(
    codebase: &Codebase,
    embedder: &dyn Embedder,
    opts: &Options,
) -> Result<Retrieval, EmbedError> {
    let Some((qg, q)) = &codebase.query else {
        return Ok(Retrieval::default());
    };
    let qgraph = &codebase.graphs[*qg];
    let query = q.text(qgraph);
    let qtokens = tokens(&query);
    let mut scored: Vec<(usize, f64)> = codebase
        .snippets
        .iter()
        .enumerate()
        .map(|(i, s)| (i, jaccard(&qtokens, &s.tokens)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let pick = |i: usize, jac: f64| {
        let s = &codebase.snippets[i];
        Pick {
            path: s.path.clone(),
            start_line: s.start_line,
            end_line: s.end_line,
            text: s.text.clone(),
            jaccard: jac,
            cosine: None,
            dsed: None,
            score: jac,
        }
    };
    if !opts.hfop {
        return Ok(Retrieval {
            candidates: scored.len().min(opts.top_k),
            picks: scored
                .iter()
                .take(opts.top_k)
                .map(|&(i, j)| pick(i, j))
                .collect(),
            query,
            ..Retrieval::default()
        });
    }
    scored.truncate(opts.top_k * opts.pool);
    let mut out = Retrieval {
        query: query.clone(),
        candidates: scored.len(),
        ..Retrieval::default()
    };
    if scored.is_empty() {
        return Ok(out);
    }

    // SAD
    let texts: Vec<&str> = scored
        .iter()
        .map(|&(i, _)| codebase.snippets[i].text.as_str())
        .collect();
    let qv = embedder.embed(&[query.as_str()], TextKind::Query)?;
    let vs = embedder.embed(&texts, TextKind::Document)?;
    let cosines: Vec<f64> = (0..texts.len())
        .map(|k| f64::from(dot(qv.row(0), vs.row(k))))
        .collect();
    let threshold = quantile(&cosines, opts.quantile);
    out.sad_threshold = Some(threshold);
    let kept: Vec<usize> = (0..scored.len())
        .filter(|&k| cosines[k] >= threshold)
        .collect();
    out.sad_kept = kept.len();

    // RAP
    let mut seen = HashSet::new();
    let unique: Vec<usize> = kept
        .into_iter()
        .filter(|&k| seen.insert(Sha256::digest(texts[k].as_bytes())))
        .collect();
    out.rap_dropped = out.sad_kept - unique.len();

    // TPM
    let mut ranked: Vec<Pick> = Vec::with_capacity(unique.len());
    for &k in &unique {
        let (i, jac) = scored[k];
        let s = &codebase.snippets[i];
        let structure = dsed(qgraph, q, &codebase.graphs[s.graph], &s.slice, opts.gamma);
        let mut p = pick(i, jac);
        p.cosine = Some(cosines[k]);
        p.dsed = Some(structure.similarity());
        p.score = opts.alpha * jac + (1.0 - opts.alpha) * structure.similarity();
        ranked.push(p);
    }

    // MMR
    let relevance: Vec<f64> = ranked.iter().map(|p| p.score).collect();
    let order = mmr(
        &relevance,
        |a, b| f64::from(dot(vs.row(unique[a]), vs.row(unique[b]))),
        opts.lambda,
        opts.top_k,
    );
    out.picks = order.into_iter().map(|k| ranked[k].clone()).collect();
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
        let cursor = "def read_all(path):\n    with open(path) as f:\n        text = f.read()\n    rows = parse(text)\n    return rows\n";
        let (_dir, repo) = crate::repo::temp_repository(&[
            ("store.py", STORE),
            ("copy.py", STORE),
            ("other.py", "class Point:\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n"),
            ("main.py", cursor),
        ]);
        let e = embedder();
        let codebase = Codebase::build(
            &repo,
            "main.py",
            cut_before(cursor, 4),
            &SliceLimits::default(),
        );
        let query = codebase.query_text().unwrap();
        assert_eq!(
            query,
            "def read_all(path):\n    with open(path) as f:\n        text = f.read()"
        );
        // Nothing at or below the cursor line is a candidate.
        assert!(codebase
            .snippets()
            .iter()
            .all(|s| s.path != "main.py" || s.end_line < 4));

        let opts = Options {
            top_k: 3,
            pool: 3,
            ..Options::default()
        };
        let r = retrieve(&codebase, &e, &opts).unwrap();
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
        // Same inputs, same answer.
        let again = retrieve(&codebase, &e, &opts).unwrap();
        assert_eq!(
            again.picks.iter().map(|p| &p.text).collect::<Vec<_>>(),
            r.picks.iter().map(|p| &p.text).collect::<Vec<_>>()
        );

        // Without HFOP: the top_k by Jaccard, duplicates and all.
        let plain = retrieve(
            &codebase,
            &e,
            &Options {
                hfop: false,
                ..opts
            },
        )
        .unwrap();
        assert_eq!(plain.picks.len(), 3);
        assert!(plain.picks.windows(2).all(|w| w[0].jaccard >= w[1].jaccard));
        assert!(plain.picks[0].path == "store.py" || plain.picks[0].path == "copy.py");
    }
}
