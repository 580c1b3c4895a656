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
    static PARSER: RefCell<Parser> = RefCell::new(new_parser(tree_sitter_java::LANGUAGE.into()));
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
            | "compact_constructor_declaration" => self.method(node, javadoc),
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
        let params = node
            .child_by_field_name("parameters")
            .map(|p| self.params(p))
            .unwrap_or_default();
        let body = node.child_by_field_name("body");
        let (signature, body_span) = match body {
            Some(body) => {
                let header_end = body.prev_sibling().map(skip_back_comments);
                (
                    span_between(node, header_end.unwrap_or(name_node)),
                    span_of(body),
                )
            }
            // Abstract and interface methods: the header is everything before the `;`.
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
