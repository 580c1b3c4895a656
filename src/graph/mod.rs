//! Code context graphs (GraphCoder's CCG, used by SaraCoder): one vertex per statement (the
//! header of a compound statement), with control-flow, data-dependence (definition → use) and
//! control-dependence (governing statement → governed) edges, and the slices around a
//! statement that line completion retrieves and compares.
//!
//! Vertex ids follow source order, so the statement nearest a cursor has the largest id in the
//! graph of the code above it (SaraCoder's "core node").

mod flow;
mod java;
mod python;
pub mod slice;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::repo::model::Lang;

pub use slice::{slice, Slice, SliceLimits};

/// What an edge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// `to` may run right after `from`.
    ControlFlow,
    /// `to` reads a name whose value `from` may have set.
    DataDependence,
    /// Whether `to` runs depends on `from` (a condition, loop header, handler or definition).
    ControlDependence,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub kind: EdgeKind,
}

/// A statement: a simple statement whole, or a compound statement's header (`if x:`,
/// `for a in b:`, `def f(x):`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    pub id: usize,
    /// The tree-sitter kind (`if_statement`, `expression_statement`, `elif_clause`, ...).
    pub kind: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    pub end_line: usize,
    /// Its source (a compound statement's header), indented as in the file.
    pub text: String,
    /// Names this statement may set: variables, `a.b` attribute chains, imported and defined
    /// names, parameters.
    pub defs: BTreeSet<String>,
    /// Names it reads (an attribute chain `a.b.c` reads `a`, `a.b` and `a.b.c`).
    pub uses: BTreeSet<String>,
}

/// The code context graph of one file (or of the code above a cursor).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct Ccg {
    pub statements: Vec<Statement>,
    /// Sorted, without repeats.
    pub edges: Vec<Edge>,
    /// Per statement, the indexes in `edges` of the edges into it.
    #[serde(skip)]
    incoming: Vec<Vec<usize>>,
}

/// A graph as written: its edge index is rebuilt when read.
#[derive(Deserialize)]
struct Stored {
    statements: Vec<Statement>,
    edges: Vec<Edge>,
}

impl From<Stored> for Ccg {
    fn from(s: Stored) -> Ccg {
        Ccg::new(s.statements, s.edges)
    }
}

impl Ccg {
    fn new(statements: Vec<Statement>, mut edges: Vec<Edge>) -> Ccg {
        edges.sort();
        edges.dedup();
        let mut incoming = vec![Vec::new(); statements.len()];
        for (i, e) in edges.iter().enumerate() {
            incoming[e.to].push(i);
        }
        Ccg {
            statements,
            edges,
            incoming,
        }
    }

    /// The graph of `source`, or `None` when it cannot be parsed at all. Code with syntax
    /// errors keeps the statements that parsed.
    pub fn build(lang: Lang, source: &str) -> Option<Ccg> {
        match lang {
            Lang::Python => python::build(source),
            Lang::Java => java::build(source),
        }
    }

    /// Sources of the edges of `kind` into `to`.
    pub fn predecessors(&self, to: usize, kind: EdgeKind) -> impl Iterator<Item = usize> + '_ {
        self.incoming
            .get(to)
            .into_iter()
            .flatten()
            .map(|&i| &self.edges[i])
            .filter(move |e| e.kind == kind)
            .map(|e| e.from)
    }

    /// The edges whose both ends are in `among`, sorted. Read through the edge index of each
    /// member, not the whole edge list: a file's slices would otherwise cost its statements
    /// times its edges.
    pub fn edges_among(&self, among: &BTreeSet<usize>) -> Vec<Edge> {
        let mut found: Vec<usize> = among
            .iter()
            .filter_map(|&to| self.incoming.get(to))
            .flatten()
            .copied()
            .filter(|&i| among.contains(&self.edges[i].from))
            .collect();
        found.sort_unstable();
        found.into_iter().map(|i| self.edges[i].clone()).collect()
    }

    /// The statement a cursor after `line` (1-based) continues: the last one starting at or
    /// before it.
    pub fn statement_at_line(&self, line: usize) -> Option<usize> {
        self.statements
            .iter()
            .rev()
            .find(|s| s.start_line <= line)
            .map(|s| s.id)
    }
}
