//! One tree-sitter front end per language, behind one trait.
//!
//! Qualified names (shared by both front ends):
//! - Python: `<module>.<Class>.<method>`; a function nested in a function is named after the
//!   enclosing chain without Python's `<locals>` marker (`mod.outer.inner`,
//!   `mod.Class.method.helper`), and so is a class defined inside a function (`mod.f.Local.m`).
//! - Java: `<package>.<Outer>.<Inner>.<method>`; overloads share one qualified name; a
//!   constructor is named after its class (`pkg.Foo.Foo`); a class declared in a method body
//!   continues the chain (`pkg.A.run.Local.m`), and a method of an anonymous class is named as
//!   if nested in the enclosing method (`pkg.A.run.compare`); annotation elements
//!   (`String value() default "";`) are bodiless methods, as javac sees them.

mod java;
pub mod lexical;
pub mod outline;
mod python;

use std::cell::RefCell;
use std::thread::LocalKey;

use tree_sitter::{Node, Parser, Tree, TreeCursor};

use super::model::{FileSymbols, Lang, Span};

pub use java::Java;
pub use python::Python;

/// A language front end: turns one source file into symbols. Parsing never fails: tree-sitter
/// recovers from syntax errors, and the number of error nodes is reported in `parse_errors`.
pub trait Language: Sync {
    fn lang(&self) -> Lang;
    /// File extensions (without the dot) this front end parses.
    fn extensions(&self) -> &'static [&'static str];
    /// `path` is repository-relative; `module` is the dotted module name the walker derived from
    /// the path (Python); Java takes its package from the source instead.
    fn parse(&self, path: &str, module: &str, source: &str) -> FileSymbols;
}

static FRONT_ENDS: [&'static dyn Language; 2] = [&Python, &Java];

/// The front end that parses `path`, chosen by its extension; `None` for other files.
pub fn for_path(path: &str) -> Option<&'static dyn Language> {
    let file_name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let (_, ext) = file_name.rsplit_once('.')?;
    FRONT_ENDS
        .iter()
        .copied()
        .find(|fe| fe.extensions().contains(&ext))
}

/// The syntax tree of `source` in `lang` (this thread's parser for that grammar); `None` only
/// when tree-sitter gives up (it recovers from syntax errors).
pub fn parse_tree(lang: Lang, source: &str) -> Option<Tree> {
    match lang {
        Lang::Python => parse_with(&python::PARSER, source),
        Lang::Java => parse_with(&java::PARSER, source),
    }
}

/// Parses `source` with this thread's parser for one grammar (parsers are reused across files:
/// creating one per file costs more than parsing a small file).
fn parse_with(parser: &'static LocalKey<RefCell<Parser>>, source: &str) -> Option<Tree> {
    parser.with(|p| p.borrow_mut().parse(source, None))
}

/// A parser for `grammar`. The grammars are compiled into the binary, so a version mismatch is a
/// build defect, not an input error.
fn new_parser(grammar: tree_sitter::Language) -> Parser {
    let mut parser = Parser::new();
    parser
        .set_language(&grammar)
        .expect("tree-sitter grammar built against an incompatible tree-sitter version");
    parser
}

/// Symbols of a file tree-sitter returned no tree for (it only does so when cancelled).
fn unparsed(path: &str, module: &str, lang: Lang) -> FileSymbols {
    FileSymbols {
        path: path.to_string(),
        lang: Some(lang),
        module: module.to_string(),
        functions: Vec::new(),
        classes: Vec::new(),
        imports: Vec::new(),
        parse_errors: 1,
    }
}

/// Receives every node of a tree in document order (`enter`) and again after its subtree
/// (`leave`).
trait Visitor<'t> {
    fn enter(&mut self, cursor: &TreeCursor<'t>);
    fn leave(&mut self, node: Node<'t>);
}

/// Walks the whole tree with one cursor: no recursion, so deeply nested expressions cannot
/// overflow the stack, and one pass serves every extraction.
fn walk<'t>(root: Node<'t>, visitor: &mut impl Visitor<'t>) {
    let mut cursor = root.walk();
    loop {
        visitor.enter(&cursor);
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            visitor.leave(cursor.node());
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}

/// A named scope (function, class) that is active while the walk is inside its body, so that
/// what precedes the body (decorators, defaults, annotations) belongs to the enclosing scope.
struct Scope<K> {
    def_id: usize,
    body_id: usize,
    qualname: String,
    kind: K,
}

struct Scopes<K> {
    active: Vec<Scope<K>>,
    /// Scopes whose definition was entered but whose body not yet.
    pending: Vec<Scope<K>>,
}

impl<K> Scopes<K> {
    fn new() -> Self {
        Scopes {
            active: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Registers the scope of definition `def`, to open when the walk reaches `body`.
    fn open_at(&mut self, def: Node, body: Node, qualname: String, kind: K) {
        self.pending.push(Scope {
            def_id: def.id(),
            body_id: body.id(),
            qualname,
            kind,
        });
    }

    fn enter(&mut self, node: Node) {
        if self.pending.last().is_some_and(|p| p.body_id == node.id()) {
            self.active.extend(self.pending.pop());
        }
    }

    fn leave(&mut self, node: Node) {
        let id = node.id();
        if self.active.last().is_some_and(|s| s.body_id == id) {
            self.active.pop();
        }
        if self.pending.last().is_some_and(|s| s.def_id == id) {
            self.pending.pop();
        }
    }

    fn top(&self) -> Option<&Scope<K>> {
        self.active.last()
    }

    /// The innermost active scope whose kind satisfies `pred`.
    fn innermost(&self, pred: impl Fn(&K) -> bool) -> Option<&Scope<K>> {
        self.active.iter().rev().find(|s| pred(&s.kind))
    }
}

/// Collapses line breaks (and the indentation around them) inside a callee written over several
/// lines: `builder\n    .add` → `builder.add`.
fn one_line(s: &str) -> String {
    if !s.contains('\n') {
        return s.to_string();
    }
    s.lines().map(str::trim).collect()
}

/// Source text of a node; empty if the range is not on character boundaries (cannot happen for
/// a tree parsed from the same `&str`, but never worth a panic).
fn text<'s>(source: &'s str, node: Node) -> &'s str {
    source.get(node.byte_range()).unwrap_or("")
}

/// 1-based line on which a node ends. A node whose range stops right after a newline ends on the
/// line before.
fn end_line(node: Node) -> usize {
    let end = node.end_position();
    if end.column == 0 && end.row > node.start_position().row {
        end.row
    } else {
        end.row + 1
    }
}

/// Span from the start of `first` to the end of `last`.
fn span_between(first: Node, last: Node) -> Span {
    Span {
        start_byte: first.start_byte(),
        end_byte: last.end_byte().max(first.start_byte()),
        start_line: first.start_position().row + 1,
        end_line: end_line(last).max(first.start_position().row + 1),
    }
}

fn span_of(node: Node) -> Span {
    span_between(node, node)
}

/// Zero-width span at the end of a node (the body of a Java method declared without one).
fn empty_span_at_end(node: Node) -> Span {
    let line = end_line(node);
    Span {
        start_byte: node.end_byte(),
        end_byte: node.end_byte(),
        start_line: line,
        end_line: line,
    }
}

/// `prefix.name`, or `name` when the prefix is empty (a file outside any module or package).
fn join_qualname(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        let mut q = String::with_capacity(prefix.len() + 1 + name.len());
        q.push_str(prefix);
        q.push('.');
        q.push_str(name);
        q
    }
}

/// Text with all whitespace removed (`a . b` → `a.b`), for dotted names split across lines.
fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Appends `name` unless it is already present (members and method lists keep first-seen order).
fn push_unique(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|m| m == name) {
        list.push(name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_path_picks_by_extension() {
        assert_eq!(for_path("a/b/c.py").map(|l| l.lang()), Some(Lang::Python));
        assert_eq!(
            for_path("src/main/java/A.java").map(|l| l.lang()),
            Some(Lang::Java)
        );
        assert!(for_path("README.md").is_none());
        assert!(for_path("Makefile").is_none());
        assert!(for_path("dir.py/notes").is_none());
        assert!(for_path("x.pyc").is_none());
    }
}
