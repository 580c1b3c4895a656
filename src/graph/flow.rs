//! What the language builders share: wiring pieces of control flow, and data dependence as
//! reaching definitions over it.

use std::collections::{BTreeSet, HashMap};

use tree_sitter::Node;

use super::{Ccg, Edge, EdgeKind, Statement};

/// Where a statement's text starts: with its indentation when it opens its line.
pub(super) fn indented_start(src: &str, start: usize) -> usize {
    let line = src[..start].rfind('\n').map_or(0, |i| i + 1);
    if src[line..start].chars().all(|c| c == ' ' || c == '\t') {
        line
    } else {
        start
    }
}

pub(super) fn children(node: Node) -> Vec<Node> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).collect()
}

/// Where `break` and `continue` go.
pub(super) struct Loop {
    pub header: usize,
    pub breaks: Vec<usize>,
}

/// A wired statement or sequence: where control enters, and the statements after which it falls
/// through to whatever comes next.
pub(super) struct Piece {
    pub entry: usize,
    pub exits: Vec<usize>,
}

/// The graph under construction: statements and the flow and control edges among them.
#[derive(Default)]
pub(super) struct Wiring {
    pub statements: Vec<Statement>,
    pub flow: BTreeSet<(usize, usize)>,
    pub control: BTreeSet<(usize, usize)>,
}

impl Wiring {
    /// A new vertex for `node` (its text up to `header_end`, with the names it sets and
    /// reads), control-dependent on `parent`.
    pub fn vertex(
        &mut self,
        src: &str,
        node: Node,
        header_end: usize,
        (defs, uses): (BTreeSet<String>, BTreeSet<String>),
        parent: Option<usize>,
    ) -> usize {
        let id = self.statements.len();
        let text = src[indented_start(src, node.start_byte())..header_end]
            .trim_end()
            .to_string();
        self.statements.push(Statement {
            id,
            kind: node.kind().to_string(),
            start_line: node.start_position().row + 1,
            end_line: node.start_position().row + text.lines().count().max(1),
            text,
            defs,
            uses,
        });
        if let Some(p) = parent {
            self.control.insert((p, id));
        }
        id
    }

    /// Wires pieces one after another; `None` for none.
    pub fn join(&mut self, pieces: Vec<Piece>) -> Option<Piece> {
        let mut pieces = pieces.into_iter();
        let first = pieces.next()?;
        let entry = first.entry;
        let mut pending = first.exits;
        for piece in pieces {
            for p in pending.drain(..) {
                self.flow.insert((p, piece.entry));
            }
            pending = piece.exits;
        }
        Some(Piece {
            entry,
            exits: pending,
        })
    }

    pub fn finish(self) -> Ccg {
        assemble(self.statements, &self.flow, &self.control)
    }
}

pub(super) fn text<'s>(node: Node, src: &'s str) -> &'s str {
    &src[node.byte_range()]
}

/// `a.b.c` when `node` is a chain of plain names: a `leaves` node, or an `access` node whose
/// `object` is a chain and whose `member` field is a name.
pub(super) fn chain(
    node: Node,
    src: &str,
    leaves: &[&str],
    access: &str,
    member: &str,
) -> Option<String> {
    let kind = node.kind();
    if leaves.contains(&kind) {
        return Some(text(node, src).to_string());
    }
    if kind != access {
        return None;
    }
    let obj = chain(
        node.child_by_field_name("object")?,
        src,
        leaves,
        access,
        member,
    )?;
    Some(format!(
        "{obj}.{}",
        text(node.child_by_field_name(member)?, src)
    ))
}

/// Reading `a.b.c` reads `a`, `a.b` and `a.b.c`.
pub(super) fn read_chain(name: &str, uses: &mut BTreeSet<String>) {
    let mut prefix = String::new();
    for part in name.split('.') {
        if !prefix.is_empty() {
            prefix.push('.');
        }
        prefix.push_str(part);
        uses.insert(prefix.clone());
    }
}

/// Definition → use pairs: a definition of `x` at `d` reaches `u` through the control flow
/// without another definition of `x` on the way, and `u` reads `x`.
fn reaching_definitions(
    statements: &[Statement],
    flow: &BTreeSet<(usize, usize)>,
) -> Vec<(usize, usize)> {
    // Every (statement, name) definition gets a bit.
    let mut def_bits: Vec<(usize, &str)> = Vec::new();
    let mut bits_of_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for s in statements {
        for name in &s.defs {
            bits_of_name
                .entry(name.as_str())
                .or_default()
                .push(def_bits.len());
            def_bits.push((s.id, name.as_str()));
        }
    }
    let words = def_bits.len().div_ceil(64).max(1);
    let n = statements.len();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(from, to) in flow {
        preds[to].push(from);
    }
    let mut gen = vec![vec![0u64; words]; n];
    let mut kill = vec![vec![0u64; words]; n];
    for (bit, &(id, name)) in def_bits.iter().enumerate() {
        gen[id][bit / 64] |= 1 << (bit % 64);
        for &other in &bits_of_name[name] {
            kill[id][other / 64] |= 1 << (other % 64);
        }
    }
    let mut inp = vec![vec![0u64; words]; n];
    let mut out = gen.clone();
    let mut changed = true;
    while changed {
        changed = false;
        for s in 0..n {
            let mut i = vec![0u64; words];
            for &p in &preds[s] {
                for (w, o) in i.iter_mut().zip(&out[p]) {
                    *w |= o;
                }
            }
            let o: Vec<u64> = (0..words)
                .map(|w| gen[s][w] | (i[w] & !kill[s][w]))
                .collect();
            if o != out[s] {
                out[s] = o;
                changed = true;
            }
            inp[s] = i;
        }
    }
    let mut pairs = Vec::new();
    for s in statements {
        for name in &s.uses {
            for &bit in bits_of_name.get(name.as_str()).into_iter().flatten() {
                if inp[s.id][bit / 64] & (1 << (bit % 64)) != 0 {
                    pairs.push((def_bits[bit].0, s.id));
                }
            }
        }
    }
    pairs
}

/// The graph of wired statements: their control flow and control dependence, and the data
/// dependence reaching definitions find over the flow.
fn assemble(
    statements: Vec<Statement>,
    flow: &BTreeSet<(usize, usize)>,
    control: &BTreeSet<(usize, usize)>,
) -> Ccg {
    let data = reaching_definitions(&statements, flow);
    let edges: Vec<Edge> = flow
        .iter()
        .map(|&(from, to)| (from, to, EdgeKind::ControlFlow))
        .chain(
            control
                .iter()
                .map(|&(from, to)| (from, to, EdgeKind::ControlDependence)),
        )
        .chain(
            data.into_iter()
                .map(|(from, to)| (from, to, EdgeKind::DataDependence)),
        )
        .map(|(from, to, kind)| Edge { from, to, kind })
        .collect();
    Ccg::new(statements, edges)
}

/// Test helpers of the language builders.
#[cfg(test)]
pub(super) mod testing {
    use super::super::{Ccg, EdgeKind};

    /// Edges of one kind as (from, to).
    pub fn edges(g: &Ccg, kind: EdgeKind) -> Vec<(usize, usize)> {
        g.edges
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| (e.from, e.to))
            .collect()
    }

    /// Statement texts without their indentation.
    pub fn texts(g: &Ccg) -> Vec<&str> {
        g.statements.iter().map(|s| s.text.trim_start()).collect()
    }
}
