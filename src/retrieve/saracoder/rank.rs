//! Text similarity, the decayed subgraph edit distance (D-SED, SaraCoder's Algorithm 2) and
//! maximal-marginal-relevance reranking (its Eq. 2).
//!
//! The paper gives D-SED's terms but not how vertices are aligned or what each edit costs; we
//! read it as follows. Each slice's core is its target statement (its largest id), and `h(v)` is
//! the number of edges between `v` and the core, edges taken in either direction. Vertices are
//! aligned level by level: the vertices of the query and of the candidate at the same distance
//! from their cores, each level ordered latest statement first, pair up in that order (so the
//! cores align). An aligned vertex costs `1 − Jaccard` of the two statements' token sets, an
//! unaligned one 1; an edge costs 0 when the candidate has the same kind of edge between the
//! aligned ends, else 1, weighted by its source's distance. As in the paper the sum runs over
//! the query's vertices and edges only: what the candidate has beyond them costs nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::graph::{Ccg, Slice};

/// The decay per hop from the core (the paper's γ; it leaves the value open).
pub const GAMMA: f64 = 0.5;
/// MMR's weight of relevance against diversity (the paper's λ; it leaves the value open).
pub const LAMBDA: f64 = 0.7;

/// Identifier-like words and single punctuation characters: what Jaccard similarity compares.
pub fn tokens(text: &str) -> BTreeSet<String> {
    token_spans(text).map(str::to_string).collect()
}

/// The tokens of `text` in order, repeats and all, as slices of it.
pub fn token_spans(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        rest = rest.trim_start();
        let first = rest.chars().next()?;
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let len = if word(first) {
            rest.find(|c: char| !word(c)).unwrap_or(rest.len())
        } else {
            first.len_utf8()
        };
        let (token, tail) = rest.split_at(len);
        rest = tail;
        Some(token)
    })
}

/// |a ∩ b| / |a ∪ b|; 1 for two empty sets.
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// A D-SED value and the largest it could be for the same query (every vertex and edge
/// unmatched), so that scores of different queries compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dsed {
    pub distance: f64,
    pub worst: f64,
}

impl Dsed {
    /// 1 for a perfect match, 0 when nothing matches.
    pub fn similarity(&self) -> f64 {
        if self.worst <= 0.0 {
            return 1.0;
        }
        1.0 - self.distance / self.worst
    }
}

/// Hops from each statement of `slice` to its core, over its edges in either direction; the
/// ones the edges do not connect count one hop beyond the farthest.
fn hops(slice: &Slice) -> BTreeMap<usize, usize> {
    let mut adjacent: HashMap<usize, Vec<usize>> = HashMap::new();
    for e in &slice.edges {
        adjacent.entry(e.from).or_default().push(e.to);
        adjacent.entry(e.to).or_default().push(e.from);
    }
    let mut h = BTreeMap::from([(slice.target, 0)]);
    let mut queue = VecDeque::from([slice.target]);
    while let Some(v) = queue.pop_front() {
        let d = h[&v];
        for &u in adjacent.get(&v).into_iter().flatten() {
            if let std::collections::btree_map::Entry::Vacant(slot) = h.entry(u) {
                slot.insert(d + 1);
                queue.push_back(u);
            }
        }
    }
    let beyond = h.values().max().copied().unwrap_or(0) + 1;
    for &s in &slice.statements {
        h.entry(s).or_insert(beyond);
    }
    h
}

/// Statements per distance from the core, latest first.
fn levels(h: &BTreeMap<usize, usize>) -> BTreeMap<usize, Vec<usize>> {
    let mut out: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (&v, &d) in h {
        out.entry(d).or_default().push(v);
    }
    for vs in out.values_mut() {
        vs.sort_unstable_by(|a, b| b.cmp(a));
    }
    out
}

/// D-SED of the query slice (of graph `qg`) against a candidate slice (of graph `cg`).
pub fn dsed(qg: &Ccg, q: &Slice, cg: &Ccg, c: &Slice, gamma: f64) -> Dsed {
    let (qh, ch) = (hops(q), hops(c));
    let cl = levels(&ch);
    let mut aligned: HashMap<usize, usize> = HashMap::new();
    for (d, vs) in levels(&qh) {
        for (v, u) in vs.into_iter().zip(cl.get(&d).into_iter().flatten()) {
            aligned.insert(v, *u);
        }
    }
    let weight = |v: usize| gamma.powi(qh[&v] as i32);
    let (mut distance, mut worst) = (0.0, 0.0);
    for &v in &q.statements {
        let cost = match aligned.get(&v) {
            Some(&u) => {
                1.0 - jaccard(
                    &tokens(&qg.statements[v].text),
                    &tokens(&cg.statements[u].text),
                )
            }
            None => 1.0,
        };
        distance += weight(v) * cost;
        worst += weight(v);
    }
    let candidate_edges: BTreeSet<(usize, usize, crate::graph::EdgeKind)> =
        c.edges.iter().map(|e| (e.from, e.to, e.kind)).collect();
    for e in &q.edges {
        let matched = match (aligned.get(&e.from), aligned.get(&e.to)) {
            (Some(&f), Some(&t)) => candidate_edges.contains(&(f, t, e.kind)),
            _ => false,
        };
        if !matched {
            distance += weight(e.from);
        }
        worst += weight(e.from);
    }
    Dsed { distance, worst }
}

/// Maximal marginal relevance: up to `k` indexes of `relevance`, each next one maximising
/// `λ·relevance − (1−λ)·(its largest similarity to one already chosen)`; ties go to the lower
/// index.
pub fn mmr(
    relevance: &[f64],
    similarity: impl Fn(usize, usize) -> f64,
    lambda: f64,
    k: usize,
) -> Vec<usize> {
    let mut chosen: Vec<usize> = Vec::new();
    let mut left: Vec<usize> = (0..relevance.len()).collect();
    while chosen.len() < k && !left.is_empty() {
        let score = |i: usize| {
            let redundancy = chosen
                .iter()
                .map(|&j| similarity(i, j))
                .fold(f64::NEG_INFINITY, f64::max);
            let redundancy = if chosen.is_empty() { 0.0 } else { redundancy };
            lambda * relevance[i] - (1.0 - lambda) * redundancy
        };
        let mut best = 0;
        for at in 1..left.len() {
            if score(left[at]) > score(left[best]) {
                best = at;
            }
        }
        chosen.push(left.remove(best));
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{slice, SliceLimits};
    use crate::repo::model::Lang;

    fn last_slice(src: &str) -> (Ccg, Slice) {
        let g = Ccg::build(Lang::Python, src).unwrap();
        let s = slice(&g, g.statements.len() - 1, &SliceLimits::default());
        (g, s)
    }

    #[test]
    fn tokens_and_jaccard() {
        assert_eq!(
            tokens("b = a[0]"),
            ["0", "=", "[", "]", "a", "b"].map(String::from).into()
        );
        // Words run over letters (any script), digits and `_`; every other visible character
        // is a token alone; whitespace separates.
        assert_eq!(
            token_spans("x_1 =a.b(c)\t# é2 ±").collect::<Vec<_>>(),
            ["x_1", "=", "a", ".", "b", "(", "c", ")", "#", "é2", "±"]
        );
        assert_eq!(token_spans("  \n ").count(), 0);
        let j = jaccard(&tokens("b = a"), &tokens("b = 2"));
        assert!((j - 0.5).abs() < 1e-12);
        assert_eq!(jaccard(&BTreeSet::new(), &BTreeSet::new()), 1.0);
    }

    #[test]
    fn dsed_by_hand() {
        let (qg, q) = last_slice("a = 1\nb = a\nc = b\n");
        // Query: flow 0→1→2, data 0→1 (a), 1→2 (b); hops from the core 2: 2→0, 1→1, 0→2.
        assert_eq!(q.statements, [0, 1, 2]);
        assert_eq!(q.edges.len(), 4);
        let same = dsed(&qg, &q, &qg, &q, 0.5);
        assert_eq!(same.distance, 0.0);
        // Vertices 1 + 0.5 + 0.25, edges 0.25 + 0.5 (flow) + 0.25 + 0.5 (data).
        assert!((same.worst - 3.25).abs() < 1e-12);
        assert_eq!(same.similarity(), 1.0);

        // `b = 2`: vertex 1 costs 1 − J({b,=,a},{b,=,2}) = 0.5 at γ¹; the data edge 0→1 is
        // missing, 1 at γ² (its source is two hops out).
        let (cg, c) = last_slice("a = 1\nb = 2\nc = b\n");
        let d = dsed(&qg, &q, &cg, &c, 0.5);
        assert!((d.distance - (0.5 * 0.5 + 0.25)).abs() < 1e-12, "{d:?}");

        // A one-statement candidate: only the cores align.
        let (cg, c) = last_slice("c = b\n");
        let d = dsed(&qg, &q, &cg, &c, 0.5);
        assert!((d.distance - (0.5 + 0.25 + 1.5)).abs() < 1e-12, "{d:?}");
        // The sum is asymmetric: the small query finds its one vertex in the big candidate.
        assert_eq!(dsed(&cg, &c, &qg, &q, 0.5).distance, 0.0);
    }

    #[test]
    fn mmr_trades_relevance_for_diversity() {
        let relevance = [0.9, 0.85, 0.5];
        // 0 and 1 are the same snippet.
        let sim = |i: usize, j: usize| if i + j == 1 { 1.0 } else { 0.0 };
        assert_eq!(mmr(&relevance, sim, 1.0, 3), [0, 1, 2]);
        // λ = 0.5: after 0, candidate 1 scores 0.425 − 0.5 < 0.25 for candidate 2.
        assert_eq!(mmr(&relevance, sim, 0.5, 3), [0, 2, 1]);
        assert_eq!(mmr(&relevance, sim, 0.5, 2), [0, 2]);
        assert_eq!(mmr(&[], sim, 0.5, 2), Vec::<usize>::new());
        // Ties go to the lower index.
        assert_eq!(mmr(&[0.3, 0.3], |_, _| 0.0, 0.7, 1), [0]);
    }
}
