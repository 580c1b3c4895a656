//! The code context graph of Python source, from tree-sitter.
//!
//! Control flow follows Python's rules, with two simplifications: an exception may leave a `try`
//! body at any statement, which is drawn as one edge from the `try` header to each handler; and
//! a function body is entered from its `def` header (parameters are defined there), while the
//! statement after the `def` follows the header, not the body. Control dependence is read off
//! the syntax: a statement depends on the header whose body holds it (an `else` body on the last
//! condition before it, an `elif` on the condition before it). Data dependence is reaching
//! definitions over the control flow. Names bound inside comprehensions and lambdas count as
//! uses of the enclosing statement, a small over-approximation.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::flow::{self, children, indented_start, read_chain, text, Loop, Piece, Wiring};
use super::Ccg;
use crate::repo::lang::parse_tree;
use crate::repo::model::Lang;

pub(super) fn build(source: &str) -> Option<Ccg> {
    let tree = parse_tree(Lang::Python, source)?;
    let mut b = Builder {
        src: source,
        w: Wiring::default(),
        loops: Vec::new(),
    };
    let root = tree.root_node();
    b.sequence(children(root), None);
    Some(b.w.finish())
}

struct Builder<'a> {
    src: &'a str,
    w: Wiring,
    loops: Vec<Loop>,
}

/// Clauses of a compound statement that are not part of its header.
const BODY_KINDS: &[&str] = &[
    "block",
    "elif_clause",
    "else_clause",
    "except_clause",
    "except_group_clause",
    "finally_clause",
    "case_clause",
];

impl Builder<'_> {
    /// Wires `nodes` one after another; `None` when none of them is a statement.
    fn sequence(&mut self, nodes: Vec<Node>, parent: Option<usize>) -> Option<Piece> {
        let pieces = nodes
            .into_iter()
            .filter_map(|n| self.statement(n, parent))
            .collect();
        self.w.join(pieces)
    }

    /// The statements of a clause's block (its `body` or `consequence` field, or its block
    /// child).
    fn body_of(&mut self, clause: Node, parent: usize) -> Option<Piece> {
        let block = clause
            .child_by_field_name("body")
            .or_else(|| clause.child_by_field_name("consequence"))
            .or_else(|| children(clause).into_iter().find(|c| c.kind() == "block"))?;
        self.sequence(children(block), Some(parent))
    }

    /// Wires the body of `clause` after `header`, which governs it; its fall-through exits,
    /// or the header itself when the body holds no statement.
    fn enter(&mut self, clause: Node, header: usize) -> Vec<usize> {
        match self.body_of(clause, header) {
            Some(body) => {
                self.w.flow.insert((header, body.entry));
                body.exits
            }
            None => vec![header],
        }
    }

    /// A new vertex for `node` (its header when compound), control-dependent on `parent`.
    fn vertex(&mut self, node: Node, parent: Option<usize>) -> usize {
        let header_end = children(node)
            .into_iter()
            .find(|c| BODY_KINDS.contains(&c.kind()))
            .map_or(node.end_byte(), |c| c.start_byte());
        let (mut defs, mut uses) = (BTreeSet::new(), BTreeSet::new());
        names(node, self.src, &mut defs, &mut uses);
        self.w
            .vertex(self.src, node, header_end, (defs, uses), parent)
    }

    fn statement(&mut self, node: Node, parent: Option<usize>) -> Option<Piece> {
        let kind = node.kind();
        match kind {
            "comment" => None,
            // A string on its own (a docstring) does nothing: like a comment, no vertex. A
            // class's docstring would otherwise sit in every slice through its body.
            "expression_statement" if is_bare_string(node) => None,
            // Statements that failed to parse keep their parsed parts.
            "ERROR" | "module" => self.sequence(children(node), parent),
            "decorated_definition" => {
                let def = node.child_by_field_name("definition")?;
                self.definition(node, def, parent)
            }
            "function_definition" | "class_definition" => self.definition(node, node, parent),
            "if_statement" => Some(self.if_statement(node, parent)),
            "while_statement" | "for_statement" => Some(self.loop_statement(node, parent)),
            "try_statement" => Some(self.try_statement(node, parent)),
            "with_statement" => {
                let h = self.vertex(node, parent);
                let exits = self.enter(node, h);
                Some(Piece { entry: h, exits })
            }
            "match_statement" => Some(self.match_statement(node, parent)),
            "break_statement" => {
                let b = self.vertex(node, parent);
                if let Some(l) = self.loops.last_mut() {
                    l.breaks.push(b);
                }
                Some(Piece {
                    entry: b,
                    exits: Vec::new(),
                })
            }
            "continue_statement" => {
                let c = self.vertex(node, parent);
                if let Some(h) = self.loops.last().map(|l| l.header) {
                    self.w.flow.insert((c, h));
                }
                Some(Piece {
                    entry: c,
                    exits: Vec::new(),
                })
            }
            "return_statement" | "raise_statement" => Some(Piece {
                entry: self.vertex(node, parent),
                exits: Vec::new(),
            }),
            k if k.ends_with("_statement") => {
                let v = self.vertex(node, parent);
                Some(Piece {
                    entry: v,
                    exits: vec![v],
                })
            }
            _ => None,
        }
    }

    /// `def` / `class` (`outer` holds the decorators, if any). A function's body is entered
    /// from its header and leaves nowhere; a class body runs where the class is defined.
    fn definition(&mut self, outer: Node, def: Node, parent: Option<usize>) -> Option<Piece> {
        let h = self.vertex_spanning(outer, def, parent);
        let saved = std::mem::take(&mut self.loops);
        let body = self.body_of(def, h);
        self.loops = saved;
        let Some(body) = body else {
            return Some(Piece {
                entry: h,
                exits: vec![h],
            });
        };
        self.w.flow.insert((h, body.entry));
        let exits = if def.kind() == "class_definition" {
            body.exits
        } else {
            vec![h]
        };
        Some(Piece { entry: h, exits })
    }

    /// The vertex of a definition: the decorators and header of `outer`, the names of `def`.
    fn vertex_spanning(&mut self, outer: Node, def: Node, parent: Option<usize>) -> usize {
        let id = self.vertex(def, parent);
        if outer.id() != def.id() {
            let header_end = def
                .child_by_field_name("body")
                .map_or(def.end_byte(), |b| b.start_byte());
            let text =
                self.src[indented_start(self.src, outer.start_byte())..header_end].trim_end();
            let (mut defs, mut uses) = (BTreeSet::new(), BTreeSet::new());
            for d in children(outer)
                .into_iter()
                .filter(|c| c.kind() == "decorator")
            {
                names(d, self.src, &mut defs, &mut uses);
            }
            let s = &mut self.w.statements[id];
            s.uses.extend(uses);
            s.start_line = outer.start_position().row + 1;
            s.text = text.to_string();
        }
        id
    }

    fn if_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        let mut exits = Vec::new();
        exits.extend(self.enter(node, h));
        // The condition tested last: `elif`s and `else` hang off it.
        let mut cond = h;
        let mut has_else = false;
        for clause in children(node) {
            match clause.kind() {
                "elif_clause" => {
                    let e = self.vertex(clause, Some(cond));
                    self.w.flow.insert((cond, e));
                    exits.extend(self.enter(clause, e));
                    cond = e;
                }
                "else_clause" => {
                    has_else = true;
                    exits.extend(self.enter(clause, cond));
                }
                _ => {}
            }
        }
        if !has_else {
            exits.push(cond);
        }
        Piece { entry: h, exits }
    }

    fn loop_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        self.loops.push(Loop {
            header: h,
            breaks: Vec::new(),
        });
        if let Some(body) = self.body_of(node, h) {
            self.w.flow.insert((h, body.entry));
            for x in body.exits {
                self.w.flow.insert((x, h));
            }
        }
        let breaks = self.loops.pop().map(|l| l.breaks).unwrap_or_default();
        // The loop's `else` runs when the header finds nothing more to do.
        let otherwise = node
            .child_by_field_name("alternative")
            .and_then(|e| self.body_of(e, h));
        let mut exits = match otherwise {
            Some(e) => {
                self.w.flow.insert((h, e.entry));
                e.exits
            }
            None => vec![h],
        };
        exits.extend(breaks);
        Piece { entry: h, exits }
    }

    fn try_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        let mut normal = self.enter(node, h);
        let mut handled = Vec::new();
        let mut finally = None;
        for clause in children(node) {
            match clause.kind() {
                "except_clause" | "except_group_clause" => {
                    let x = self.vertex(clause, Some(h));
                    self.w.flow.insert((h, x));
                    handled.extend(self.enter(clause, x));
                }
                "else_clause" => {
                    if let Some(body) = self.body_of(clause, h) {
                        for n in normal.drain(..) {
                            self.w.flow.insert((n, body.entry));
                        }
                        normal = body.exits;
                    }
                }
                "finally_clause" => finally = Some(clause),
                _ => {}
            }
        }
        normal.extend(handled);
        let Some(clause) = finally else {
            return Piece {
                entry: h,
                exits: normal,
            };
        };
        let f = self.vertex(clause, Some(h));
        for n in normal {
            self.w.flow.insert((n, f));
        }
        let exits = self.enter(clause, f);
        Piece { entry: h, exits }
    }

    fn match_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        // No case may match.
        let mut exits = vec![h];
        let block = node.child_by_field_name("body");
        for case in block.map(children).unwrap_or_default() {
            if case.kind() != "case_clause" {
                continue;
            }
            let c = self.vertex(case, Some(h));
            self.w.flow.insert((h, c));
            exits.extend(self.enter(case, c));
        }
        Piece { entry: h, exits }
    }
}

/// The names a statement (its header, for a compound one) sets and reads.
/// Whether an expression statement is only a string literal.
fn is_bare_string(node: Node) -> bool {
    matches!(
        children(node).as_slice(),
        [c] if matches!(c.kind(), "string" | "concatenated_string")
    )
}

fn names(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    match node.kind() {
        "function_definition" | "class_definition" => {
            if let Some(n) = node.child_by_field_name("name") {
                defs.insert(text(n, src).to_string());
            }
            for field in [
                "parameters",
                "superclasses",
                "return_type",
                "type_parameters",
            ] {
                if let Some(p) = node.child_by_field_name(field) {
                    if field == "parameters" {
                        parameters(p, src, defs, uses);
                    } else {
                        reads(p, src, uses);
                    }
                }
            }
        }
        "for_statement" => {
            if let Some(l) = node.child_by_field_name("left") {
                targets(l, src, defs, uses);
            }
            if let Some(r) = node.child_by_field_name("right") {
                reads(r, src, uses);
            }
        }
        "import_statement" | "import_from_statement" | "future_import_statement" => {
            imported(node, src, defs);
        }
        "except_clause" | "except_group_clause" => {
            let alias = node.child_by_field_name("alias");
            for c in children(node) {
                if Some(c.id()) == alias.map(|a| a.id()) {
                    targets(c, src, defs, uses);
                } else if c.kind() == "as_pattern" {
                    as_pattern(c, src, defs, uses);
                } else if c.kind() != "block" {
                    reads(c, src, uses);
                }
            }
        }
        "global_statement" | "nonlocal_statement" => {}
        _ => header_names(node, src, defs, uses),
    }
}

/// Walks a header (or simple statement), skipping bodies and nested clauses.
fn header_names(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    for child in children(node) {
        match child.kind() {
            k if BODY_KINDS.contains(&k) => {}
            "assignment" | "augmented_assignment" => assignment(child, src, defs, uses),
            // `with open(p) as f`, `except E as e`
            "as_pattern" => as_pattern(child, src, defs, uses),
            "with_clause" | "with_item" | "expression_statement" => {
                header_names(child, src, defs, uses)
            }
            "named_expression" => {
                if let Some(n) = child.child_by_field_name("name") {
                    defs.insert(text(n, src).to_string());
                }
                if let Some(v) = child.child_by_field_name("value") {
                    reads(v, src, uses);
                }
            }
            _ => reads(child, src, uses),
        }
    }
}

/// `x as y`: `y` is set, `x` read.
fn as_pattern(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    for c in children(node) {
        if c.kind() == "as_pattern_target" {
            targets(c, src, defs, uses);
        } else {
            reads(c, src, uses);
        }
    }
}

/// `a = b`, `a: T = b`, `a += b`, `a = b = c` (the right side of a chain is an assignment).
fn assignment(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    if let Some(l) = node.child_by_field_name("left") {
        targets(l, src, defs, uses);
        if node.kind() == "augmented_assignment" {
            reads(l, src, uses);
        }
    }
    if let Some(t) = node.child_by_field_name("type") {
        reads(t, src, uses);
    }
    if let Some(r) = node.child_by_field_name("right") {
        match r.kind() {
            "assignment" | "augmented_assignment" => assignment(r, src, defs, uses),
            _ => reads(r, src, uses),
        }
    }
}

/// Names an assignment target sets: identifiers, `a.b` chains, and the container of `a[i]`
/// (which is also read, as are the subscript and any object expression).
fn targets(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    match node.kind() {
        "identifier" => {
            defs.insert(text(node, src).to_string());
        }
        "attribute" => match chain(node, src) {
            Some(name) => {
                if let Some(obj) = node.child_by_field_name("object") {
                    reads(obj, src, uses);
                }
                defs.insert(name);
            }
            None => reads(node, src, uses),
        },
        "subscript" => {
            if let Some(v) = node.child_by_field_name("value") {
                if let Some(name) = chain(v, src) {
                    defs.insert(name);
                }
            }
            reads(node, src, uses);
        }
        _ => {
            for c in children(node) {
                targets(c, src, defs, uses);
            }
        }
    }
}

/// Parameters set their names; defaults and annotations are read.
fn parameters(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    for p in children(node) {
        match p.kind() {
            "identifier" | "list_splat_pattern" | "dictionary_splat_pattern" | "tuple_pattern" => {
                targets(p, src, defs, uses)
            }
            _ => {
                match p.child_by_field_name("name") {
                    Some(n) => targets(n, src, defs, uses),
                    // `x: int`, `*args: int`: the name is a child.
                    None => {
                        for c in children(p) {
                            if matches!(
                                c.kind(),
                                "identifier" | "list_splat_pattern" | "dictionary_splat_pattern"
                            ) {
                                targets(c, src, defs, uses);
                            }
                        }
                    }
                }
                for field in ["value", "type"] {
                    if let Some(v) = p.child_by_field_name(field) {
                        reads(v, src, uses);
                    }
                }
            }
        }
    }
}

/// Names an import binds: the alias, else the imported name, else a dotted module's first part.
fn imported(node: Node, src: &str, defs: &mut BTreeSet<String>) {
    let module = node.child_by_field_name("module_name").map(|m| m.id());
    for c in children(node) {
        if Some(c.id()) == module {
            continue;
        }
        match c.kind() {
            "aliased_import" => {
                if let Some(a) = c.child_by_field_name("alias") {
                    defs.insert(text(a, src).to_string());
                }
            }
            "dotted_name" => {
                let full = text(c, src);
                let name = if node.kind() == "import_statement" {
                    full.split('.').next().unwrap_or(full)
                } else {
                    full
                };
                defs.insert(name.to_string());
            }
            _ => {}
        }
    }
}

/// Every name `node` reads: identifiers, and attribute chains with their prefixes. Keyword
/// argument names and attribute names on their own are not reads.
fn reads(node: Node, src: &str, uses: &mut BTreeSet<String>) {
    match node.kind() {
        "identifier" => {
            uses.insert(text(node, src).to_string());
        }
        "attribute" => {
            if let Some(name) = chain(node, src) {
                read_chain(&name, uses);
            } else if let Some(obj) = node.child_by_field_name("object") {
                reads(obj, src, uses);
            }
        }
        "keyword_argument" => {
            if let Some(v) = node.child_by_field_name("value") {
                reads(v, src, uses);
            }
        }
        "string" | "comment" => {
            // f-string replacement fields are read; plain text is not.
            for c in children(node) {
                if c.kind() == "interpolation" {
                    reads(c, src, uses);
                }
            }
        }
        _ => {
            for c in children(node) {
                reads(c, src, uses);
            }
        }
    }
}

/// `a.b.c` when the attribute is a chain of plain names.
fn chain(node: Node, src: &str) -> Option<String> {
    flow::chain(node, src, &["identifier"], "attribute", "attribute")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::flow::testing::{edges, texts};
    use crate::graph::{slice, Edge, EdgeKind, SliceLimits};

    fn graph(src: &str) -> Ccg {
        build(src).expect("parses")
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn if_else_branches_and_joins() {
        let g = graph("x = 1\nif x > 0:\n    y = x\nelse:\n    y = -x\nprint(y)\n");
        assert_eq!(
            texts(&g),
            ["x = 1", "if x > 0:", "y = x", "y = -x", "print(y)"]
        );
        use EdgeKind::*;
        assert_eq!(
            edges(&g, ControlFlow),
            [(0, 1), (1, 2), (1, 3), (2, 4), (3, 4)]
        );
        assert_eq!(edges(&g, ControlDependence), [(1, 2), (1, 3)]);
        assert_eq!(
            edges(&g, DataDependence),
            [(0, 1), (0, 2), (0, 3), (2, 4), (3, 4)]
        );
        assert_eq!(
            (g.statements[1].start_line, g.statements[4].start_line),
            (2, 6)
        );
    }

    #[test]
    fn elif_hangs_off_the_condition_before_it() {
        let g = graph("if a:\n    f()\nelif b:\n    g()\nelse:\n    h()\nk()\n");
        assert_eq!(texts(&g), ["if a:", "f()", "elif b:", "g()", "h()", "k()"]);
        use EdgeKind::*;
        assert_eq!(
            edges(&g, ControlFlow),
            [(0, 1), (0, 2), (1, 5), (2, 3), (2, 4), (3, 5), (4, 5)]
        );
        assert_eq!(
            edges(&g, ControlDependence),
            [(0, 1), (0, 2), (2, 3), (2, 4)]
        );
    }

    const LOOP: &str = "\
total = 0
for i in items:
    if i < 0:
        continue
    if i > 9:
        break
    total += i
else:
    done()
print(total)
";

    #[test]
    fn loops_with_break_continue_and_else() {
        let g = graph(LOOP);
        assert_eq!(
            texts(&g),
            [
                "total = 0",
                "for i in items:",
                "if i < 0:",
                "continue",
                "if i > 9:",
                "break",
                "total += i",
                "done()",
                "print(total)"
            ]
        );
        use EdgeKind::*;
        assert_eq!(
            edges(&g, ControlFlow),
            [
                (0, 1),
                (1, 2),
                (1, 7),
                (2, 3),
                (2, 4),
                (3, 1),
                (4, 5),
                (4, 6),
                (5, 8),
                (6, 1),
                (7, 8)
            ]
        );
        assert_eq!(
            edges(&g, ControlDependence),
            [(1, 2), (1, 4), (1, 6), (1, 7), (2, 3), (4, 5)]
        );
        // `total += i` reads the total of the line before the loop and of the last iteration.
        assert_eq!(
            edges(&g, DataDependence),
            [(0, 6), (0, 8), (1, 2), (1, 4), (1, 6), (6, 6), (6, 8)]
        );
        assert_eq!(g.statements[6].defs, set(&["total"]));
        assert_eq!(g.statements[6].uses, set(&["i", "total"]));
    }

    #[test]
    fn try_handlers_finally_and_with() {
        let g = graph(
            "try:\n    f = open(p)\nexcept OSError as e:\n    log(e)\n    raise\nfinally:\n    cleanup()\nwith f as g:\n    data = g.read()\n",
        );
        assert_eq!(
            texts(&g),
            [
                "try:",
                "f = open(p)",
                "except OSError as e:",
                "log(e)",
                "raise",
                "finally:",
                "cleanup()",
                "with f as g:",
                "data = g.read()"
            ]
        );
        use EdgeKind::*;
        assert_eq!(
            edges(&g, ControlFlow),
            [
                (0, 1),
                (0, 2),
                (1, 5),
                (2, 3),
                (3, 4),
                (5, 6),
                (6, 7),
                (7, 8)
            ]
        );
        assert_eq!(
            edges(&g, ControlDependence),
            [(0, 1), (0, 2), (0, 5), (2, 3), (2, 4), (5, 6), (7, 8)]
        );
        assert_eq!(edges(&g, DataDependence), [(1, 7), (2, 3), (7, 8)]);
        assert_eq!(g.statements[2].defs, set(&["e"]));
        assert_eq!(g.statements[7].defs, set(&["g"]));
        assert_eq!(g.statements[7].uses, set(&["f"]));
    }

    #[test]
    fn assignments_parameters_and_attributes() {
        let g = graph(
            "class C(Base):\n    def put(self, key, *rest, flag=DEFAULT, **kw):\n        self.items[key] = rest\n        self.count += 1\n        a = b = self.count\n        return a, b\n",
        );
        let s = &g.statements;
        assert_eq!(s.len(), 6);
        assert_eq!(
            (s[0].defs.clone(), s[0].uses.clone()),
            (set(&["C"]), set(&["Base"]))
        );
        assert_eq!(
            s[1].defs,
            set(&["flag", "key", "kw", "put", "rest", "self"])
        );
        assert_eq!(s[1].uses, set(&["DEFAULT"]));
        assert_eq!(s[2].defs, set(&["self.items"]));
        assert_eq!(s[2].uses, set(&["key", "rest", "self", "self.items"]));
        assert_eq!(s[3].defs, set(&["self.count"]));
        assert_eq!(s[3].uses, set(&["self", "self.count"]));
        assert_eq!(s[4].defs, set(&["a", "b"]));
        assert_eq!(s[4].uses, set(&["self", "self.count"]));
        use EdgeKind::*;
        assert_eq!(
            edges(&g, ControlFlow),
            [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
        );
        assert_eq!(
            edges(&g, DataDependence),
            [(1, 2), (1, 3), (1, 4), (3, 4), (4, 5)]
        );
        assert_eq!(
            edges(&g, ControlDependence),
            [(0, 1), (1, 2), (1, 3), (1, 4), (1, 5)]
        );
    }

    #[test]
    fn imports_bind_their_names_and_decorators_are_read() {
        let g = graph(
            "import os.path\nimport numpy as np\nfrom .util import a, b as c\n@cache(np)\ndef f():\n    return os.path.join(a, c)\n",
        );
        let s = &g.statements;
        assert_eq!(s[0].defs, set(&["os"]));
        assert_eq!(s[1].defs, set(&["np"]));
        assert_eq!(s[2].defs, set(&["a", "c"]));
        assert_eq!(s[3].text, "@cache(np)\ndef f():");
        assert_eq!(s[3].start_line, 4);
        assert_eq!(s[3].uses, set(&["cache", "np"]));
        assert_eq!(
            edges(&g, EdgeKind::DataDependence),
            [(0, 4), (1, 3), (2, 4)]
        );
    }

    #[test]
    fn slices_follow_flow_back_and_take_dependences() {
        let g = graph(LOOP);
        let at = |target, hops, statements| {
            slice(&g, target, &SliceLimits { hops, statements }).statements
        };
        // `print(total)`: its definitions (0, 6), its flow predecessors (7 and 5), their
        // governing statements (1, 4); the loop header's own predecessors are two hops away.
        assert_eq!(at(8, 1, 10), [0, 1, 4, 5, 6, 7, 8]);
        // The size bound stops the walk after the first statement and its dependences.
        assert_eq!(at(8, 1, 3), [0, 6, 8]);
        // Nothing after the target, though the loop's back edges lead there.
        assert_eq!(at(4, 10, 100), [0, 1, 2, 3, 4]);
        let s = slice(
            &g,
            8,
            &SliceLimits {
                hops: 1,
                statements: 3,
            },
        );
        assert_eq!(s.text(&g), "total = 0\n    total += i\nprint(total)");
        assert!(s
            .edges
            .iter()
            .all(|e| [0, 6, 8].contains(&e.from) && [0, 6, 8].contains(&e.to)));
        // Every slice's edges are exactly those of the whole list among its statements, in order.
        for target in 0..g.statements.len() {
            let s = slice(&g, target, &SliceLimits::default());
            let among: Vec<Edge> = g
                .edges
                .iter()
                .filter(|e| s.statements.contains(&e.from) && s.statements.contains(&e.to))
                .cloned()
                .collect();
            assert_eq!(s.edges, among, "slice of {target}");
            assert!(!s.edges.is_empty() || s.statements.len() == 1);
        }
        assert_eq!(g.statement_at_line(7), Some(6));
        assert_eq!(g.statement_at_line(8), Some(6));
    }

    #[test]
    fn docstrings_are_no_statements() {
        let g = graph(
            "class C:\n    \"\"\"Doc\n    string.\"\"\"\n    def f(self):\n        'doc'\n        x = 'a' 'b'\n        return x\n",
        );
        assert_eq!(
            texts(&g),
            ["class C:", "def f(self):", "x = 'a' 'b'", "return x"]
        );
        // Flow runs around them: the method's header leads to its first real statement.
        assert!(g.edges.contains(&Edge {
            from: 1,
            to: 2,
            kind: EdgeKind::ControlFlow
        }));
    }

    #[test]
    fn code_cut_at_a_cursor_keeps_what_parsed() {
        let g = graph("def f(a):\n    b = a + 1\n    if b:\n        return sel");
        assert!(texts(&g).contains(&"b = a + 1"), "{:?}", texts(&g));
        assert!(g.edges.contains(&Edge {
            from: 0,
            to: 1,
            kind: EdgeKind::DataDependence
        }));
    }
}
