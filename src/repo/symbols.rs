//! Name resolution over the symbol table ([`super::table`]): imports to the files and
//! definitions they name, and names proposed from inside a function (`normpath`, `self.m`,
//! `mod.f`, `Class.m`) to the definitions they denote.

use super::ids::{ClassId, Def, FileId, FnId};
use super::model::{Import, Lang, SymbolKind};
use super::repository::Repository;
use super::table::SymbolTable;
use serde::Serialize;
use std::collections::HashSet;

/// How deep re-exports and base classes are followed (guards against import and inheritance
/// cycles).
const MAX_DEPTH: usize = 8;

impl Repository {
    /// Name resolution over every definition.
    pub fn resolver(&self) -> Resolver<'_> {
        Resolver::new(self, None)
    }
}

/// What an import denotes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImportTarget {
    /// A Python module (one file) or Java package (its files) of this repository.
    Module { files: Vec<FileId> },
    /// Definitions of this repository.
    Defs { defs: Vec<Def> },
    /// Not defined here: standard library or third party.
    External { module: String },
}

/// Why a name did not resolve to definitions of the repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unresolved {
    #[error("{name} comes from outside the repository ({module})")]
    External { name: String, module: String },
    #[error("{name} names a module, not a function or class")]
    Module { name: String, files: Vec<FileId> },
    #[error("{name} is not defined in the repository{hint}")]
    NotFound { name: String, hint: String },
    #[error("{name} is ambiguous: {} definitions match", candidates.len())]
    Ambiguous { name: String, candidates: Vec<Def> },
}

/// Definitions hidden from a resolver (a masked view).
#[derive(Debug, Default, Clone)]
pub struct Hidden {
    pub functions: HashSet<FnId>,
    pub classes: HashSet<ClassId>,
    pub files: HashSet<FileId>,
}

/// Name resolution over a repository, optionally blind to hidden definitions and files.
#[derive(Clone, Copy)]
pub struct Resolver<'r> {
    repo: &'r Repository,
    hidden: Option<&'r Hidden>,
}

/// Where a name is looked up: a file, and the function it appears in (if any).
#[derive(Clone, Copy)]
struct Scope {
    file: FileId,
    function: Option<FnId>,
}

/// What a first name segment is bound to in a scope.
enum Binding {
    Defs(Vec<Def>),
    Module(Vec<FileId>, String),
    External(String),
}

/// Python standard-library modules that code names without a package (sorted).
pub(crate) const PY_STDLIB_MODULES: &[&str] = &[
    "abc",
    "argparse",
    "array",
    "ast",
    "asyncio",
    "atexit",
    "base64",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "calendar",
    "cmath",
    "codecs",
    "collections",
    "colorsys",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "csv",
    "ctypes",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "dis",
    "email",
    "enum",
    "errno",
    "fcntl",
    "fnmatch",
    "fractions",
    "functools",
    "gc",
    "getpass",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "math",
    "mimetypes",
    "mmap",
    "multiprocessing",
    "numbers",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "pkgutil",
    "platform",
    "posixpath",
    "pprint",
    "queue",
    "random",
    "re",
    "reprlib",
    "secrets",
    "select",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "stat",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "sys",
    "sysconfig",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "token",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "weakref",
    "xml",
    "zipfile",
    "zlib",
];

/// Python 3.11's `dir(builtins)`, plus the module globals every module has.
pub(crate) const PY_BUILTINS: &[&str] = &[
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "False",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "None",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "True",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "__build_class__",
    "__debug__",
    "__doc__",
    "__import__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "__file__",
    "__builtins__",
    "__path__",
    "__cached__",
    "__annotations__",
    "__all__",
    "__class__",
    "__dict__",
    "__module__",
    "__qualname__",
];

impl<'r> Resolver<'r> {
    pub fn new(repo: &'r Repository, hidden: Option<&'r Hidden>) -> Self {
        Self { repo, hidden }
    }

    fn table(&self) -> &'r SymbolTable {
        self.repo.symbol_table()
    }

    pub fn is_visible(&self, def: Def) -> bool {
        let Some(h) = self.hidden else { return true };
        match def {
            Def::Function(id) => {
                !h.functions.contains(&id) && !h.files.contains(&self.repo.function_file(id))
            }
            Def::Class(id) => {
                !h.classes.contains(&id) && !h.files.contains(&self.repo.class_file(id))
            }
        }
    }

    fn file_visible(&self, file: FileId) -> bool {
        self.hidden.is_none_or(|h| !h.files.contains(&file))
    }

    fn visible(&self, defs: &[Def]) -> Vec<Def> {
        defs.iter()
            .copied()
            .filter(|d| self.is_visible(*d))
            .collect()
    }

    /// Visible definitions with this qualified name.
    pub fn lookup_qualname(&self, qualname: &str) -> Vec<Def> {
        self.visible(self.table().by_qualname(qualname))
    }

    /// Visible definitions with this simple name.
    pub fn lookup_name(&self, name: &str) -> Vec<Def> {
        self.visible(self.table().by_name(name))
    }

    /// Resolves a dotted name with no scope: a qualified name (`pkg.mod.Class.method`), or a
    /// module path followed by names defined or re-exported there, or inherited methods.
    pub fn lookup_dotted(&self, dotted: &str) -> Vec<Def> {
        let direct = self.lookup_qualname(dotted);
        if !direct.is_empty() {
            return direct;
        }
        let parts: Vec<&str> = dotted.split('.').collect();
        for i in (1..parts.len()).rev() {
            let module = parts[..i].join(".");
            let files = self.module_files(&module);
            if !files.is_empty() {
                if let Ok(defs) = self.in_module(&files, &module, &parts[i..], 0) {
                    return defs;
                }
            }
        }
        Vec::new()
    }

    fn module_files(&self, module: &str) -> Vec<FileId> {
        self.table()
            .module_files(module)
            .iter()
            .copied()
            .filter(|f| self.file_visible(*f))
            .collect()
    }

    /// What an import of `file` denotes.
    pub fn resolve_import(&self, file: FileId, imp: &Import) -> Result<ImportTarget, Unresolved> {
        match self.file_lang(file) {
            Some(Lang::Java) => self.resolve_java_import(imp),
            _ => self.resolve_python_import(file, imp),
        }
    }

    fn file_lang(&self, file: FileId) -> Option<Lang> {
        self.repo.file(file).lang
    }

    fn file_module(&self, file: FileId) -> &'r str {
        self.repo
            .file_symbols(file)
            .map(|s| s.module.as_str())
            .unwrap_or("")
    }

    /// The absolute module a Python import names ([`super::FileSymbols::import_module`]).
    fn absolute_module(&self, file: FileId, imp: &Import) -> Option<String> {
        match self.repo.file_symbols(file) {
            Some(symbols) => symbols.import_module(imp),
            None => (imp.level == 0).then(|| imp.module.clone()),
        }
    }

    fn resolve_python_import(
        &self,
        file: FileId,
        imp: &Import,
    ) -> Result<ImportTarget, Unresolved> {
        let shown = format!("{}{}", ".".repeat(imp.level), imp.module);
        let Some(module) = self.absolute_module(file, imp) else {
            return Err(Unresolved::NotFound {
                name: shown,
                hint: " (relative import goes above the top-level package)".into(),
            });
        };
        let name = match (&imp.name, imp.is_wildcard) {
            (Some(n), false) => n.as_str(),
            _ => return self.python_module_target(&module, imp.level > 0),
        };
        let sub = join(&module, name);
        let sub_files = self.module_files(&sub);
        if !sub_files.is_empty() {
            return Ok(ImportTarget::Module { files: sub_files });
        }
        match self.python_module_target(&module, imp.level > 0)? {
            ImportTarget::Module { files } => match self.in_module(&files, &module, &[name], 0) {
                Ok(defs) => Ok(ImportTarget::Defs { defs }),
                Err(e) => Err(e),
            },
            other => Ok(other),
        }
    }

    fn python_module_target(
        &self,
        module: &str,
        relative: bool,
    ) -> Result<ImportTarget, Unresolved> {
        let files = self.module_files(module);
        if !files.is_empty() {
            Ok(ImportTarget::Module { files })
        } else if relative || self.table().is_internal(module) {
            Err(Unresolved::NotFound {
                name: module.to_string(),
                hint: " (no such module file)".into(),
            })
        } else {
            Ok(ImportTarget::External {
                module: module.to_string(),
            })
        }
    }

    fn resolve_java_import(&self, imp: &Import) -> Result<ImportTarget, Unresolved> {
        let full = match &imp.name {
            Some(n) if !imp.is_wildcard => join(&imp.module, n),
            _ => imp.module.clone(),
        };
        if imp.is_wildcard {
            let files = self.module_files(&full);
            if !files.is_empty() {
                return Ok(ImportTarget::Module { files });
            }
        }
        let defs = self.lookup_qualname(&full);
        if !defs.is_empty() {
            return Ok(ImportTarget::Defs { defs });
        }
        if self.java_internal(&full) {
            Err(Unresolved::NotFound {
                name: full,
                hint: String::new(),
            })
        } else {
            Ok(ImportTarget::External { module: full })
        }
    }

    /// Whether a Java name lies in one of the repository's packages.
    fn java_internal(&self, full: &str) -> bool {
        let parts: Vec<&str> = full.split('.').collect();
        (1..=parts.len()).any(|i| !self.table().module_files(&parts[..i].join(".")).is_empty())
    }

    /// Definitions `rest` denotes inside a module: defined there, a submodule, a class member,
    /// or re-exported by the module's own imports.
    fn in_module(
        &self,
        files: &[FileId],
        module: &str,
        rest: &[&str],
        depth: usize,
    ) -> Result<Vec<Def>, Unresolved> {
        let dotted = join(module, &rest.join("."));
        let not_found = || Unresolved::NotFound {
            name: dotted.clone(),
            hint: String::new(),
        };
        if rest.is_empty() || depth > MAX_DEPTH {
            return Err(not_found());
        }
        let direct = self.lookup_qualname(&dotted);
        if !direct.is_empty() {
            return Ok(direct);
        }
        let head = join(module, rest[0]);
        let sub = self.module_files(&head);
        if !sub.is_empty() {
            if rest.len() == 1 {
                return Err(Unresolved::Module {
                    name: dotted,
                    files: sub,
                });
            }
            return self.in_module(&sub, &head, &rest[1..], depth + 1);
        }
        let head_defs = self.lookup_qualname(&head);
        if !head_defs.is_empty() {
            return self
                .members(&head_defs, &rest[1..], depth + 1)
                .ok_or_else(not_found);
        }
        // Re-exported: `from .sub import f` in the module's own (module-level) imports.
        for &file in files {
            let scope = Scope {
                file,
                function: None,
            };
            if let Some(binding) = self.bind_import(scope, rest[0], depth + 1) {
                return self.follow(binding, rest[0], &rest[1..], depth + 1);
            }
        }
        Err(not_found())
    }

    /// Definitions reached from `defs` through `rest` (class members, inherited methods).
    fn members(&self, defs: &[Def], rest: &[&str], depth: usize) -> Option<Vec<Def>> {
        if rest.is_empty() {
            return Some(defs.to_vec());
        }
        for &def in defs {
            if let Def::Class(c) = def {
                let found = self.class_member(c, rest[0], depth);
                if !found.is_empty() {
                    return self.members(&found, &rest[1..], depth + 1);
                }
            }
        }
        None
    }

    /// A method or nested class named `name` in class `c` or, failing that, in its bases.
    fn class_member(&self, c: ClassId, name: &str, depth: usize) -> Vec<Def> {
        if depth > MAX_DEPTH {
            return Vec::new();
        }
        let class = self.repo.class(c);
        let own = self.lookup_qualname(&join(&class.qualname, name));
        if !own.is_empty() {
            return own;
        }
        for base in &class.bases {
            let base = base_name(base);
            if base.is_empty() {
                continue;
            }
            let scope = Scope {
                file: self.repo.class_file(c),
                function: None,
            };
            if let Ok(defs) = self.resolve_in(scope, base, depth + 1) {
                for d in defs {
                    if let Def::Class(b) = d {
                        if b != c {
                            let found = self.class_member(b, name, depth + 1);
                            if !found.is_empty() {
                                return found;
                            }
                        }
                    }
                }
            }
        }
        Vec::new()
    }

    /// Resolves a name as written inside function `from` (`normpath`, `self.m`, `mod.f`,
    /// `Class.m`, `pkg.mod.f`): the definitions it denotes, or why there are none. Imports are
    /// honoured, including lazy imports in the function's body.
    pub fn resolve_name(&self, from: FnId, name: &str) -> Result<Vec<Def>, Unresolved> {
        let scope = Scope {
            file: self.repo.function_file(from),
            function: Some(from),
        };
        self.resolve_in(scope, name.trim(), 0)
    }

    /// Resolves a name as written at the top level of a file.
    pub fn resolve_in_file(&self, file: FileId, name: &str) -> Result<Vec<Def>, Unresolved> {
        self.resolve_in(
            Scope {
                file,
                function: None,
            },
            name.trim(),
            0,
        )
    }

    fn resolve_in(&self, scope: Scope, name: &str, depth: usize) -> Result<Vec<Def>, Unresolved> {
        let name = name.trim_end_matches("()");
        let not_found = |hint: &str| Unresolved::NotFound {
            name: name.into(),
            hint: hint.into(),
        };
        if name.is_empty() || depth > MAX_DEPTH {
            return Err(not_found(""));
        }
        let parts: Vec<&str> = name.split('.').collect();
        let lang = self.file_lang(scope.file).unwrap_or(Lang::Python);
        let head = parts[0];

        if matches!(head, "self" | "cls" | "this" | "super()" | "super") && parts.len() >= 2 {
            return self.resolve_on_self(scope, head, &parts[1..], name);
        }
        if let Some(binding) = self.bind(scope, head, lang, depth) {
            return self.follow(binding, name, &parts[1..], depth);
        }
        if lang == Lang::Python && parts.len() == 1 && PY_BUILTINS.contains(&head) {
            return Err(Unresolved::External {
                name: name.into(),
                module: "builtins".into(),
            });
        }
        // A fully qualified name.
        let dotted = self.lookup_dotted(name);
        if !dotted.is_empty() {
            return Ok(dotted);
        }
        // Last resort: a unique definition of that simple name (for `a.f`: one whose qualified
        // name ends in `a.f`, else, `a` being a value of unknown type, a method named `f`).
        let last = parts[parts.len() - 1];
        let suffix = format!(".{name}");
        let candidates: Vec<Def> = self
            .lookup_name(last)
            .into_iter()
            .filter(|d| parts.len() == 1 || self.repo.qualname(*d).ends_with(&suffix))
            .collect();
        if candidates.is_empty() && parts.len() > 1 {
            // `x.m` with `x` of unknown type may be a method of some class; a dotted path, or
            // a module's name that the file does not import, is not a receiver to guess.
            if parts.len() > 2 || self.names_module(head, lang) {
                return Err(not_found(&format!(
                    " ({head} is a module path that this file does not import)"
                )));
            }
            return self.method_named(name, last);
        }
        self.unique(name, candidates)
    }

    /// Whether `head` is the name of a module: of this repository, or (Python) of the standard
    /// library.
    fn names_module(&self, head: &str, lang: Lang) -> bool {
        self.repo.symbol_table().is_module_segment(head)
            || (lang == Lang::Python && PY_STDLIB_MODULES.binary_search(&head).is_ok())
    }

    /// One qualified name among `candidates`: found; several: ambiguous; none: not found.
    fn unique(&self, name: &str, candidates: Vec<Def>) -> Result<Vec<Def>, Unresolved> {
        let distinct: HashSet<&str> = candidates.iter().map(|d| self.repo.qualname(*d)).collect();
        match distinct.len() {
            0 => Err(Unresolved::NotFound {
                name: name.into(),
                hint: String::new(),
            }),
            1 => Ok(candidates),
            _ => Err(Unresolved::Ambiguous {
                name: name.into(),
                candidates,
            }),
        }
    }

    /// `x.m` where the type of `x` is unknown (a local variable, `self.attr`): the methods
    /// named `m`, if one class defines it; ambiguous if several do.
    fn method_named(&self, name: &str, method: &str) -> Result<Vec<Def>, Unresolved> {
        let methods: Vec<Def> = self
            .lookup_name(method)
            .into_iter()
            .filter(|d| matches!(d, Def::Function(f) if self.repo.function(*f).kind == SymbolKind::Method))
            .collect();
        self.unique(name, methods).map_err(|e| match e {
            Unresolved::NotFound { name, .. } => Unresolved::NotFound {
                name,
                hint: format!(" (the receiver's type is unknown and no class defines {method})"),
            },
            other => other,
        })
    }

    /// `self.m`, `cls.m`, `this.m`, `super().m`: a member of the enclosing class or its bases.
    fn resolve_on_self(
        &self,
        scope: Scope,
        head: &str,
        rest: &[&str],
        name: &str,
    ) -> Result<Vec<Def>, Unresolved> {
        let not_found = |hint: &str| Unresolved::NotFound {
            name: name.into(),
            hint: hint.into(),
        };
        let Some(class) = scope.function.and_then(|f| self.enclosing_class(f)) else {
            return Err(not_found(" (not inside a class)"));
        };
        if rest.len() > 1 {
            return Err(not_found(
                " (attribute of an attribute: its type is unknown)",
            ));
        }
        let found = if head.starts_with("super") {
            let c = self.repo.class(class);
            let mut found = Vec::new();
            for base in &c.bases {
                let s = Scope {
                    file: self.repo.class_file(class),
                    function: None,
                };
                if let Ok(defs) = self.resolve_in(s, base_name(base), 1) {
                    for d in defs {
                        if let Def::Class(b) = d {
                            found = self.class_member(b, rest[0], 1);
                        }
                    }
                }
                if !found.is_empty() {
                    break;
                }
            }
            found
        } else {
            self.class_member(class, rest[0], 0)
        };
        if found.is_empty() {
            Err(not_found(" (no such method in the class or its bases)"))
        } else {
            Ok(found)
        }
    }

    /// The class a method belongs to (the innermost one for nested functions).
    pub fn enclosing_class(&self, f: FnId) -> Option<ClassId> {
        let func = self.repo.function(f);
        let class = func.class.as_deref()?;
        let file = self.repo.function_file(f);
        self.table()
            .by_qualname(class)
            .iter()
            .find_map(|d| match d {
                Def::Class(c) if self.repo.class_file(*c) == file => Some(*c),
                _ => None,
            })
    }

    /// What `head` is bound to in `scope`: a local definition, an import, a class member
    /// (Java), a class of the same package (Java).
    fn bind(&self, scope: Scope, head: &str, lang: Lang, depth: usize) -> Option<Binding> {
        // Definitions in enclosing scopes of this file, innermost first. Python class bodies are
        // not scopes for the functions inside them; Java classes are.
        let module = self.file_module(scope.file);
        let mut prefixes: Vec<String> = Vec::new();
        if let Some(f) = scope.function {
            let q = &self.repo.function(f).qualname;
            let mut p = q.as_str();
            loop {
                let is_class = self
                    .table()
                    .by_qualname(p)
                    .iter()
                    .any(|d| matches!(d, Def::Class(_)));
                if !is_class || lang == Lang::Java {
                    prefixes.push(p.to_string());
                }
                match p.rfind('.') {
                    Some(i) if p.len() > module.len() && i >= module.len() => p = &p[..i],
                    _ => break,
                }
            }
            if lang == Lang::Java {
                if let Some(c) = self.enclosing_class(f) {
                    let found = self.class_member(c, head, depth + 1);
                    if !found.is_empty() {
                        return Some(Binding::Defs(found));
                    }
                }
            }
        }
        if !module.is_empty() && !prefixes.iter().any(|p| p == module) {
            prefixes.push(module.to_string());
        }
        if module.is_empty() {
            prefixes.push(String::new());
        }
        for p in &prefixes {
            let defs: Vec<Def> = self
                .lookup_qualname(&join(p, head))
                .into_iter()
                .filter(|d| lang == Lang::Java || self.def_file(*d) == scope.file)
                .collect();
            if !defs.is_empty() {
                return Some(Binding::Defs(defs));
            }
        }
        if let Some(b) = self.bind_import(scope, head, depth) {
            return Some(b);
        }
        if lang == Lang::Java {
            // Classes of the same package need no import; neither does java.lang.
            let same_pkg = self.lookup_qualname(&join(module, head));
            if !same_pkg.is_empty() {
                return Some(Binding::Defs(same_pkg));
            }
        }
        None
    }

    fn def_file(&self, def: Def) -> FileId {
        match def {
            Def::Function(id) => self.repo.function_file(id),
            Def::Class(id) => self.repo.class_file(id),
        }
    }

    /// What `head` is bound to by the imports of `scope`'s file visible from its function.
    fn bind_import(&self, scope: Scope, head: &str, depth: usize) -> Option<Binding> {
        let symbols = self.repo.file_symbols(scope.file)?;
        let fq = scope
            .function
            .map(|f| self.repo.function(f).qualname.as_str());
        let in_scope = |imp: &Import| match (&imp.scope, fq) {
            (None, _) => true,
            (Some(s), Some(q)) => q == s || q.starts_with(&format!("{s}.")),
            (Some(_), None) => false,
        };
        let java = self.file_lang(scope.file) == Some(Lang::Java);
        // Later imports shadow earlier ones; lazy imports shadow module-level ones.
        let mut best: Option<(&Import, bool)> = None;
        let mut wildcards = Vec::new();
        for imp in symbols.imports.iter().filter(|i| in_scope(i)) {
            if imp.is_wildcard {
                wildcards.push(imp);
                continue;
            }
            let bound = bound_name(imp, java);
            if bound == head {
                let lazy = imp.scope.is_some();
                if best.is_none_or(|(_, b_lazy)| lazy || !b_lazy) {
                    best = Some((imp, lazy));
                }
            }
        }
        if let Some((imp, _)) = best {
            return Some(self.import_binding(scope.file, imp, head));
        }
        for imp in wildcards {
            if let Ok(ImportTarget::Module { files }) = self.resolve_import(scope.file, imp) {
                let module = if java {
                    imp.module.clone()
                } else {
                    self.absolute_module(scope.file, imp).unwrap_or_default()
                };
                if let Ok(defs) = self.in_module(&files, &module, &[head], depth + 1) {
                    return Some(Binding::Defs(defs));
                }
            }
            if java && imp.is_static {
                let defs = self.lookup_qualname(&join(&imp.module, head));
                if !defs.is_empty() {
                    return Some(Binding::Defs(defs));
                }
            }
        }
        None
    }

    fn import_binding(&self, file: FileId, imp: &Import, head: &str) -> Binding {
        let java = self.file_lang(file) == Some(Lang::Java);
        // `import a.b.c` binds `a` to the top-level package.
        if !java && imp.name.is_none() && imp.alias.is_none() {
            let top = imp.module.split('.').next().unwrap_or(head).to_string();
            return match self.python_module_target(&top, false) {
                Ok(ImportTarget::Module { files }) => Binding::Module(files, top),
                _ => Binding::External(imp.module.clone()),
            };
        }
        match self.resolve_import(file, imp) {
            Ok(ImportTarget::Module { files }) => {
                let module = if java {
                    imp.module.clone()
                } else {
                    let base = self.absolute_module(file, imp).unwrap_or_default();
                    match &imp.name {
                        Some(n) => join(&base, n),
                        None => base,
                    }
                };
                Binding::Module(files, module)
            }
            Ok(ImportTarget::Defs { defs }) => Binding::Defs(defs),
            Ok(ImportTarget::External { module }) => Binding::External(module),
            Err(_) => Binding::Defs(Vec::new()),
        }
    }

    /// Follows the rest of a dotted name from what its first segment is bound to.
    fn follow(
        &self,
        binding: Binding,
        name: &str,
        rest: &[&str],
        depth: usize,
    ) -> Result<Vec<Def>, Unresolved> {
        let not_found = || Unresolved::NotFound {
            name: name.into(),
            hint: String::new(),
        };
        match binding {
            Binding::External(module) => Err(Unresolved::External {
                name: name.into(),
                module,
            }),
            Binding::Module(files, module) => {
                if rest.is_empty() {
                    Err(Unresolved::Module {
                        name: name.into(),
                        files,
                    })
                } else {
                    self.in_module(&files, &module, rest, depth + 1)
                }
            }
            Binding::Defs(defs) if defs.is_empty() => Err(not_found()),
            Binding::Defs(defs) => self.members(&defs, rest, depth + 1).ok_or_else(not_found),
        }
    }

    /// Resolves every import of a file (for `show` and tests).
    pub fn imports_of(&self, file: FileId) -> Vec<(Import, Result<ImportTarget, Unresolved>)> {
        self.repo
            .file_symbols(file)
            .map(|s| {
                s.imports
                    .iter()
                    .map(|i| (i.clone(), self.resolve_import(file, i)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `kind` of a definition as the JSON interface spells it.
    pub fn kind(&self, def: Def) -> SymbolKind {
        match def {
            Def::Function(id) => self.repo.function(id).kind,
            Def::Class(_) => SymbolKind::Class,
        }
    }
}

/// The local name an import binds: alias, else imported name, else (Python `import a.b`) `a`;
/// Java: the last segment.
pub(crate) fn bound_name(imp: &Import, java: bool) -> &str {
    if let Some(a) = &imp.alias {
        return a;
    }
    if let Some(n) = &imp.name {
        return n;
    }
    if java {
        imp.module.rsplit('.').next().unwrap_or(&imp.module)
    } else {
        imp.module.split('.').next().unwrap_or(&imp.module)
    }
}

/// `Generic[T]` → `Generic`, `Base<T>` → `Base`, `metaclass=M` → skipped (empty).
fn base_name(base: &str) -> &str {
    if base.contains('=') {
        return "";
    }
    base.split(['[', '<', '(']).next().unwrap_or(base).trim()
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else if name.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}
