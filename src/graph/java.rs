//! The code context graph of Java source, from tree-sitter.
//!
//! The same reading as Python's: one vertex per simple statement or compound header (`if (x)`,
//! `for (...)`, `try`, `case 1:`, a method's signature), control flow by Java's rules with an
//! exception drawn as one edge from the `try` header to each `catch`, a method body entered
//! from its signature and left nowhere, a `do` loop drawn like a `while` (its condition read
//! at the `do`), and `switch` groups falling through to the next group until a `break`.
//! Control dependence follows the syntax; data dependence is reaching definitions over the
//! flow. A field `x` set as `this.x` is the name `this.x`; lambdas and anonymous classes count
//! as reads of their enclosing statement.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::flow::{self, children, read_chain, text, Piece, Wiring};
use super::Ccg;
use crate::repo::lang::parse_tree;
use crate::repo::model::Lang;

pub(super) fn build(source: &str) -> Option<Ccg> {
    let tree = parse_tree(Lang::Java, source)?;
    let mut b = Builder {
        src: source,
        w: Wiring::default(),
        frames: Vec::new(),
    };
    b.sequence(children(tree.root_node()), None);
    Some(b.w.finish())
}

/// Where `break` (and, in a loop, `continue`) goes.
struct Frame {
    /// The loop header; `None` for a `switch`.
    header: Option<usize>,
    breaks: Vec<usize>,
}

struct Builder<'a> {
    src: &'a str,
    w: Wiring,
    frames: Vec<Frame>,
}

const CLASS_KINDS: &[&str] = &[
    "class_declaration",
    "interface_declaration",
    "enum_declaration",
    "record_declaration",
    "annotation_type_declaration",
];

/// What a compound statement's header ends before: its body, or its first statement.
fn body_part(node: Node) -> Option<Node> {
    match node.kind() {
        "if_statement" => node.child_by_field_name("consequence"),
        "finally_clause" | "static_initializer" => {
            children(node).into_iter().find(|c| c.kind() == "block")
        }
        "labeled_statement" => children(node).into_iter().nth(1),
        "switch_block_statement_group" | "switch_rule" => children(node)
            .into_iter()
            .find(|c| c.kind() != "switch_label" && !c.kind().ends_with("comment")),
        _ => node.child_by_field_name("body"),
    }
}

fn header_end(node: Node) -> usize {
    body_part(node).map_or(node.end_byte(), |b| b.start_byte())
}

impl Builder<'_> {
    /// Wires `nodes` one after another; `None` when none of them is a statement.
    fn sequence(&mut self, nodes: Vec<Node>, parent: Option<usize>) -> Option<Piece> {
        let pieces = nodes
            .into_iter()
            .filter_map(|n| self.statement(n, parent))
            .collect();
        self.w.join(pieces)
    }

    /// Wires `body` (a statement or block) after `header`, which governs it; its fall-through
    /// exits, or the header itself when the body holds no statement.
    fn enter(&mut self, body: Option<Node>, header: usize) -> Vec<usize> {
        match body.and_then(|b| self.statement(b, Some(header))) {
            Some(piece) => {
                self.w.flow.insert((header, piece.entry));
                piece.exits
            }
            None => vec![header],
        }
    }

    /// A new vertex for `node` (its header when compound), control-dependent on `parent`.
    fn vertex(&mut self, node: Node, parent: Option<usize>) -> usize {
        let (mut defs, mut uses) = (BTreeSet::new(), BTreeSet::new());
        names(node, self.src, &mut defs, &mut uses);
        self.w
            .vertex(self.src, node, header_end(node), (defs, uses), parent)
    }

    fn simple(&mut self, node: Node, parent: Option<usize>, falls_through: bool) -> Piece {
        let v = self.vertex(node, parent);
        Piece {
            entry: v,
            exits: if falls_through { vec![v] } else { Vec::new() },
        }
    }

    fn statement(&mut self, node: Node, parent: Option<usize>) -> Option<Piece> {
        let kind = node.kind();
        match kind {
            "line_comment" | "block_comment" | "modifiers" => None,
            "program" | "ERROR" | "block" | "constructor_body" => {
                self.sequence(children(node), parent)
            }
            k if CLASS_KINDS.contains(&k) => Some(self.class(node, parent)),
            "method_declaration"
            | "constructor_declaration"
            | "compact_constructor_declaration" => {
                let h = self.vertex(node, parent);
                let saved = std::mem::take(&mut self.frames);
                let body = node.child_by_field_name("body");
                let body = body.and_then(|b| self.sequence(children(b), Some(h)));
                self.frames = saved;
                if let Some(b) = body {
                    self.w.flow.insert((h, b.entry));
                }
                Some(Piece {
                    entry: h,
                    exits: vec![h],
                })
            }
            "static_initializer" | "synchronized_statement" => {
                let h = self.vertex(node, parent);
                let exits = self.enter(body_part(node), h);
                Some(Piece { entry: h, exits })
            }
            "labeled_statement" => {
                let h = self.vertex(node, parent);
                let exits = self.enter(body_part(node), h);
                Some(Piece { entry: h, exits })
            }
            "if_statement" => Some(self.if_statement(node, parent)),
            "while_statement" | "for_statement" | "enhanced_for_statement" | "do_statement" => {
                Some(self.loop_statement(node, parent))
            }
            "try_statement" | "try_with_resources_statement" => {
                Some(self.try_statement(node, parent))
            }
            "switch_expression" => Some(self.switch(node, parent)),
            "return_statement" | "throw_statement" | "yield_statement" => {
                Some(self.simple(node, parent, false))
            }
            "break_statement" => {
                let b = self.vertex(node, parent);
                if let Some(f) = self.frames.last_mut() {
                    f.breaks.push(b);
                }
                Some(Piece {
                    entry: b,
                    exits: Vec::new(),
                })
            }
            "continue_statement" => {
                let c = self.vertex(node, parent);
                if let Some(h) = self.frames.iter().rev().find_map(|f| f.header) {
                    self.w.flow.insert((c, h));
                }
                Some(Piece {
                    entry: c,
                    exits: Vec::new(),
                })
            }
            k if k.ends_with("_statement")
                || k.ends_with("_declaration")
                || k == "explicit_constructor_invocation" =>
            {
                Some(self.simple(node, parent, true))
            }
            _ => None,
        }
    }

    /// A class-like declaration: its members run in order after its header, as a class body
    /// does in Python (what matters here is what precedes what).
    fn class(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        let mut members = Vec::new();
        for c in node
            .child_by_field_name("body")
            .map(children)
            .unwrap_or_default()
        {
            if c.kind() == "enum_body_declarations" {
                members.extend(children(c));
            } else {
                members.push(c);
            }
        }
        let saved = std::mem::take(&mut self.frames);
        let body = self.sequence(members, Some(h));
        self.frames = saved;
        match body {
            Some(b) => {
                self.w.flow.insert((h, b.entry));
                Piece {
                    entry: h,
                    exits: b.exits,
                }
            }
            None => Piece {
                entry: h,
                exits: vec![h],
            },
        }
    }

    fn if_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        let mut exits = self.enter(node.child_by_field_name("consequence"), h);
        match node.child_by_field_name("alternative") {
            // `else if`: the next condition hangs off this one.
            Some(alt) if alt.kind() == "if_statement" => {
                let next = self.if_statement(alt, Some(h));
                self.w.flow.insert((h, next.entry));
                exits.extend(next.exits);
            }
            Some(alt) => exits.extend(self.enter(Some(alt), h)),
            None => exits.push(h),
        }
        Piece { entry: h, exits }
    }

    fn loop_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        self.frames.push(Frame {
            header: Some(h),
            breaks: Vec::new(),
        });
        if let Some(body) = node
            .child_by_field_name("body")
            .and_then(|b| self.statement(b, Some(h)))
        {
            self.w.flow.insert((h, body.entry));
            for x in body.exits {
                self.w.flow.insert((x, h));
            }
        }
        let breaks = self.frames.pop().map(|f| f.breaks).unwrap_or_default();
        let mut exits = vec![h];
        exits.extend(breaks);
        Piece { entry: h, exits }
    }

    fn try_statement(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        let mut normal = self.enter(node.child_by_field_name("body"), h);
        let mut finally = None;
        for clause in children(node) {
            match clause.kind() {
                "catch_clause" => {
                    let x = self.vertex(clause, Some(h));
                    self.w.flow.insert((h, x));
                    normal.extend(self.enter(clause.child_by_field_name("body"), x));
                }
                "finally_clause" => finally = Some(clause),
                _ => {}
            }
        }
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
        let exits = self.enter(body_part(clause), f);
        Piece { entry: h, exits }
    }

    /// `switch`: each group or rule is a vertex (its labels) governed by the header; a group
    /// falls through into the next one, a rule does not.
    fn switch(&mut self, node: Node, parent: Option<usize>) -> Piece {
        let h = self.vertex(node, parent);
        self.frames.push(Frame {
            header: None,
            breaks: Vec::new(),
        });
        // No case may match.
        let mut exits = vec![h];
        let mut falling: Vec<usize> = Vec::new();
        for case in node
            .child_by_field_name("body")
            .map(children)
            .unwrap_or_default()
        {
            let rule = match case.kind() {
                "switch_rule" => true,
                "switch_block_statement_group" => false,
                _ => continue,
            };
            let c = self.vertex(case, Some(h));
            self.w.flow.insert((h, c));
            for f in falling.drain(..) {
                self.w.flow.insert((f, c));
            }
            let body: Vec<Node> = children(case)
                .into_iter()
                .filter(|n| n.kind() != "switch_label")
                .collect();
            let out = match self.sequence(body, Some(c)) {
                Some(p) => {
                    self.w.flow.insert((c, p.entry));
                    p.exits
                }
                None => vec![c],
            };
            if rule {
                exits.extend(out);
            } else {
                falling = out;
            }
        }
        exits.extend(falling);
        exits.extend(self.frames.pop().map(|f| f.breaks).unwrap_or_default());
        Piece { entry: h, exits }
    }
}

/// The names a statement (its header, for a compound one) sets and reads.
fn names(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    let name = |n: Node, defs: &mut BTreeSet<String>| {
        if let Some(x) = n.child_by_field_name("name") {
            defs.insert(text(x, src).to_string());
        }
    };
    match node.kind() {
        k if CLASS_KINDS.contains(&k) => {
            name(node, defs);
            if let Some(p) = node.child_by_field_name("parameters") {
                children(p).into_iter().for_each(|p| name(p, defs));
            }
        }
        "method_declaration" | "constructor_declaration" | "compact_constructor_declaration" => {
            name(node, defs);
            if let Some(p) = node.child_by_field_name("parameters") {
                children(p).into_iter().for_each(|p| name(p, defs));
            }
        }
        "local_variable_declaration" | "field_declaration" => declarators(node, src, defs, uses),
        "enhanced_for_statement" => {
            name(node, defs);
            if let Some(v) = node.child_by_field_name("value") {
                expr(v, src, defs, uses);
            }
        }
        "catch_clause" => {
            for p in children(node) {
                if p.kind() == "catch_formal_parameter" {
                    name(p, defs);
                }
            }
        }
        "for_statement" => {
            let mut cursor = node.walk();
            for init in node.children_by_field_name("init", &mut cursor) {
                if init.kind() == "local_variable_declaration" {
                    declarators(init, src, defs, uses);
                } else {
                    expr(init, src, defs, uses);
                }
            }
            let mut cursor = node.walk();
            let rest: Vec<Node> = node
                .children_by_field_name("condition", &mut cursor)
                .collect();
            let mut cursor = node.walk();
            for e in rest
                .into_iter()
                .chain(node.children_by_field_name("update", &mut cursor))
            {
                expr(e, src, defs, uses);
            }
        }
        "try_with_resources_statement" => {
            for r in node
                .child_by_field_name("resources")
                .map(children)
                .unwrap_or_default()
            {
                name(r, defs);
                match r.child_by_field_name("value") {
                    Some(v) => expr(v, src, defs, uses),
                    None if r.child_by_field_name("name").is_none() => expr(r, src, defs, uses),
                    None => {}
                }
            }
        }
        "import_declaration" => {
            let path = children(node)
                .into_iter()
                .find(|c| matches!(c.kind(), "scoped_identifier" | "identifier"));
            let wildcard = children(node).iter().any(|c| c.kind() == "asterisk");
            if let (Some(p), false) = (path, wildcard) {
                let full = text(p, src);
                defs.insert(full.rsplit('.').next().unwrap_or(full).to_string());
            }
        }
        "package_declaration" | "labeled_statement" | "break_statement" | "continue_statement" => {}
        _ => {
            let end = header_end(node);
            for c in children(node) {
                if c.start_byte() < end {
                    expr(c, src, defs, uses);
                }
            }
        }
    }
}

/// `T a = x, b;`: the declared names are set, the initialisers read.
fn declarators(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    let mut cursor = node.walk();
    for d in node.children_by_field_name("declarator", &mut cursor) {
        if let Some(n) = d.child_by_field_name("name") {
            defs.insert(text(n, src).to_string());
        }
        if let Some(v) = d.child_by_field_name("value") {
            expr(v, src, defs, uses);
        }
    }
}

/// The names an expression sets (assignments, `++`) and reads.
fn expr(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    match node.kind() {
        "identifier" => {
            uses.insert(text(node, src).to_string());
        }
        "assignment_expression" => {
            if let Some(l) = node.child_by_field_name("left") {
                target(l, src, defs, uses);
                let op = node.child_by_field_name("operator").map(|o| text(o, src));
                if op != Some("=") {
                    expr(l, src, defs, uses);
                }
            }
            if let Some(r) = node.child_by_field_name("right") {
                expr(r, src, defs, uses);
            }
        }
        "update_expression" => {
            for c in children(node) {
                target(c, src, defs, uses);
                expr(c, src, defs, uses);
            }
        }
        "field_access" => match chain(node, src) {
            Some(name) => read_chain(&name, uses),
            None => {
                if let Some(o) = node.child_by_field_name("object") {
                    expr(o, src, defs, uses);
                }
            }
        },
        "method_invocation" => {
            // The method's name is not a variable.
            for field in ["object", "arguments"] {
                if let Some(c) = node.child_by_field_name(field) {
                    expr(c, src, defs, uses);
                }
            }
        }
        "string_literal" | "line_comment" | "block_comment" | "type_identifier" | "modifiers" => {}
        _ => {
            for c in children(node) {
                expr(c, src, defs, uses);
            }
        }
    }
}

/// What an assignment sets: a variable, a `this.x` / `a.b` chain, or the array of `a[i]`
/// (whose index is read).
fn target(node: Node, src: &str, defs: &mut BTreeSet<String>, uses: &mut BTreeSet<String>) {
    match node.kind() {
        "identifier" | "field_access" => {
            if let Some(name) = chain(node, src) {
                defs.insert(name);
            }
            if let Some(o) = node.child_by_field_name("object") {
                expr(o, src, defs, uses);
            }
        }
        "array_access" => {
            if let Some(a) = node
                .child_by_field_name("array")
                .and_then(|a| chain(a, src))
            {
                defs.insert(a);
            }
            expr(node, src, defs, uses);
        }
        _ => {}
    }
}

/// `a.b.c` / `this.x` when the access is a chain of plain names.
fn chain(node: Node, src: &str) -> Option<String> {
    flow::chain(node, src, &["identifier", "this"], "field_access", "field")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::flow::testing::{edges, texts};
    use crate::graph::{slice, EdgeKind, SliceLimits};

    fn graph(src: &str) -> Ccg {
        build(src).expect("parses")
    }

    #[test]
    fn branches_loops_and_assignments() {
        let g = graph(
            "class A {
    int total(int[] xs, int limit) {
        int sum = 0;
        for (int x : xs) {
            if (x > limit) {
                break;
            } else if (x < 0) {
                continue;
            } else {
                sum += x;
            }
        }
        return sum;
    }
}
",
        );
        assert_eq!(
            texts(&g),
            vec![
                "class A",
                "int total(int[] xs, int limit)",
                "int sum = 0;",
                "for (int x : xs)",
                "if (x > limit)",
                "break;",
                "if (x < 0)",
                "continue;",
                "sum += x;",
                "return sum;",
            ]
        );
        assert_eq!(
            edges(&g, EdgeKind::ControlFlow),
            vec![
                (0, 1),
                (1, 2),
                (2, 3),
                (3, 4),
                (3, 9),
                (4, 5),
                (4, 6),
                (5, 9),
                (6, 7),
                (6, 8),
                (7, 3),
                (8, 3),
            ]
        );
        let control = edges(&g, EdgeKind::ControlDependence);
        for pair in [(1, 2), (3, 4), (4, 5), (4, 6), (6, 7), (6, 8)] {
            assert!(control.contains(&pair), "{pair:?} in {control:?}");
        }
        let data = edges(&g, EdgeKind::DataDependence);
        // `sum` from its declaration and from `sum += x` (round the loop) reaches both uses;
        // `x` from the loop header, `limit` from the signature.
        for pair in [
            (2, 8),
            (2, 9),
            (8, 8),
            (8, 9),
            (3, 4),
            (3, 6),
            (3, 8),
            (1, 4),
        ] {
            assert!(data.contains(&pair), "{pair:?} in {data:?}");
        }
        assert!(g.statements[8].defs.contains("sum"));
        assert!(g.statements[8].uses.contains("sum"));
    }

    #[test]
    fn try_switch_and_fields() {
        let g = graph(
            "class B {
    private List<String> items;
    B() {
        this.items = new ArrayList<>();
    }
    void add(String s, int k) {
        try {
            switch (k) {
                case 1:
                    this.items.add(s);
                case 2:
                    log(s);
                    break;
                default:
                    throw new IllegalStateException();
            }
        } catch (RuntimeException e) {
            report(e);
        } finally {
            done();
        }
    }
}
",
        );
        assert_eq!(
            texts(&g),
            vec![
                "class B",
                "private List<String> items;",
                "B()",
                "this.items = new ArrayList<>();",
                "void add(String s, int k)",
                "try",
                "switch (k)",
                "case 1:",
                "this.items.add(s);",
                "case 2:",
                "log(s);",
                "break;",
                "default:",
                "throw new IllegalStateException();",
                "catch (RuntimeException e)",
                "report(e);",
                "finally",
                "done();",
            ]
        );
        let flow = edges(&g, EdgeKind::ControlFlow);
        // Case 1 falls through into case 2; the break and the switch's end reach `finally`.
        for pair in [
            (6, 7),
            (7, 8),
            (8, 9),
            (6, 9),
            (9, 10),
            (10, 11),
            (6, 12),
            (12, 13),
        ] {
            assert!(flow.contains(&pair), "{pair:?} in {flow:?}");
        }
        for pair in [(5, 14), (14, 15), (15, 16), (11, 16), (6, 16), (16, 17)] {
            assert!(flow.contains(&pair), "{pair:?} in {flow:?}");
        }
        assert!(!flow.contains(&(13, 16)), "a throw falls through nowhere");
        assert!(g.statements[3].defs.contains("this.items"));
        assert!(g.statements[8].uses.contains("this.items"));
        let data = edges(&g, EdgeKind::DataDependence);
        assert!(data.contains(&(14, 15)), "the caught `e`: {data:?}");
        assert!(
            data.contains(&(4, 8)) && data.contains(&(4, 10)),
            "{data:?}"
        );

        // A slice of the statement in case 1 climbs to its case, switch, try and method.
        let s = slice(&g, 8, &SliceLimits::default());
        for v in [4, 5, 6, 7, 8] {
            assert!(s.statements.contains(&v), "{v} in {:?}", s.statements);
        }
    }
}
