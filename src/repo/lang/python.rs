//! Python front end: functions, classes, imports and call sites from one tree-sitter walk.
//!
//! One walk over the tree (see [`super::walk`]). A definition's scope opens at its body block, so
//! decorators and default values belong to the enclosing scope, as in Python. Calls and lazy
//! imports belong to the innermost enclosing function; calls in a class body nested in a function
//! belong to that function.

use std::cell::RefCell;

use tree_sitter::{Node, Parser, TreeCursor};

use super::{
    empty_span_at_end, join_qualname, new_parser, one_line, parse_with, push_unique, span_between,
    squeeze, text, unparsed, walk, Language, Scope, Scopes, Visitor,
};
use crate::repo::model::{CallSite, Class, FileSymbols, Function, Import, Lang, SymbolKind};

/// The Python front end (`.py`).
pub struct Python;

thread_local! {
    pub(super) static PARSER: RefCell<Parser> = RefCell::new(new_parser(tree_sitter_python::LANGUAGE.into()));
}

impl Language for Python {
    fn lang(&self) -> Lang {
        Lang::Python
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["py"]
    }

    fn parse(&self, path: &str, module: &str, source: &str) -> FileSymbols {
        let Some(tree) = parse_with(&PARSER, source) else {
            return unparsed(path, module, Lang::Python);
        };
        let mut ex = Extractor {
            src: source,
            out: FileSymbols {
                path: path.to_string(),
                lang: Some(Lang::Python),
                module: module.to_string(),
                functions: Vec::new(),
                classes: Vec::new(),
                imports: Vec::new(),
                parse_errors: 0,
            },
            scopes: Scopes::new(),
            decorated: Vec::new(),
        };
        walk(tree.root_node(), &mut ex);
        ex.out
    }
}

enum ScopeKind {
    /// `init_of`: for a class's `__init__`, the class index and the name of its `self` parameter.
    Function {
        index: usize,
        init_of: Option<(usize, String)>,
    },
    Class {
        index: usize,
    },
}

struct Extractor<'s, 't> {
    src: &'s str,
    out: FileSymbols,
    scopes: Scopes<ScopeKind>,
    /// Enclosing `decorated_definition` nodes: the definition's span starts at the first decorator.
    decorated: Vec<Node<'t>>,
}

impl<'t> Visitor<'t> for Extractor<'_, 't> {
    fn enter(&mut self, cursor: &TreeCursor<'t>) {
        let node = cursor.node();
        if node.is_error() || node.is_missing() {
            self.out.parse_errors += 1;
        }
        self.scopes.enter(node);
        match node.kind() {
            "decorated_definition" => self.decorated.push(node),
            "function_definition" | "class_definition" => {
                let outer = if cursor.field_name() == Some("definition") {
                    self.decorated.last().copied()
                } else {
                    None
                };
                if node.kind() == "function_definition" {
                    self.function(node, outer.unwrap_or(node));
                } else {
                    self.class(node, outer.unwrap_or(node));
                }
            }
            "call" => self.call(node),
            "type_alias_statement" => self.type_alias(node),
            "import_statement" | "import_from_statement" | "future_import_statement" => {
                self.import(node)
            }
            "assignment" => self.assignment(node),
            _ => {}
        }
    }

    fn leave(&mut self, node: Node<'t>) {
        self.scopes.leave(node);
        if self.decorated.last().is_some_and(|d| d.id() == node.id()) {
            self.decorated.pop();
        }
    }
}

impl<'t> Extractor<'_, 't> {
    /// Qualified-name prefix for a definition here, and the enclosing class index if the
    /// definition sits directly in a class body.
    fn context(&self) -> (&str, Option<usize>) {
        match self.scopes.top() {
            None => (self.out.module.as_str(), None),
            Some(s) => match s.kind {
                ScopeKind::Class { index } => (s.qualname.as_str(), Some(index)),
                ScopeKind::Function { .. } => (s.qualname.as_str(), None),
            },
        }
    }

    /// The innermost enclosing function (calls and lazy imports belong to it).
    fn current_function(&self) -> Option<&Scope<ScopeKind>> {
        self.scopes
            .innermost(|k| matches!(k, ScopeKind::Function { .. }))
    }

    fn function(&mut self, node: Node<'t>, outer: Node<'t>) {
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
        let (span, signature, body_span, docstring) = match body {
            Some(body) => {
                let header_end = body
                    .prev_sibling()
                    .map(skip_back_comments)
                    .unwrap_or(name_node);
                let last = last_code_token(body);
                (
                    span_between(outer, last),
                    span_between(outer, header_end),
                    span_between(body, last),
                    docstring(self.src, body),
                )
            }
            None => (
                span_between(outer, node),
                span_between(outer, node),
                empty_span_at_end(node),
                None,
            ),
        };

        let init_of = match class_index {
            Some(ci) if name == "__init__" => params
                .first()
                .filter(|p| !p.starts_with('*'))
                .map(|p| (ci, p.clone())),
            _ => None,
        };
        if let Some(ci) = class_index {
            push_unique(&mut self.out.classes[ci].methods, &qualname);
        }
        let index = self.out.functions.len();
        self.out.functions.push(Function {
            qualname: qualname.clone(),
            name: name.to_string(),
            kind: if class_index.is_some() {
                SymbolKind::Method
            } else {
                SymbolKind::Function
            },
            path: self.out.path.clone(),
            class,
            span,
            signature,
            body: body_span,
            docstring,
            params,
            calls: Vec::new(),
        });
        if let Some(body) = body {
            self.scopes
                .open_at(node, body, qualname, ScopeKind::Function { index, init_of });
        }
    }

    /// Parameter names as written in the header: `a`, `*args`, `**kwargs`; the bare `*` and `/`
    /// markers are not parameters.
    fn params(&self, params: Node<'t>) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = params.walk();
        for p in params.named_children(&mut cursor) {
            let name_node = match p.kind() {
                "identifier"
                | "list_splat_pattern"
                | "dictionary_splat_pattern"
                | "tuple_pattern" => Some(p),
                "default_parameter" | "typed_default_parameter" => p.child_by_field_name("name"),
                "typed_parameter" => p.named_child(0),
                _ => None,
            };
            if let Some(n) = name_node {
                out.push(squeeze(text(self.src, n)));
            }
        }
        out
    }

    fn class(&mut self, node: Node<'t>, outer: Node<'t>) {
        let Some(name_node) = node.child_by_field_name("name") else {
            return;
        };
        let name = text(self.src, name_node);
        let (prefix, _) = self.context();
        let qualname = join_qualname(prefix, name);
        let mut bases = Vec::new();
        if let Some(args) = node.child_by_field_name("superclasses") {
            let mut cursor = args.walk();
            for arg in args.named_children(&mut cursor) {
                if !matches!(
                    arg.kind(),
                    "keyword_argument" | "dictionary_splat" | "comment"
                ) {
                    bases.push(squeeze(text(self.src, arg)));
                }
            }
        }
        let body = node.child_by_field_name("body");
        let span = span_between(outer, body.map(last_code_token).unwrap_or(node));
        let index = self.out.classes.len();
        self.out.classes.push(Class {
            qualname: qualname.clone(),
            name: name.to_string(),
            path: self.out.path.clone(),
            span,
            bases,
            members: Vec::new(),
            methods: Vec::new(),
        });
        if let Some(body) = body {
            self.scopes
                .open_at(node, body, qualname, ScopeKind::Class { index });
        }
    }

    fn call(&mut self, node: Node<'t>) {
        let Some(mut callee) = node.child_by_field_name("function") else {
            return;
        };
        // `(a or b)(x)` calls `a or b`, as Python's `ast` reports it.
        while callee.kind() == "parenthesized_expression" {
            match first_code_child(callee) {
                Some(inner) => callee = inner,
                None => break,
            }
        }
        let line = callee.end_position().row + 1;
        self.record_call(one_line(text(self.src, callee)), line);
    }

    /// tree-sitter-python reads `type(obj).attr = value` as a `type X = ...` alias statement
    /// whose name is `(obj).attr`; a real alias names a plain identifier (optionally generic).
    /// The misread statement is a call of `type`, recorded as such; the rest of the statement
    /// is walked as usual.
    fn type_alias(&mut self, node: Node<'t>) {
        let Some(left) = node.child_by_field_name("left") else {
            return;
        };
        let misread = first_code_child(left)
            .is_some_and(|n| !matches!(n.kind(), "identifier" | "generic_type"));
        if misread {
            self.record_call("type".to_string(), node.start_position().row + 1);
        }
    }

    fn record_call(&mut self, callee: String, line: usize) {
        if let Some(ScopeKind::Function { index, .. }) = self.current_function().map(|s| &s.kind) {
            let index = *index;
            self.out.functions[index]
                .calls
                .push(CallSite { callee, line });
        }
    }

    fn import(&mut self, node: Node<'t>) {
        let scope = self.current_function().map(|s| s.qualname.clone());
        let line = node.start_position().row + 1;
        let mut imp = Import {
            module: String::new(),
            name: None,
            alias: None,
            level: 0,
            is_static: false,
            is_wildcard: false,
            line,
            scope,
        };
        let mut cursor = node.walk();
        if node.kind() == "import_statement" {
            for n in node.children_by_field_name("name", &mut cursor) {
                let (module, alias) = self.dotted_and_alias(n);
                self.out.imports.push(Import {
                    module,
                    alias,
                    ..imp.clone()
                });
            }
            return;
        }
        if node.kind() == "future_import_statement" {
            imp.module = "__future__".to_string();
        } else if let Some(m) = node.child_by_field_name("module_name") {
            if m.kind() == "relative_import" {
                let mut c = m.walk();
                for part in m.named_children(&mut c) {
                    match part.kind() {
                        "import_prefix" => imp.level = text(self.src, part).matches('.').count(),
                        "dotted_name" => imp.module = squeeze(text(self.src, part)),
                        _ => {}
                    }
                }
            } else {
                imp.module = squeeze(text(self.src, m));
            }
        }
        let mut any = false;
        for n in node.children_by_field_name("name", &mut cursor) {
            let (name, alias) = self.dotted_and_alias(n);
            self.out.imports.push(Import {
                name: Some(name),
                alias,
                ..imp.clone()
            });
            any = true;
        }
        if !any {
            let mut c = node.walk();
            if node
                .named_children(&mut c)
                .any(|n| n.kind() == "wildcard_import")
            {
                imp.is_wildcard = true;
                self.out.imports.push(imp);
            }
        }
    }

    /// `a.b` → (`a.b`, None); `a.b as c` → (`a.b`, Some(`c`)).
    fn dotted_and_alias(&self, n: Node<'t>) -> (String, Option<String>) {
        if n.kind() == "aliased_import" {
            let name = n
                .child_by_field_name("name")
                .map(|x| squeeze(text(self.src, x)))
                .unwrap_or_default();
            let alias = n
                .child_by_field_name("alias")
                .map(|x| text(self.src, x).to_string());
            (name, alias)
        } else {
            (squeeze(text(self.src, n)), None)
        }
    }

    /// Class members: names assigned at class level, and `self.x = ...` in `__init__`.
    fn assignment(&mut self, node: Node<'t>) {
        let Some(scope) = self.scopes.top() else {
            return;
        };
        let Some(left) = node.child_by_field_name("left") else {
            return;
        };
        let mut found: Vec<&str> = Vec::new();
        let (class_index, self_name) = match &scope.kind {
            ScopeKind::Class { index } => (*index, None),
            ScopeKind::Function {
                init_of: Some((ci, self_name)),
                ..
            } => (*ci, Some(self_name.as_str())),
            ScopeKind::Function { .. } => return,
        };
        let mut targets = vec![left];
        if matches!(
            left.kind(),
            "pattern_list" | "tuple_pattern" | "list_pattern"
        ) {
            targets.clear();
            let mut c = left.walk();
            targets.extend(left.named_children(&mut c));
        }
        for t in targets {
            match (self_name, t.kind()) {
                (None, "identifier") => found.push(text(self.src, t)),
                (Some(me), "attribute") => {
                    let object = t.child_by_field_name("object");
                    let attr = t.child_by_field_name("attribute");
                    if let (Some(o), Some(a)) = (object, attr) {
                        if o.kind() == "identifier" && text(self.src, o) == me {
                            found.push(text(self.src, a));
                        }
                    }
                }
                _ => {}
            }
        }
        let members = &mut self.out.classes[class_index].members;
        for name in found {
            push_unique(members, name);
        }
    }
}

/// A comment right before a node belongs to neither the header nor the body.
fn skip_back_comments(mut node: Node) -> Node {
    while node.kind() == "comment" {
        match node.prev_sibling() {
            Some(prev) => node = prev,
            None => break,
        }
    }
    node
}

/// The first named child that is not a comment.
fn first_code_child(node: Node) -> Option<Node> {
    let mut cursor = node.walk();
    let found = node
        .named_children(&mut cursor)
        .find(|c| c.kind() != "comment");
    found
}

/// The last token of a definition's body that is not a comment: tree-sitter attaches comments
/// that follow a body to the innermost open block, but the definition (as Python's `ast` sees
/// it) ends with its last statement.
fn last_code_token(mut node: Node) -> Node {
    loop {
        let mut i = node.child_count();
        let mut next = None;
        while i > 0 {
            i -= 1;
            match node.child(i) {
                Some(c) if c.kind() != "comment" => {
                    next = Some(c);
                    break;
                }
                _ => {}
            }
        }
        match next {
            Some(c) => node = c,
            None => return node,
        }
    }
}

/// The docstring of a body block: its first statement when that is a plain string literal,
/// unquoted, unescaped and cleaned like `inspect.cleandoc` (what `ast.get_docstring` returns).
fn docstring(src: &str, body: Node) -> Option<String> {
    let mut cursor = body.walk();
    let first = body
        .named_children(&mut cursor)
        .find(|n| n.kind() != "comment")?;
    if first.kind() != "expression_statement" || first.named_child_count() != 1 {
        return None;
    }
    let expr = first.named_child(0)?;
    let value = match expr.kind() {
        "string" => string_value(text(src, expr))?,
        "concatenated_string" => {
            let mut c = expr.walk();
            let mut value = String::new();
            for part in expr.named_children(&mut c) {
                if part.kind() == "string" {
                    value.push_str(&string_value(text(src, part))?);
                }
            }
            value
        }
        _ => return None,
    };
    Some(cleandoc(&value))
}

/// The value of a `str` literal as written (`r"..."`, `'''...'''`); `None` for bytes and
/// f-strings, which are not docstrings.
fn string_value(literal: &str) -> Option<String> {
    let quote_at = literal.find(['"', '\''])?;
    let prefix = literal[..quote_at].to_ascii_lowercase();
    if prefix.contains(['b', 'f', 't']) {
        return None;
    }
    let rest = &literal[quote_at..];
    let q = if rest.starts_with("\"\"\"") || rest.starts_with("'''") {
        3
    } else {
        1
    };
    let inner = rest.get(q..rest.len().checked_sub(q)?)?;
    let inner = inner.replace("\r\n", "\n");
    if prefix.contains('r') {
        Some(inner)
    } else {
        Some(unescape(&inner))
    }
}

/// Python's escape sequences in a non-raw string. `\N{...}` is kept as written (resolving names
/// needs the Unicode name table); an invalid escape is kept as written, as Python does.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        match e {
            '\n' => {}
            '\\' | '\'' | '"' => out.push(e),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.extend(char::from_u32(v));
            }
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let digits: String = chars.clone().take(n).collect();
                match u32::from_str_radix(&digits, 16)
                    .ok()
                    .and_then(char::from_u32)
                {
                    Some(ch) if digits.len() == n => {
                        out.push(ch);
                        for _ in 0..n {
                            chars.next();
                        }
                    }
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            _ => {
                out.push('\\');
                out.push(e);
            }
        }
    }
    out
}

/// `inspect.cleandoc`: tabs expanded, the first line's leading blanks and the common indentation
/// of the other lines removed, leading and trailing blank lines dropped.
fn cleandoc(doc: &str) -> String {
    let expanded = expand_tabs(doc);
    let mut lines: Vec<&str> = expanded.split('\n').collect();
    let margin = lines
        .iter()
        .skip(1)
        .filter_map(|l| {
            let content = l.trim_start();
            (!content.is_empty()).then(|| l.chars().count() - content.chars().count())
        })
        .min();
    if let Some(first) = lines.first_mut() {
        *first = first.trim_start();
    }
    if let Some(margin) = margin {
        for line in lines.iter_mut().skip(1) {
            *line = line
                .char_indices()
                .nth(margin)
                .map_or("", |(i, _)| &line[i..]);
        }
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let first_content = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    lines[first_content..].join("\n")
}

/// `str.expandtabs(8)`.
fn expand_tabs(s: &str) -> String {
    if !s.contains('\t') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut col = 0;
    for c in s.chars() {
        match c {
            '\t' => {
                let n = 8 - col % 8;
                out.extend(std::iter::repeat_n(' ', n));
                col += n;
            }
            '\n' | '\r' => {
                out.push(c);
                col = 0;
            }
            _ => {
                out.push(c);
                col += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::model::{Span, SymbolKind};

    const SRC: &str = r#""""Module doc."""
import os
import a.b as c, d
from x.y import z as w, v
from . import m
from ..p import q
from .r import *


def top(a, b=1, *args, c: int = 2, **kw):
    """Add things.

    More detail:
        indented.
    """
    x = helper(a)
    return os.path.join(x, b)


@decorator
@other.deco(arg())
def decorated(self_, /, k, *, flag):
    def inner(y):
        import json
        return json.dumps(y)
    return inner(k)


class Base(object, metaclass=Meta):
    limit = 10
    a, b = 1, 2

    def __init__(self, n):
        self.n = n
        self.items, self.count = [], 0
        other.z = 1

    @property
    def size(self):
        # comment
        return self.helper() + Base.limit

    async def run(self) -> None:
        r'''Raw \n doc.'''
        await self.size()


class Child(Base, mixins.Mixin):
    pass
    # trailing comment
"#;

    fn parsed() -> FileSymbols {
        Python.parse("pkg/mod.py", "pkg.mod", SRC)
    }

    /// Byte offset of the first occurrence of `needle` (the tests locate ranges by text).
    fn at(needle: &str) -> usize {
        SRC.find(needle).expect(needle)
    }

    fn line_of(byte: usize) -> usize {
        SRC[..byte].matches('\n').count() + 1
    }

    fn span(start: usize, end: usize) -> Span {
        Span {
            start_byte: start,
            end_byte: end,
            start_line: line_of(start),
            end_line: line_of(end),
        }
    }

    fn function<'a>(fs: &'a FileSymbols, qualname: &str) -> &'a Function {
        fs.functions
            .iter()
            .find(|f| f.qualname == qualname)
            .expect(qualname)
    }

    #[test]
    fn finds_every_function_with_nested_qualnames() {
        let fs = parsed();
        let names: Vec<(&str, SymbolKind, Option<&str>)> = fs
            .functions
            .iter()
            .map(|f| (f.qualname.as_str(), f.kind, f.class.as_deref()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("pkg.mod.top", SymbolKind::Function, None),
                ("pkg.mod.decorated", SymbolKind::Function, None),
                ("pkg.mod.decorated.inner", SymbolKind::Function, None),
                (
                    "pkg.mod.Base.__init__",
                    SymbolKind::Method,
                    Some("pkg.mod.Base")
                ),
                (
                    "pkg.mod.Base.size",
                    SymbolKind::Method,
                    Some("pkg.mod.Base")
                ),
                ("pkg.mod.Base.run", SymbolKind::Method, Some("pkg.mod.Base")),
            ]
        );
        assert_eq!(fs.parse_errors, 0);
        assert_eq!(fs.module, "pkg.mod");
        assert!(fs.functions.iter().all(|f| f.path == "pkg/mod.py"));
    }

    #[test]
    fn spans_cover_decorators_header_and_body() {
        let fs = parsed();
        let top = function(&fs, "pkg.mod.top");
        let top_end = at("return os.path.join(x, b)") + "return os.path.join(x, b)".len();
        assert_eq!(top.span, span(at("def top"), top_end));
        assert_eq!(top.span.start_line, 10);
        assert_eq!(top.span.end_line, 17);
        assert_eq!(
            top.signature,
            span(at("def top"), at("**kw):") + "**kw):".len())
        );
        assert_eq!(top.body, span(at("\"\"\"Add things"), top_end));

        let dec = function(&fs, "pkg.mod.decorated");
        let dec_end = at("return inner(k)") + "return inner(k)".len();
        assert_eq!(dec.span, span(at("@decorator"), dec_end));
        assert_eq!((dec.span.start_line, dec.span.end_line), (20, 26));
        assert_eq!(
            dec.signature,
            span(at("@decorator"), at("flag):") + "flag):".len())
        );
        assert_eq!(dec.body, span(at("def inner"), dec_end));

        // A body whose last lines are comments ends at its last statement, as `ast` says.
        let child = fs.classes.iter().find(|c| c.name == "Child").unwrap();
        let pass = SRC.rfind("pass").unwrap();
        assert_eq!(child.span, span(at("class Child"), pass + 4));
    }

    #[test]
    fn trailing_comments_in_nested_blocks_are_not_part_of_the_definition() {
        let src = "def f():\n    for x in y:\n        g(x)\n        # note\n\n    # more\n";
        let fs = Python.parse("f.py", "f", src);
        let end = src.find("g(x)").unwrap() + 4;
        assert_eq!(
            (fs.functions[0].span.end_byte, fs.functions[0].span.end_line),
            (end, 3)
        );
        assert_eq!(fs.functions[0].body.end_byte, end);
    }

    #[test]
    fn docstrings_are_cleaned_like_inspect() {
        let fs = parsed();
        assert_eq!(
            function(&fs, "pkg.mod.top").docstring.as_deref(),
            Some("Add things.\n\nMore detail:\n    indented.")
        );
        assert_eq!(
            function(&fs, "pkg.mod.Base.run").docstring.as_deref(),
            Some("Raw \\n doc.")
        );
        assert_eq!(function(&fs, "pkg.mod.Base.size").docstring, None);
    }

    #[test]
    fn params_keep_star_markers_and_drop_separators() {
        let fs = parsed();
        assert_eq!(
            function(&fs, "pkg.mod.top").params,
            ["a", "b", "*args", "c", "**kw"]
        );
        assert_eq!(
            function(&fs, "pkg.mod.decorated").params,
            ["self_", "k", "flag"]
        );
    }

    #[test]
    fn calls_belong_to_the_innermost_function() {
        let fs = parsed();
        let calls = |q: &str| -> Vec<(String, usize)> {
            function(&fs, q)
                .calls
                .iter()
                .map(|c| (c.callee.clone(), c.line))
                .collect()
        };
        assert_eq!(
            calls("pkg.mod.top"),
            [("helper".to_string(), 16), ("os.path.join".to_string(), 17)]
        );
        // The decorator's `arg()` runs at module level; `inner`'s call is its own.
        assert_eq!(calls("pkg.mod.decorated"), [("inner".to_string(), 26)]);
        assert_eq!(
            calls("pkg.mod.decorated.inner"),
            [("json.dumps".to_string(), 25)]
        );
        assert_eq!(
            calls("pkg.mod.Base.size"),
            [("self.helper".to_string(), 41)]
        );
        assert_eq!(calls("pkg.mod.Base.run"), [("self.size".to_string(), 45)]);
    }

    #[test]
    fn classes_have_bases_members_and_methods() {
        let fs = parsed();
        let base = &fs.classes[0];
        assert_eq!(base.qualname, "pkg.mod.Base");
        assert_eq!(base.bases, ["object"]);
        assert_eq!(base.members, ["limit", "a", "b", "n", "items", "count"]);
        assert_eq!(
            base.methods,
            [
                "pkg.mod.Base.__init__",
                "pkg.mod.Base.size",
                "pkg.mod.Base.run"
            ]
        );
        assert_eq!((base.span.start_line, base.span.end_line), (29, 45));
        let child = &fs.classes[1];
        assert_eq!(child.qualname, "pkg.mod.Child");
        assert_eq!(child.bases, ["Base", "mixins.Mixin"]);
        assert!(child.members.is_empty() && child.methods.is_empty());
    }

    /// module, name, alias, level, wildcard, line, scope
    type ImportRow<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        usize,
        bool,
        usize,
        Option<&'a str>,
    );

    #[test]
    fn imports_absolute_aliased_relative_wildcard_and_lazy() {
        let fs = parsed();
        let got: Vec<ImportRow> = fs
            .imports
            .iter()
            .map(|i| {
                (
                    i.module.as_str(),
                    i.name.as_deref(),
                    i.alias.as_deref(),
                    i.level,
                    i.is_wildcard,
                    i.line,
                    i.scope.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("os", None, None, 0, false, 2, None),
                ("a.b", None, Some("c"), 0, false, 3, None),
                ("d", None, None, 0, false, 3, None),
                ("x.y", Some("z"), Some("w"), 0, false, 4, None),
                ("x.y", Some("v"), None, 0, false, 4, None),
                ("", Some("m"), None, 1, false, 5, None),
                ("p", Some("q"), None, 2, false, 6, None),
                ("r", None, None, 1, true, 7, None),
                (
                    "json",
                    None,
                    None,
                    0,
                    false,
                    24,
                    Some("pkg.mod.decorated.inner")
                ),
            ]
        );
        assert!(fs.imports.iter().all(|i| !i.is_static));
    }

    #[test]
    fn syntax_errors_are_counted_and_the_rest_kept() {
        let src = "def ok():\n    return 1\n\ndef broken(:\n    pass\n\ndef after():\n    ok()\n";
        let fs = Python.parse("b.py", "b", src);
        assert!(fs.parse_errors > 0);
        let names: Vec<&str> = fs.functions.iter().map(|f| f.qualname.as_str()).collect();
        assert!(
            names.contains(&"b.ok") && names.contains(&"b.after"),
            "{names:?}"
        );
        let after = fs.functions.iter().find(|f| f.name == "after").unwrap();
        assert_eq!(after.calls[0].callee, "ok");
    }

    #[test]
    fn grammar_quirks_report_calls_as_python_does() {
        // tree-sitter-python misreads `type(m).x = ...` as a type alias statement.
        let src = "def f(m, a, b):\n    type(m).x = 1\n    (a or b)(m)\n    type Alias = int\n";
        let fs = Python.parse("q.py", "q", src);
        let calls: Vec<(&str, usize)> = fs.functions[0]
            .calls
            .iter()
            .map(|c| (c.callee.as_str(), c.line))
            .collect();
        assert_eq!(calls, [("type", 2), ("a or b", 3)]);
    }

    #[test]
    fn deeply_nested_code_does_not_overflow_the_stack() {
        let depth = 50_000;
        let src = format!(
            "def f():\n    return {}1{}\n",
            "g(".repeat(depth),
            ")".repeat(depth)
        );
        let fs = Python.parse("deep.py", "deep", &src);
        assert_eq!(fs.functions.len(), 1);
        assert_eq!(fs.functions[0].calls.len(), depth);
        assert_eq!(fs.parse_errors, 0);
    }

    #[test]
    fn empty_and_module_less_files() {
        let fs = Python.parse("empty.py", "empty", "");
        assert!(fs.functions.is_empty() && fs.classes.is_empty() && fs.imports.is_empty());
        assert_eq!(fs.parse_errors, 0);
        let fs = Python.parse("f.py", "", "class A:\n    def m(self): pass\n");
        assert_eq!(fs.functions[0].qualname, "A.m");
        assert_eq!(
            fs.functions[0].body,
            span_in("class A:\n    def m(self): pass\n", "pass")
        );
    }

    fn span_in(src: &str, needle: &str) -> Span {
        let s = src.find(needle).unwrap();
        let line = src[..s].matches('\n').count() + 1;
        Span {
            start_byte: s,
            end_byte: s + needle.len(),
            start_line: line,
            end_line: line,
        }
    }

    #[test]
    fn string_literals_decode_like_python() {
        assert_eq!(
            string_value(
                r#""a\tb\\c\x41\u00e9\101\
d""#
            )
            .as_deref(),
            Some("a\tb\\cAéAd")
        );
        assert_eq!(string_value(r#"r"a\tb""#).as_deref(), Some(r"a\tb"));
        assert_eq!(string_value(r#"b"bytes""#), None);
        assert_eq!(string_value(r#"f"{x}""#), None);
        assert_eq!(string_value(r#"'''q'''"#).as_deref(), Some("q"));
        assert_eq!(
            string_value(r#""\N{DASH}\q""#).as_deref(),
            Some(r"\N{DASH}\q")
        );
    }

    #[test]
    fn cleandoc_matches_inspect() {
        assert_eq!(
            cleandoc("  First.\n\n      a\n    b\n  "),
            "First.\n\n  a\nb"
        );
        assert_eq!(cleandoc("\n\tTabbed.\n"), "Tabbed.");
        assert_eq!(cleandoc(""), "");
    }
}
