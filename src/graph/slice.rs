//! Context-graph slices (SaraCoder appendix A.3, after GraphCoder): from a statement, walk
//! control-flow predecessors breadth-first, up to `hops` away, taking each visited statement's
//! data- and control-dependence predecessors along, until `statements` are collected; the slice
//! is the subgraph those statements induce.

use std::collections::{BTreeSet, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Ccg, Edge, EdgeKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceLimits {
    /// Most control-flow hops from the target statement.
    pub hops: usize,
    /// Statements after which the walk stops (checked before each visit, as in the paper, so
    /// the dependences of the last visit may add a few more).
    pub statements: usize,
}

impl Default for SliceLimits {
    /// GraphCoder's slices stay within a few statements of the cursor; these keep a slice about
    /// the size of a RepoCoder window.
    fn default() -> Self {
        Self {
            hops: 5,
            statements: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// The statement the slice was taken from (its core: the largest id in it).
    pub target: usize,
    /// Statement ids, ascending.
    pub statements: Vec<usize>,
    /// The edges among them, sorted.
    pub edges: Vec<Edge>,
}

impl Slice {
    /// The slice's statements as source text, in order, one statement (header) per line group.
    pub fn text(&self, ccg: &Ccg) -> String {
        self.statements
            .iter()
            .map(|&id| ccg.statements[id].text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The slice of `ccg` around statement `target` (an id of `ccg`). Statements after the target
/// are left out: the target stays the slice's core (its largest id), and a slice of a whole file
/// looks like one of a query, which sees only the code above the cursor.
pub fn slice(ccg: &Ccg, target: usize, limits: &SliceLimits) -> Slice {
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut queue = VecDeque::from([(target, 0usize)]);
    let mut queued = HashSet::from([target]);
    while let Some((v, hops)) = queue.pop_front() {
        // Breadth-first: everything still queued is at least this far.
        if hops > limits.hops || taken.len() >= limits.statements {
            break;
        }
        taken.insert(v);
        for kind in [EdgeKind::DataDependence, EdgeKind::ControlDependence] {
            taken.extend(ccg.predecessors(v, kind).filter(|&p| p <= target));
        }
        for p in ccg.predecessors(v, EdgeKind::ControlFlow) {
            if p <= target && queued.insert(p) {
                queue.push_back((p, hops + 1));
            }
        }
    }
    let edges = ccg.edges_among(&taken);
    Slice {
        target,
        statements: taken.into_iter().collect(),
        edges,
    }
}
