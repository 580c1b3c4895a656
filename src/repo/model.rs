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
    /// Qualified name of the class whose body defines this method (`None` for functions, nested
    /// functions, and methods of Java anonymous classes).
    pub class: Option<String>,
    /// The whole definition, decorators / annotations included; a Python definition ends with
    /// its last statement (comments after it are not part of it, as in `ast`).
    pub span: Span,
    /// Decorators / annotations through the end of the header (`:` or before `{`; a bodiless
    /// Java method: before `;`).
    pub signature: Span,
    /// The body block; a bodiless Java method has an empty span at its end.
    pub body: Span,
    /// Python docstring (as `ast.get_docstring` returns it) or Java Javadoc, without quotes or
    /// comment markers.
    pub docstring: Option<String>,
    /// Parameter names in order; Python marks `*args` / `**kwargs` and drops the bare `*` and
    /// `/` separators; Java lists names only.
    pub params: Vec<String>,
    pub calls: Vec<CallSite>,
}

/// A call inside a function body: the callee as written (`foo`, `self.bar`, `mod.baz`, `A.b`;
/// line breaks inside it removed). Java constructor calls are `new Foo`, `this(..)` / `super(..)`
/// are `this` / `super`. A call belongs to the innermost enclosing function (calls in a nested
/// function are the nested function's; decorators and default values belong to the enclosing
/// scope).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSite {
    pub callee: String,
    /// The line of the called name (for a chain split over lines, the line of its last part).
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
/// module `p`, name `q`, level 2; `from . import m` → module ``, name `m`, level 1;
/// `from x import *` → module `x`, no name, wildcard. Java `import a.b.C` → module `a.b`,
/// name `C`; `import static a.b.C.m` → module `a.b.C`, name `m`, static; `import a.b.*` →
/// module `a.b`, wildcard. The Java `package` is [`FileSymbols::module`], not an import.
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
