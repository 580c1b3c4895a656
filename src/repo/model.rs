//! Plain data extracted from source files: what every retriever and pipeline reads.
//!
//! Lines are 1-based and inclusive; bytes are 0-based, end-exclusive. Paths are relative to the
//! repository root with `/` separators.

use serde::{Deserialize, Serialize};

/// A region of a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub start_byte: usize,
    pub end_byte: usize,
    pub start_line: usize,
    pub end_line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    Python,
    Java,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SymbolKind {
    Function,
    Method,
    Class,
}

/// A function or method definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    /// Python `pkg.module.Class.method`, Java `pkg.Class.method` (overloads share it).
    pub qualname: String,
    pub name: String,
    pub kind: SymbolKind,
    pub path: String,
    /// Qualified name of the enclosing class, if any.
    pub class: Option<String>,
    /// The whole definition, decorators / annotations included.
    pub span: Span,
    /// Decorators / annotations through the end of the header (`:` or before `{`).
    pub signature: Span,
    pub body: Span,
    /// Python docstring or Java Javadoc, without quotes or comment markers.
    pub docstring: Option<String>,
    pub params: Vec<String>,
    pub calls: Vec<CallSite>,
}

/// A call inside a function body: the callee as written (`foo`, `self.bar`, `mod.baz`, `A.b`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSite {
    pub callee: String,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Class {
    pub qualname: String,
    pub name: String,
    pub path: String,
    pub span: Span,
    pub bases: Vec<String>,
    /// Fields: Python attributes assigned on `self` in `__init__` or class-level; Java fields.
    pub members: Vec<String>,
    /// Qualified names of the methods defined directly in the class.
    pub methods: Vec<String>,
}

/// One imported name. `import a.b as c` → module `a.b`, alias `c`; `from ..p import q` →
/// module `p`, name `q`, level 2; Java `import static a.b.C.m` → module `a.b.C`, name `m`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Import {
    pub module: String,
    pub name: Option<String>,
    pub alias: Option<String>,
    /// Leading dots of a Python relative import; 0 for absolute imports and Java.
    pub level: usize,
    pub is_static: bool,
    pub is_wildcard: bool,
    pub line: usize,
    /// Qualified name of the function whose body holds this (lazy) import, if any.
    pub scope: Option<String>,
}

/// Everything extracted from one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSymbols {
    pub path: String,
    pub lang: Option<Lang>,
    /// Python dotted module (`pkg.sub.mod`, `pkg.sub` for `__init__.py`); Java package.
    pub module: String,
    pub functions: Vec<Function>,
    pub classes: Vec<Class>,
    pub imports: Vec<Import>,
    /// Number of tree-sitter error or missing nodes; what parsed around them is kept.
    pub parse_errors: usize,
}
