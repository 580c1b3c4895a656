//! Java front end: types, methods, constructors, imports and call sites from one tree-sitter walk.
//!
//! The package declaration gives the qualified-name prefix (`FileSymbols::module`). Nested and
//! local classes continue the chain; anonymous class bodies open no name of their own, so their
//! methods are named as if nested in the enclosing method (see [`super`] for the scheme).

use std::cell::RefCell;

use tree_sitter::{Node, Parser, TreeCursor};

use super::{
    empty_span_at_end, join_qualname, new_parser, one_line, parse_with, push_unique, span_between,
    span_of, squeeze, text, unparsed, walk, Language, Scopes, Visitor,
};
use crate::repo::model::{CallSite, Class, FileSymbols, Function, Import, Lang, SymbolKind};

/// The Java front end (`.java`).
pub struct Java;

thread_local! {
    pub(super) static PARSER: RefCell<Parser> = RefCell::new(new_parser(tree_sitter_java::LANGUAGE.into()));
}

impl Language for Java {
    fn lang(&self) -> Lang {
        Lang::Java
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["java"]
    }

    /// `module` is ignored: the package comes from the source.
    fn parse(&self, path: &str, _module: &str, source: &str) -> FileSymbols {
        let Some(tree) = parse_with(&PARSER, source) else {
            return unparsed(path, "", Lang::Java);
        };
        let mut ex = Extractor {
            src: source,
            out: FileSymbols {
                path: path.to_string(),
                lang: Some(Lang::Java),
                module: String::new(),
                functions: Vec::new(),
                classes: Vec::new(),
                imports: Vec::new(),
                parse_errors: 0,
            },
            scopes: Scopes::new(),
            javadoc: None,
        };
        walk(tree.root_node(), &mut ex);
        ex.out
    }
}

enum ScopeKind {
    Function {
        index: usize,
    },
    Class {
        index: usize,
    },
    /// An anonymous class body: its qualified name is the enclosing scope's.
    Anonymous,
}

struct Extractor<'s, 't> {
    src: &'s str,
    out: FileSymbols,
    scopes: Scopes<ScopeKind>,
    /// The `/** ... */` comment just walked, for the declaration that follows it.
    javadoc: Option<Node<'t>>,
}

const TYPE_DECLARATIONS: &[&str] = &[
    "class_declaration",
    "interface_declaration",
    "enum_declaration",
    "record_declaration",
    "annotation_type_declaration",
];

impl<'t> Visitor<'t> for Extractor<'_, 't> {
    fn enter(&mut self, cursor: &TreeCursor<'t>) {
        let node = cursor.node();
        if node.is_error() || node.is_missing() {
            self.out.parse_errors += 1;
        }
        self.scopes.enter(node);
        let kind = node.kind();
        if kind == "line_comment" {
            return;
        }
        if kind == "block_comment" {
            self.javadoc = text(self.src, node).starts_with("/**").then_some(node);
            return;
        }
        // A Javadoc documents only the declaration right after it.
        let javadoc = self.javadoc.take();
        match kind {
            "package_declaration" => self.package(node),
            "import_declaration" => self.import(node),
            "method_declaration"
            | "constructor_declaration"
            | "compact_constructor_declaration"
            | "annotation_type_element_declaration" => self.method(node, javadoc),
            "method_invocation" => {
                if let Some(name) = node.child_by_field_name("name") {
                    self.call(node, name);
                }
            }
            "explicit_constructor_invocation" => {
                if let Some(ctor) = node.child_by_field_name("constructor") {
                    self.call(node, ctor);
                }
            }
            "object_creation_expression" => self.creation(node),
            "field_declaration" | "constant_declaration" => self.fields(node),
            "enum_constant" => self.enum_constant(node),
            _ if TYPE_DECLARATIONS.contains(&kind) => self.class(node),
            _ => {}
        }
    }

    fn leave(&mut self, node: Node<'t>) {
        self.scopes.leave(node);
    }
}

impl<'t> Extractor<'_, 't> {
    /// Qualified-name prefix here, and the enclosing class index if directly in a class body.
    fn context(&self) -> (&str, Option<usize>) {
        let named = self
            .scopes
            .innermost(|k| !matches!(k, ScopeKind::Anonymous));
        let prefix = named.map_or(self.out.module.as_str(), |s| s.qualname.as_str());
        (prefix, self.class_index_here())
    }

    fn package(&mut self, node: Node<'t>) {
        let mut cursor = node.walk();
        let name = node
            .named_children(&mut cursor)
            .find(|n| matches!(n.kind(), "scoped_identifier" | "identifier"));
        if let Some(name) = name {
            self.out.module = squeeze(text(self.src, name));
        }
    }

    /// `import a.b.C` → module `a.b`, name `C`; `import static a.b.C.m` → module `a.b.C`, name
    /// `m`; `import a.b.*` → module `a.b`, wildcard.
    fn import(&mut self, node: Node<'t>) {
        let mut cursor = node.walk();
        let mut dotted = None;
        let mut is_static = false;
        let mut is_wildcard = false;
        for child in node.children(&mut cursor) {
            match child.kind() {
                "static" => is_static = true,
                "asterisk" => is_wildcard = true,
                "scoped_identifier" | "identifier" => dotted = Some(squeeze(text(self.src, child))),
                _ => {}
            }
        }
        let Some(dotted) = dotted else {
            return;
        };
        let (module, name) = if is_wildcard {
            (dotted, None)
        } else {
            match dotted.rsplit_once('.') {
                Some((m, n)) => (m.to_string(), Some(n.to_string())),
                None => (String::new(), Some(dotted)),
            }
        };
        self.out.imports.push(Import {
            module,
            name,
            alias: None,
            level: 0,
            is_static,
            is_wildcard,
            line: node.start_position().row + 1,
            scope: None,
        });
    }

    fn class(&mut self, node: Node<'t>) {
        let Some(name_node) = node.child_by_field_name("name") else {
            return;
        };
        let name = text(self.src, name_node);
        let (prefix, _) = self.context();
        let qualname = join_qualname(prefix, name);
        let mut bases = Vec::new();
        let mut members = Vec::new();
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            match child.kind() {
                "superclass" | "super_interfaces" | "extends_interfaces" => {
                    self.type_names(child, &mut bases)
                }
                // Record components are the record's fields.
                "formal_parameters" => members = self.params(child),
                _ => {}
            }
        }
        let index = self.out.classes.len();
        self.out.classes.push(Class {
            qualname: qualname.clone(),
            name: name.to_string(),
            path: self.out.path.clone(),
            span: span_of(node),
            bases,
            members,
            methods: Vec::new(),
        });
        if let Some(body) = node.child_by_field_name("body") {
            self.scopes
                .open_at(node, body, qualname, ScopeKind::Class { index });
        }
    }

    /// The types listed under `extends` / `implements` (directly or through a `type_list`).
    fn type_names(&self, node: Node<'t>, out: &mut Vec<String>) {
        let mut cursor = node.walk();
        for t in node.named_children(&mut cursor) {
            match t.kind() {
                "type_list" => self.type_names(t, out),
                "line_comment" | "block_comment" => {}
                _ => out.push(squeeze(text(self.src, t))),
            }
        }
    }

    fn method(&mut self, node: Node<'t>, javadoc: Option<Node<'t>>) {
        let Some(name_node) = node.child_by_field_name("name") else {
            return;
        };
        let name = text(self.src, name_node);
        let (prefix, class_index) = self.context();
        let qualname = join_qualname(prefix, name);
        let class = class_index.map(|_| prefix.to_string());
        let params = match node.child_by_field_name("parameters") {
            Some(p) => self.params(p),
            // A compact canonical constructor takes the record's components.
            None if node.kind() == "compact_constructor_declaration" => node
                .parent()
                .and_then(|body| body.parent())
                .and_then(|record| record.child_by_field_name("parameters"))
                .map(|p| self.params(p))
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let body = node.child_by_field_name("body");
        let (signature, body_span) = match body {
            Some(body) => {
                let header_end = body.prev_sibling().map(skip_back_comments);
                (
                    span_between(node, header_end.unwrap_or(name_node)),
                    span_of(body),
                )
            }
            // Abstract and interface methods and annotation elements: the header is everything
            // before the `;`.
            None => {
                let last = node
                    .child(node.child_count().saturating_sub(1))
                    .filter(|c| c.kind() == ";")
                    .and_then(|semi| semi.prev_sibling())
                    .map(skip_back_comments)
                    .unwrap_or(node);
                (span_between(node, last), empty_span_at_end(node))
            }
        };
        if let Some(ci) = class_index {
            push_unique(&mut self.out.classes[ci].methods, &qualname);
        }
        let index = self.out.functions.len();
        self.out.functions.push(Function {
            qualname: qualname.clone(),
            name: name.to_string(),
            kind: SymbolKind::Method,
            path: self.out.path.clone(),
            class,
            span: span_of(node),
            signature,
            body: body_span,
            docstring: javadoc.map(|c| javadoc_text(text(self.src, c))),
            params,
            calls: Vec::new(),
        });
        if let Some(body) = body {
            self.scopes
                .open_at(node, body, qualname, ScopeKind::Function { index });
        }
    }

    /// Parameter names: `formal_parameter` and varargs (`String... rest` → `rest`).
    fn params(&self, params: Node<'t>) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = params.walk();
        for p in params.named_children(&mut cursor) {
            let name = match p.kind() {
                "formal_parameter" => p.child_by_field_name("name"),
                "spread_parameter" => {
                    let mut c = p.walk();
                    let declarator = p
                        .named_children(&mut c)
                        .find(|n| n.kind() == "variable_declarator");
                    declarator.and_then(|d| d.child_by_field_name("name"))
                }
                _ => None,
            };
            if let Some(n) = name {
                out.push(text(self.src, n).to_string());
            }
        }
        out
    }

    /// A call written from the start of `node` through `name_end` (`foo`, `this.bar`, `A.b`,
    /// `x.y().z`, `super`), on `name_end`'s line.
    fn call(&mut self, node: Node<'t>, name_end: Node<'t>) {
        let written = self
            .src
            .get(node.start_byte()..name_end.end_byte())
            .unwrap_or("");
        self.record_call(one_line(written), name_end);
    }

    /// `new Foo(...)` calls `Foo`'s constructor and is recorded as `new Foo`; an anonymous class
    /// body opens a scope that keeps the enclosing name.
    fn creation(&mut self, node: Node<'t>) {
        if let Some(ty) = node.child_by_field_name("type") {
            let callee = format!("new {}", squeeze(text(self.src, ty)));
            self.record_call(callee, ty);
        }
        let mut cursor = node.walk();
        let body = node
            .named_children(&mut cursor)
            .find(|c| c.kind() == "class_body");
        if let Some(body) = body {
            let qualname = self.context().0.to_string();
            self.scopes
                .open_at(node, body, qualname, ScopeKind::Anonymous);
        }
    }

    /// Adds a call to the innermost enclosing method (calls in field initialisers belong to none).
    fn record_call(&mut self, callee: String, at: Node<'t>) {
        if let Some(ScopeKind::Function { index }) = self
            .scopes
            .innermost(|k| matches!(k, ScopeKind::Function { .. }))
            .map(|s| &s.kind)
        {
            let index = *index;
            self.out.functions[index].calls.push(CallSite {
                callee,
                line: at.end_position().row + 1,
            });
        }
    }

    fn class_index_here(&self) -> Option<usize> {
        match self.scopes.top().map(|s| &s.kind) {
            Some(ScopeKind::Class { index }) => Some(*index),
            _ => None,
        }
    }

    fn fields(&mut self, node: Node<'t>) {
        let Some(ci) = self.class_index_here() else {
            return;
        };
        let mut cursor = node.walk();
        let names: Vec<&str> = node
            .children_by_field_name("declarator", &mut cursor)
            .filter_map(|d| d.child_by_field_name("name"))
            .map(|n| text(self.src, n))
            .collect();
        for name in names {
            push_unique(&mut self.out.classes[ci].members, name);
        }
    }

    /// Enum constants are the enum's fields; a constant's body is an anonymous class.
    fn enum_constant(&mut self, node: Node<'t>) {
        if let (Some(ci), Some(name)) = (self.class_index_here(), node.child_by_field_name("name"))
        {
            let name = text(self.src, name).to_string();
            push_unique(&mut self.out.classes[ci].members, &name);
        }
        if let Some(body) = node.child_by_field_name("body") {
            let qualname = self.context().0.to_string();
            self.scopes
                .open_at(node, body, qualname, ScopeKind::Anonymous);
        }
    }
}

fn skip_back_comments(mut node: Node) -> Node {
    while matches!(node.kind(), "line_comment" | "block_comment") {
        match node.prev_sibling() {
            Some(prev) => node = prev,
            None => break,
        }
    }
    node
}

/// Javadoc text: without `/**`, `*/` and the leading `*` of each line; trailing blanks and
/// leading / trailing empty lines removed.
fn javadoc_text(comment: &str) -> String {
    let inner = comment.strip_prefix("/**").unwrap_or(comment);
    let inner = inner.strip_suffix("*/").unwrap_or(inner);
    let lines: Vec<&str> = inner
        .lines()
        .map(|line| {
            let t = line.trim_start();
            let t = match t.strip_prefix('*') {
                Some(rest) => rest.strip_prefix(' ').unwrap_or(rest),
                None => t,
            };
            t.trim_end()
        })
        .collect();
    let first = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let last = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(first, |i| i + 1);
    lines[first..last.max(first)].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::model::Span;

    const SRC: &str = r#"package com.example.util;

import java.util.List;
import java.util.*;
import static java.lang.Math.max;
import static org.junit.Assert.*;

/**
 * Utility holder.
 */
public class Strings extends Base implements Comparable<Strings>, Serializable {
    private static final int LIMIT = 10;
    private String a, b;

    /**
     * Joins parts.
     *
     * @param parts the parts
     */
    @Override
    public static String join(List<String> parts, String... rest) throws IOException {
        StringBuilder sb = new StringBuilder();
        helper(parts);
        return Strings.format(sb.toString(), max(1, 2));
    }

    public static String join(String one) {
        return this.join(List.of(one));
    }

    public Strings(int n) {
        super(n);
    }

    static class Inner {
        int depth;

        void run() {
            Runnable r = new Runnable() {
                public void run() {
                    go();
                }
            };
            r.run();
        }
    }

    interface Visitor {
        void visit(String s);
    }
}
"#;

    fn parsed() -> FileSymbols {
        Java.parse(
            "src/main/java/com/example/util/Strings.java",
            "ignored",
            SRC,
        )
    }

    fn at(needle: &str) -> usize {
        SRC.find(needle).expect(needle)
    }

    fn after(needle: &str) -> usize {
        at(needle) + needle.len()
    }

    fn span(start: usize, end: usize) -> Span {
        let line = |b: usize| SRC[..b].matches('\n').count() + 1;
        Span {
            start_byte: start,
            end_byte: end,
            start_line: line(start),
            end_line: line(end),
        }
    }

    #[test]
    fn methods_with_package_inner_classes_and_overloads() {
        let fs = parsed();
        assert_eq!(fs.module, "com.example.util");
        assert_eq!(fs.parse_errors, 0);
        let got: Vec<(&str, Option<&str>, (usize, usize))> = fs
            .functions
            .iter()
            .map(|f| {
                (
                    f.qualname.as_str(),
                    f.class.as_deref(),
                    (f.span.start_line, f.span.end_line),
                )
            })
            .collect();
        let strings = Some("com.example.util.Strings");
        let inner = Some("com.example.util.Strings.Inner");
        assert_eq!(
            got,
            vec![
                ("com.example.util.Strings.join", strings, (20, 25)),
                ("com.example.util.Strings.join", strings, (27, 29)),
                ("com.example.util.Strings.Strings", strings, (31, 33)),
                ("com.example.util.Strings.Inner.run", inner, (38, 45)),
                // A method of an anonymous class is named as nested in the enclosing method.
                ("com.example.util.Strings.Inner.run.run", None, (40, 42)),
                (
                    "com.example.util.Strings.Visitor.visit",
                    Some("com.example.util.Strings.Visitor"),
                    (49, 49)
                ),
            ]
        );
        assert!(fs.functions.iter().all(|f| f.kind == SymbolKind::Method));
    }

    #[test]
    fn signature_body_javadoc_and_params() {
        let fs = parsed();
        let join = &fs.functions[0];
        assert_eq!(
            join.span,
            span(at("@Override"), after("max(1, 2));\n    }"))
        );
        assert_eq!(
            join.signature,
            span(at("@Override"), after("throws IOException"))
        );
        assert_eq!(
            join.body,
            span(after("throws IOException "), after("max(1, 2));\n    }"))
        );
        assert_eq!(
            join.docstring.as_deref(),
            Some("Joins parts.\n\n@param parts the parts")
        );
        assert_eq!(join.params, ["parts", "rest"]);
        assert_eq!(fs.functions[1].docstring, None);
        assert_eq!(fs.functions[1].params, ["one"]);

        // Bodiless interface method: the header stops before `;`, the body is empty.
        let visit = &fs.functions[5];
        assert_eq!(
            visit.signature,
            span(at("void visit"), after("void visit(String s)"))
        );
        let semi_end = after("void visit(String s);");
        assert_eq!(visit.body, span(semi_end, semi_end));
        assert_eq!(visit.params, ["s"]);
    }

    #[test]
    fn calls_belong_to_the_innermost_method() {
        let fs = parsed();
        let calls = |i: usize| -> Vec<(&str, usize)> {
            fs.functions[i]
                .calls
                .iter()
                .map(|c| (c.callee.as_str(), c.line))
                .collect()
        };
        assert_eq!(
            calls(0),
            [
                ("new StringBuilder", 22),
                ("helper", 23),
                ("Strings.format", 24),
                ("sb.toString", 24),
                ("max", 24)
            ]
        );
        assert_eq!(calls(1), [("this.join", 28), ("List.of", 28)]);
        assert_eq!(calls(2), [("super", 32)]);
        assert_eq!(calls(3), [("new Runnable", 39), ("r.run", 44)]);
        assert_eq!(calls(4), [("go", 41)]);
        assert!(calls(5).is_empty());
    }

    type ClassRow<'a> = (&'a str, &'a [String], &'a [String], &'a [String]);

    #[test]
    fn classes_with_bases_fields_and_methods() {
        let fs = parsed();
        let got: Vec<ClassRow> = fs
            .classes
            .iter()
            .map(|c| {
                (
                    c.qualname.as_str(),
                    &c.bases[..],
                    &c.members[..],
                    &c.methods[..],
                )
            })
            .collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, "com.example.util.Strings");
        assert_eq!(got[0].1, ["Base", "Comparable<Strings>", "Serializable"]);
        assert_eq!(got[0].2, ["LIMIT", "a", "b"]);
        assert_eq!(
            got[0].3,
            [
                "com.example.util.Strings.join",
                "com.example.util.Strings.Strings"
            ]
        );
        assert_eq!(fs.classes[0].span, span(at("public class"), SRC.len() - 1));
        assert_eq!(got[1].0, "com.example.util.Strings.Inner");
        assert_eq!(got[1].2, ["depth"]);
        assert_eq!(got[1].3, ["com.example.util.Strings.Inner.run"]);
        assert_eq!(got[2].0, "com.example.util.Strings.Visitor");
        assert_eq!(got[2].3, ["com.example.util.Strings.Visitor.visit"]);
    }

    #[test]
    fn imports_plain_wildcard_and_static() {
        let fs = parsed();
        let got: Vec<(&str, Option<&str>, bool, bool, usize)> = fs
            .imports
            .iter()
            .map(|i| {
                (
                    i.module.as_str(),
                    i.name.as_deref(),
                    i.is_static,
                    i.is_wildcard,
                    i.line,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("java.util", Some("List"), false, false, 3),
                ("java.util", None, false, true, 4),
                ("java.lang.Math", Some("max"), true, false, 5),
                ("org.junit.Assert", None, true, true, 6),
            ]
        );
        assert!(fs
            .imports
            .iter()
            .all(|i| i.level == 0 && i.alias.is_none() && i.scope.is_none()));
    }

    #[test]
    fn enums_records_and_no_package() {
        let src = "enum Color {\n  RED, GREEN { void paint() {} };\n  void paint() { draw(); }\n}\nrecord Point(int x, int y) {\n  Point { check(x); }\n}\n";
        let fs = Java.parse("Color.java", "", src);
        assert_eq!(fs.module, "");
        let got: Vec<(&str, Option<&str>)> = fs
            .functions
            .iter()
            .map(|f| (f.qualname.as_str(), f.class.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("Color.paint", None),
                ("Color.paint", Some("Color")),
                ("Point.Point", Some("Point"))
            ]
        );
        assert_eq!(fs.functions[2].params, ["x", "y"]);
        assert_eq!(fs.classes[0].members, ["RED", "GREEN"]);
        assert_eq!(fs.classes[1].members, ["x", "y"]);
        assert_eq!(fs.functions[1].calls[0].callee, "draw");
        assert_eq!(fs.functions[2].calls[0].callee, "check");
    }

    #[test]
    fn annotation_elements_are_bodiless_methods() {
        let src = "package p;\n@interface Since {\n    String value() default \"1\";\n}\n";
        let fs = Java.parse("Since.java", "", src);
        let f = &fs.functions[0];
        assert_eq!(
            (f.qualname.as_str(), f.class.as_deref()),
            ("p.Since.value", Some("p.Since"))
        );
        let semi = src.rfind(';').unwrap();
        assert_eq!(
            &src[f.signature.start_byte..f.signature.end_byte],
            "String value() default \"1\""
        );
        assert_eq!((f.body.start_byte, f.body.end_byte), (semi + 1, semi + 1));
        assert_eq!(fs.classes[0].methods, ["p.Since.value"]);
    }

    #[test]
    fn syntax_errors_are_counted_and_the_rest_kept() {
        let src =
            "class A {\n  void ok() { a(); }\n  void broken( { }\n  void after() { b(); }\n}\n";
        let fs = Java.parse("A.java", "", src);
        assert!(fs.parse_errors > 0);
        let ok = fs.functions.iter().find(|f| f.qualname == "A.ok").unwrap();
        assert_eq!(ok.calls[0].callee, "a");
        assert!(fs.functions.iter().any(|f| f.qualname == "A.after"));
    }

    #[test]
    fn javadoc_markers_are_removed() {
        assert_eq!(javadoc_text("/** One line. */"), "One line.");
        assert_eq!(
            javadoc_text("/**\n   * First.\n   *   indented\n   **/"),
            "First.\n  indented"
        );
    }
}
