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

impl Function {
    /// The docstring as written in `text` (the file it was parsed from): a Python body's
    /// leading string, prefix and quotes included, or the Javadoc comment before a Java
    /// definition.
    pub fn docstring_literal<'t>(&self, text: &'t str) -> Option<&'t str> {
        self.docstring.as_ref()?;
        let body = text.get(self.body.start_byte..self.body.end_byte)?;
        if body.starts_with('{') || body.is_empty() {
            let before = text.get(..self.span.start_byte)?.trim_end();
            let open = before.strip_suffix("*/")?.rfind("/**")?;
            return Some(&before[open..]);
        }
        super::pystr::leading_docstring(body)
    }
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

impl FileSymbols {
    /// Whether the file is a Python package's `__init__.py` (its module is the package).
    pub fn is_package(&self) -> bool {
        self.path.rsplit('/').next() == Some("__init__.py")
    }

    /// The absolute module an import of this file names: `from ..p import q` in `a/b/c.py`
    /// (module `a.b.c`) or in `a/b/__init__.py` (package `a.b`) is `a.p`; `from . import m` is
    /// `a.b` in both. Dots may climb to the repository's top level (`from ... import m` in
    /// `a/b/c.py` is the top-level `m`), not above it: `None` there. The one resolver of
    /// relative imports: the symbol table and the evaluation's names both use it.
    pub fn import_module(&self, imp: &Import) -> Option<String> {
        if imp.level == 0 {
            return Some(imp.module.clone());
        }
        let mut parts: Vec<&str> = self.module.split('.').filter(|s| !s.is_empty()).collect();
        // A module's package is its parent; a package (`__init__.py`) is its own.
        if !self.is_package() {
            parts.pop();
        }
        for _ in 1..imp.level {
            parts.pop()?;
        }
        if !imp.module.is_empty() {
            parts.extend(imp.module.split('.'));
        }
        Some(parts.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, module: &str) -> FileSymbols {
        FileSymbols {
            path: path.into(),
            lang: Some(Lang::Python),
            module: module.into(),
            functions: Vec::new(),
            classes: Vec::new(),
            imports: Vec::new(),
            parse_errors: 0,
        }
    }

    /// The module `from <dots><from> import x` in `file` names.
    fn resolve(file: &FileSymbols, level: usize, from: &str) -> Option<String> {
        let imp = Import {
            module: from.into(),
            name: Some("x".into()),
            alias: None,
            level,
            is_static: false,
            is_wildcard: false,
            line: 1,
            scope: None,
        };
        file.import_module(&imp)
    }

    #[test]
    fn relative_imports_in_a_package_init_start_from_the_package_itself() {
        let init = file("a/b/__init__.py", "a.b");
        assert!(init.is_package());
        assert_eq!(resolve(&init, 1, "").as_deref(), Some("a.b"));
        assert_eq!(resolve(&init, 1, "c").as_deref(), Some("a.b.c"));
        assert_eq!(resolve(&init, 2, "").as_deref(), Some("a"));
        assert_eq!(resolve(&init, 2, "d").as_deref(), Some("a.d"));
        // The repository's top level, then above it.
        assert_eq!(resolve(&init, 3, "").as_deref(), Some(""));
        assert_eq!(resolve(&init, 4, ""), None);
    }

    #[test]
    fn relative_imports_in_a_module_start_from_its_package() {
        let module = file("a/b/c.py", "a.b.c");
        assert!(!module.is_package());
        assert_eq!(resolve(&module, 1, "").as_deref(), Some("a.b"));
        assert_eq!(resolve(&module, 1, "d").as_deref(), Some("a.b.d"));
        assert_eq!(resolve(&module, 2, "").as_deref(), Some("a"));
        assert_eq!(resolve(&module, 2, "d").as_deref(), Some("a.d"));
        assert_eq!(resolve(&module, 3, "d").as_deref(), Some("d"));
        assert_eq!(resolve(&module, 4, ""), None);
        // Absolute imports are as written; `x__init__.py` is no package.
        assert_eq!(resolve(&module, 0, "p.q").as_deref(), Some("p.q"));
        assert!(!file("a/x__init__.py", "a.x__init__").is_package());
    }
}
