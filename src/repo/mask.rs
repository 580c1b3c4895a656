//! Targets and the masked view.
//!
//! A target is `path/to/file.py::Class.method` (optionally `@LINE` to pick one of several
//! definitions, e.g. a Java overload) or a dotted qualified name as DevEval writes it
//! (`boltons.strutils.slugify`). A Python name defined several times in one file denotes its last
//! definition, the one Python binds it to. The [`MaskedView`] is the repository as every retriever sees
//! it: the target's whole definition (decorators, signature, body, nested definitions, lazy
//! imports) does not exist in any of its accessors, and test files are left out unless asked for.

use super::ids::{ClassId, Def, FileId, FnId};
use super::model::{Class, FileSymbols, Function, Import, Lang, Span};
use super::repository::Repository;
use super::symbols::{Hidden, Resolver};
use super::tree::{self, TreeFile, TreeOptions};
use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error(
        "target {target}: file {path} is not in the index{}",
        list(candidates, "files with that name")
    )]
    FileNotFound {
        target: String,
        path: String,
        candidates: Vec<String>,
    },
    #[error(
        "target {target}: no function or method of that name{}",
        list(candidates, "close candidates")
    )]
    NotFound {
        target: String,
        candidates: Vec<String>,
    },
    #[error(
        "target {target}: no definition of {name} starts at line {line}{}",
        list(candidates, "its definitions start at")
    )]
    NotAtLine {
        target: String,
        name: String,
        line: usize,
        candidates: Vec<String>,
    },
    #[error(
        "target {target} is ambiguous{}\nadd @LINE to pick one (e.g. {target}@{})",
        list(candidates, "candidates"),
        first_line(candidates)
    )]
    Ambiguous {
        target: String,
        candidates: Vec<String>,
    },
}

fn list(items: &[String], what: &str) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!("; {what}:\n  {}", items.join("\n  "))
    }
}

fn first_line(candidates: &[String]) -> String {
    candidates
        .first()
        .and_then(|c| c.rsplit(':').next())
        .and_then(|s| s.split(')').next())
        .unwrap_or("LINE")
        .to_string()
}

/// `qualname (path:line)` for candidate lists.
fn describe(repo: &Repository, id: FnId) -> String {
    let f = repo.function(id);
    format!("{} ({}:{})", f.qualname, f.path, f.span.start_line)
}

/// Finds the one function a target names.
pub fn resolve_target(repo: &Repository, target: &str) -> Result<FnId, TargetError> {
    let target = target.trim();
    let (spec, line) = match target.rsplit_once('@') {
        Some((s, l)) if l.parse::<usize>().is_ok() => (s, l.parse::<usize>().ok()),
        _ => (target, None),
    };
    let found: Vec<FnId> = match spec.split_once("::") {
        Some((path, qual)) => {
            let path = path.trim_start_matches("./").replace('\\', "/");
            let Some(file) = repo.file_id(&path) else {
                let name = path.rsplit('/').next().unwrap_or(&path);
                let candidates = repo
                    .files()
                    .iter()
                    .filter(|f| f.path.rsplit('/').next() == Some(name))
                    .map(|f| f.path.clone())
                    .take(10)
                    .collect();
                return Err(TargetError::FileNotFound {
                    target: target.into(),
                    path,
                    candidates,
                });
            };
            let suffix = format!(".{qual}");
            repo.functions_in(file)
                .iter()
                .copied()
                .filter(|id| {
                    let q = &repo.function(*id).qualname;
                    q == qual || q.ends_with(&suffix)
                })
                .collect()
        }
        None => {
            let exact: Vec<FnId> = functions_named(repo, spec);
            if exact.is_empty() {
                // A namespace with a prefix our module names lack, or the reverse.
                let suffix = format!(".{spec}");
                repo.function_ids()
                    .filter(|id| {
                        let q = &repo.function(*id).qualname;
                        q.ends_with(&suffix) || spec.ends_with(&format!(".{q}"))
                    })
                    .collect()
            } else {
                exact
            }
        }
    };
    let mut found: Vec<FnId> = match line {
        Some(l) => {
            let at: Vec<FnId> = found
                .iter()
                .copied()
                .filter(|id| repo.function(*id).span.start_line == l)
                .collect();
            if at.is_empty() && !found.is_empty() {
                return Err(TargetError::NotAtLine {
                    target: target.into(),
                    name: spec.into(),
                    line: l,
                    candidates: found.iter().map(|id| describe(repo, *id)).collect(),
                });
            }
            at
        }
        None => found,
    };
    // Python rebinds a name to its last `def` (`if PY2: def f … else: def f`, a property's
    // `@x.setter`): repeated definitions of one qualified name in one file denote the last one,
    // as DevEval's namespaces do. Java overloads and definitions in different files stay
    // ambiguous.
    if found.len() > 1 && rebinds(repo, &found) {
        found = found
            .iter()
            .copied()
            .max_by_key(|id| repo.function(*id).span.start_byte)
            .into_iter()
            .collect();
    }
    match found.len() {
        1 => Ok(found[0]),
        0 => Err(TargetError::NotFound {
            target: target.into(),
            candidates: close_candidates(repo, spec)
                .into_iter()
                .map(|id| describe(repo, id))
                .collect(),
        }),
        _ => Err(TargetError::Ambiguous {
            target: target.into(),
            candidates: found.iter().map(|id| describe(repo, *id)).collect(),
        }),
    }
}

/// Whether all `ids` are Python definitions of one qualified name in one file.
fn rebinds(repo: &Repository, ids: &[FnId]) -> bool {
    let first = ids[0];
    let file = repo.function_file(first);
    repo.file(file).lang == Some(Lang::Python)
        && ids.iter().all(|id| {
            repo.function_file(*id) == file
                && repo.function(*id).qualname == repo.function(first).qualname
        })
}

fn functions_named(repo: &Repository, qualname: &str) -> Vec<FnId> {
    repo.symbol_table()
        .by_qualname(qualname)
        .iter()
        .filter_map(|d| match d {
            Def::Function(id) => Some(*id),
            Def::Class(_) => None,
        })
        .collect()
}

/// Up to 8 functions whose names are closest to the target's: same simple name first, then by
/// edit distance of the qualified name.
fn close_candidates(repo: &Repository, spec: &str) -> Vec<FnId> {
    let wanted = spec.rsplit(['.', ':']).next().unwrap_or(spec);
    let dotted = spec.replace("::", ".").replace('/', ".");
    let mut scored: Vec<(usize, FnId)> = repo
        .function_ids()
        .map(|id| {
            let f = repo.function(id);
            let same = if f.name == wanted { 0 } else { 1000 };
            // Tails of equal byte length, compared as bytes: a cut may fall inside a
            // multi-byte character, so they are never sliced as `str`.
            let (q, d) = (f.qualname.as_bytes(), dotted.as_bytes());
            let tail_len = d.len().min(q.len());
            let (q_tail, d_tail) = (&q[q.len() - tail_len..], &d[d.len() - tail_len..]);
            (
                same + byte_distance(q_tail, d_tail) + edit_distance(&f.name, wanted),
                id,
            )
        })
        .collect();
    scored.sort();
    scored.into_iter().take(8).map(|(_, id)| id).collect()
}

/// Levenshtein distance over bytes (names are ASCII in practice; close enough otherwise).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    byte_distance(a.as_bytes(), b.as_bytes())
}

fn byte_distance(a: &[u8], b: &[u8]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Whether a repository-relative path is a test file: under `tests/` or `test/` (which covers
/// Maven's `src/test/java`), `test_*.py`, `*_test.py`, `conftest.py`, `*Test.java`,
/// `*Tests.java`.
pub fn is_test_path(path: &str) -> bool {
    let mut parts = path.split('/').collect::<Vec<_>>();
    let name = parts.pop().unwrap_or_default();
    parts.iter().any(|d| *d == "tests" || *d == "test")
        || (name.starts_with("test_") && name.ends_with(".py"))
        || name.ends_with("_test.py")
        || name == "conftest.py"
        || name.ends_with("Test.java")
        || name.ends_with("Tests.java")
}

/// A file a masked view shows (no text here: ask the view for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisibleFile<'a> {
    pub id: FileId,
    pub path: &'a str,
    pub lang: Option<Lang>,
}

/// The repository as retrievers see it. See the module documentation.
#[derive(Debug)]
pub struct MaskedView<'r> {
    repo: &'r Repository,
    target: Option<FnId>,
    hidden: Hidden,
    /// The target's file: its text without the definition, its symbols without the hidden ones.
    masked: Option<(FileId, String, FileSymbols)>,
    /// The hidden byte range of the target's file.
    hole: Option<(FileId, Span)>,
}

impl<'r> MaskedView<'r> {
    /// Hides `target` (if any) and, unless `include_tests`, every test file.
    pub fn new(repo: &'r Repository, target: Option<FnId>, include_tests: bool) -> Self {
        let mut hidden = Hidden::default();
        if !include_tests {
            for (i, f) in repo.files().iter().enumerate() {
                if is_test_path(&f.path) {
                    hidden.files.insert(FileId(i as u32));
                }
            }
        }
        let mut masked = None;
        let mut hole = None;
        if let Some(t) = target {
            let file = repo.function_file(t);
            let span = repo.function(t).span;
            let inside = |s: &Span| s.start_byte >= span.start_byte && s.end_byte <= span.end_byte;
            for &id in repo.functions_in(file) {
                if id == t || (inside(&repo.function(id).span) && repo.function(id).span != span) {
                    hidden.functions.insert(id);
                }
            }
            for &id in repo.classes_in(file) {
                if inside(&repo.class(id).span) {
                    hidden.classes.insert(id);
                }
            }
            if let (Some(text), Some(symbols)) = (&repo.file(file).text, repo.file_symbols(file)) {
                let cut = cut(text, span.start_byte, span.end_byte);
                let masked_symbols = mask_symbols(repo, symbols, &hidden);
                masked = Some((file, cut.into_owned(), masked_symbols));
            }
            hole = Some((file, span));
        }
        Self {
            repo,
            target,
            hidden,
            masked,
            hole,
        }
    }

    /// The repository behind the view (for names and bookkeeping, not for content: read
    /// content through the view).
    pub fn repository(&self) -> &'r Repository {
        self.repo
    }

    /// The hidden target, if any. Its definition is not served by this view; use the id only
    /// for bookkeeping (reports, scoring).
    pub fn target(&self) -> Option<FnId> {
        self.target
    }

    /// The target's file and the byte range its definition had in it. The masked text of that
    /// file has nothing of the definition: the range's first byte is where it was.
    pub fn hole(&self) -> Option<(FileId, Span)> {
        self.hole
    }

    /// What is hidden (functions, classes, files).
    pub fn hidden(&self) -> &Hidden {
        &self.hidden
    }

    pub fn is_file_visible(&self, id: FileId) -> bool {
        !self.hidden.files.contains(&id)
    }

    pub fn is_function_visible(&self, id: FnId) -> bool {
        self.resolver().is_visible(Def::Function(id))
    }

    /// Visible files (parsed or only listed), by path.
    pub fn files(&self) -> impl Iterator<Item = VisibleFile<'r>> + '_ {
        let repo = self.repo;
        repo.files().iter().enumerate().filter_map(move |(i, f)| {
            let id = FileId(i as u32);
            self.is_file_visible(id).then_some(VisibleFile {
                id,
                path: &f.path,
                lang: f.lang,
            })
        })
    }

    pub fn file_id(&self, path: &str) -> Option<FileId> {
        self.repo
            .file_id(path)
            .filter(|id| self.is_file_visible(*id))
    }

    /// Text of a visible parsed file; the target's file comes without the target's definition.
    pub fn file_text(&self, path: &str) -> Option<&str> {
        let id = self.file_id(path)?;
        match &self.masked {
            Some((f, text, _)) if *f == id => Some(text),
            _ => self.repo.file(id).text.as_deref(),
        }
    }

    /// Symbols of a visible parsed file; the target's file comes without the hidden definitions
    /// (and class method lists without them). Spans refer to the unmasked file: read code through
    /// [`MaskedView::function_code`], not by slicing [`MaskedView::file_text`].
    pub fn file_symbols(&self, path: &str) -> Option<&FileSymbols> {
        let id = self.file_id(path)?;
        match &self.masked {
            Some((f, _, s)) if *f == id => Some(s),
            _ => self.repo.file_symbols(id),
        }
    }

    pub fn imports_of(&self, path: &str) -> &[Import] {
        self.file_symbols(path)
            .map(|s| s.imports.as_slice())
            .unwrap_or(&[])
    }

    /// Visible functions and methods, in path then file order.
    pub fn functions(&self) -> impl Iterator<Item = (FnId, &'r Function)> + '_ {
        let repo = self.repo;
        repo.function_ids()
            .filter(move |id| self.is_function_visible(*id))
            .map(move |id| (id, repo.function(id)))
    }

    /// Visible functions of one file, in file order.
    pub fn functions_in(&self, path: &str) -> Vec<FnId> {
        let Some(id) = self.file_id(path) else {
            return Vec::new();
        };
        self.repo
            .functions_in(id)
            .iter()
            .copied()
            .filter(|f| self.is_function_visible(*f))
            .collect()
    }

    /// A visible function; `None` for hidden ones.
    pub fn function(&self, id: FnId) -> Option<&'r Function> {
        self.is_function_visible(id).then(|| self.repo.function(id))
    }

    pub fn function_file(&self, id: FnId) -> FileId {
        self.repo.function_file(id)
    }

    pub fn file_path(&self, id: FileId) -> &'r str {
        &self.repo.file(id).path
    }

    /// The whole definition of a visible function. A function that encloses the target comes
    /// with the target's definition cut out.
    pub fn function_code(&self, id: FnId) -> Option<Cow<'r, str>> {
        let f = self.function(id)?;
        let code = self.repo.function_code(id);
        Some(match self.hole {
            Some((file, hole)) if file == self.repo.function_file(id) => {
                let start = hole.start_byte.saturating_sub(f.span.start_byte);
                cut(code, start, hole.end_byte.saturating_sub(f.span.start_byte))
            }
            _ => Cow::Borrowed(code),
        })
    }

    /// Decorators / annotations and header of a visible function.
    pub fn signature_text(&self, id: FnId) -> Option<&'r str> {
        self.function(id).map(|_| self.repo.signature_text(id))
    }

    /// Qualified name of a visible definition.
    pub fn qualname(&self, def: Def) -> Option<&'r str> {
        self.resolver()
            .is_visible(def)
            .then(|| self.repo.qualname(def))
    }

    /// `path:line` of a visible definition.
    pub fn location(&self, def: Def) -> Option<String> {
        self.resolver()
            .is_visible(def)
            .then(|| self.repo.location(def))
    }

    /// The repository's root folder.
    pub fn root(&self) -> &'r std::path::Path {
        self.repo.root()
    }

    /// Visible classes; a class of the target's file comes without the hidden methods.
    pub fn classes(&self) -> impl Iterator<Item = (ClassId, &Class)> + '_ {
        self.repo
            .class_ids()
            .filter(|id| self.resolver().is_visible(Def::Class(*id)))
            .filter_map(|id| self.class(id).map(|c| (id, c)))
    }

    pub fn class(&self, id: ClassId) -> Option<&Class> {
        if !self.resolver().is_visible(Def::Class(id)) {
            return None;
        }
        let c = self.repo.class(id);
        match &self.masked {
            Some((f, _, s)) if *f == self.repo.class_file(id) => s
                .classes
                .iter()
                .find(|m| m.qualname == c.qualname && m.span == c.span),
            _ => Some(c),
        }
    }

    /// Name resolution that sees only visible definitions.
    pub fn resolver(&self) -> Resolver<'_> {
        Resolver::new(self.repo, Some(&self.hidden))
    }

    /// The repository tree of the visible files (and visible functions).
    pub fn tree(&self, opts: TreeOptions) -> String {
        let files: Vec<TreeFile> = self
            .files()
            .map(|f| TreeFile {
                path: f.path.to_string(),
                functions: if opts.functions {
                    self.functions_in(f.path)
                        .into_iter()
                        .map(|id| display_name(self.repo, id))
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        tree::render(&root_name(self.repo), &files, opts)
    }
}

/// The repository tree of every file (no masking).
pub fn repository_tree(repo: &Repository, opts: TreeOptions) -> String {
    MaskedView::new(repo, None, true).tree(opts)
}

fn root_name(repo: &Repository) -> String {
    repo.root()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into())
}

/// A function's name within its module or package: `Class.method`, `outer.inner`.
pub fn display_name(repo: &Repository, id: FnId) -> String {
    let f = repo.function(id);
    let module = repo
        .file_symbols(repo.function_file(id))
        .map(|s| s.module.as_str())
        .unwrap_or("");
    match f
        .qualname
        .strip_prefix(module)
        .and_then(|r| r.strip_prefix('.'))
    {
        Some(rest) if !module.is_empty() => rest.to_string(),
        _ => f.qualname.clone(),
    }
}

/// `text` (which covers `outer` of a file) without the file's bytes `start..end` (relative to
/// `text`); unchanged when the range is empty or not on character boundaries.
fn cut(text: &str, start: usize, end: usize) -> Cow<'_, str> {
    let end = end.min(text.len());
    if start >= end || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("{}{}", &text[..start], &text[end..]))
}

/// The target file's symbols without hidden functions, classes, their lazy imports, and with
/// class method lists that no longer name hidden methods.
fn mask_symbols(repo: &Repository, symbols: &FileSymbols, hidden: &Hidden) -> FileSymbols {
    let hidden_fns: Vec<&Function> = hidden
        .functions
        .iter()
        .map(|id| repo.function(*id))
        .collect();
    let is_hidden_fn = |f: &Function| {
        hidden_fns
            .iter()
            .any(|h| h.qualname == f.qualname && h.span == f.span)
    };
    let hidden_names: Vec<&str> = hidden_fns.iter().map(|h| h.qualname.as_str()).collect();
    let hidden_classes: Vec<&Class> = hidden.classes.iter().map(|id| repo.class(*id)).collect();
    let mut out = symbols.clone();
    out.functions.retain(|f| !is_hidden_fn(f));
    out.classes.retain(|c| {
        !hidden_classes
            .iter()
            .any(|h| h.qualname == c.qualname && h.span == c.span)
    });
    // A method name stays in its class's list while a visible overload still carries it.
    let still_there: Vec<String> = out.functions.iter().map(|f| f.qualname.clone()).collect();
    for c in &mut out.classes {
        c.methods
            .retain(|m| !hidden_names.contains(&m.as_str()) || still_there.contains(m));
    }
    out.imports.retain(|i| {
        i.scope
            .as_deref()
            .is_none_or(|s| !hidden_names.contains(&s) || still_there.iter().any(|q| q == s))
    });
    out
}
