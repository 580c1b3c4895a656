//! Walking a repository: which files exist, which are parsed, and what was skipped and why.
//!
//! Honours `.gitignore`, `.ignore` and `.repohopignore` (inside a git repository or not), skips
//! hidden files and folders (`.git`, `.repohop`), files over a size limit, binary files and
//! symbolic-link loops. Symbolic links are followed only while they stay inside the repository:
//! one that leads outside it is skipped. Every skip becomes a [`Diagnostic`].

use super::diagnostic::{Diagnostic, DiagnosticKind};
use super::lang;
use super::model::Lang;
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Default size limit: larger files are generated or vendored far more often than hand-written.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 1 << 20;

/// How many leading bytes are searched for a NUL byte to call a file binary (as git does).
const BINARY_PROBE: usize = 8 << 10;

/// A file the walk kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkedFile {
    /// Repository-relative, `/`-separated.
    pub path: String,
    pub abs: PathBuf,
    pub size: u64,
    /// `None`: listed in the tree but not parsed.
    pub lang: Option<Lang>,
}

#[derive(Debug, Default)]
pub struct Walk {
    /// Sorted by path.
    pub files: Vec<WalkedFile>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Lists the files under `root`. `skip_dirs` are absolute folders left out entirely (a cache
/// folder inside the repository).
pub fn walk(root: &Path, max_file_size: u64, skip_dirs: &[PathBuf]) -> Walk {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        // The repository root is the boundary: ignore files above it do not apply.
        .parents(false)
        .require_git(false)
        .follow_links(true)
        .add_custom_ignore_filename(".repohopignore");
    let skip: Vec<PathBuf> = skip_dirs.to_vec();
    // Links are followed inside the repository only: one that leads outside it is skipped, and
    // so is everything under it.
    let real_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let outside = Arc::new(Mutex::new(Vec::new()));
    let found = Arc::clone(&outside);
    let base = root.to_path_buf();
    builder.filter_entry(move |e| {
        if skip.iter().any(|d| e.path() == d) {
            return false;
        }
        if e.depth() == 0 || !e.path_is_symlink() {
            return true;
        }
        match e.path().canonicalize() {
            Ok(real) if !real.starts_with(&real_root) => {
                let target = std::fs::read_link(e.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| real.display().to_string());
                if let Ok(mut found) = found.lock() {
                    found.push(Diagnostic::new(
                        relative(&base, e.path()),
                        DiagnosticKind::LinkOutsideRoot,
                        format!(
                            "skipped: symbolic link to {target}, outside the repository (only \
                             links within it are followed)"
                        ),
                    ));
                }
                false
            }
            // Inside, or dangling (the walk reports that itself).
            _ => true,
        }
    });

    let mut out = Walk::default();
    for item in builder.build() {
        let entry = match item {
            Ok(entry) => entry,
            Err(err) => {
                out.diagnostics.push(walk_error(root, &err));
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let abs = entry.path().to_path_buf();
        let path = relative(root, &abs);
        let size = match entry.metadata() {
            Ok(m) => m.len(),
            Err(err) => {
                out.diagnostics.push(Diagnostic::new(
                    path,
                    DiagnosticKind::Unreadable,
                    format!("skipped: cannot read metadata ({err})"),
                ));
                continue;
            }
        };
        if size > max_file_size {
            out.diagnostics.push(Diagnostic::new(
                path,
                DiagnosticKind::TooLarge,
                format!(
                    "skipped: {size} bytes is over the size limit of {max_file_size} bytes \
                     (raise it with --max-file-size)"
                ),
            ));
            continue;
        }
        let lang = lang::for_path(&path).map(|l| l.lang());
        out.files.push(WalkedFile {
            path,
            abs,
            size,
            lang,
        });
    }
    if let Ok(mut found) = outside.lock() {
        out.diagnostics.append(&mut found);
    }
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    out.diagnostics.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn relative(root: &Path, abs: &Path) -> String {
    let rel = abs.strip_prefix(root).unwrap_or(abs);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Turns a walk error into a diagnostic naming the path it concerns.
fn walk_error(root: &Path, err: &ignore::Error) -> Diagnostic {
    match err {
        ignore::Error::Loop { ancestor, child } => Diagnostic::new(
            relative(root, child),
            DiagnosticKind::SymlinkLoop,
            format!(
                "skipped: symbolic link loop (leads back to {})",
                display_rel(root, ancestor)
            ),
        ),
        ignore::Error::WithPath { path, err: inner } => {
            let mut d = walk_error(root, inner);
            if d.path.is_empty() {
                d.path = relative(root, path);
            }
            if d.path.is_empty() {
                // The root itself.
                d.path = root.display().to_string();
            }
            d
        }
        ignore::Error::WithDepth { err: inner, .. }
        | ignore::Error::WithLineNumber { err: inner, .. } => walk_error(root, inner),
        other => Diagnostic::new(
            String::new(),
            DiagnosticKind::Unreadable,
            format!("skipped: {other}"),
        ),
    }
}

fn display_rel(root: &Path, p: &Path) -> String {
    let rel = relative(root, p);
    if rel.is_empty() {
        "the repository root".to_string()
    } else {
        rel
    }
}

/// A source file's contents, decoded.
#[derive(Debug)]
pub struct Source {
    pub bytes: Vec<u8>,
    pub text: String,
    /// Some bytes were not UTF-8 and were replaced by U+FFFD.
    pub lossy: bool,
}

/// Reads a file the walk kept. Binary files (NUL in the first 8 KiB) are refused with a
/// diagnostic, whatever their extension.
pub fn read_source(file: &WalkedFile) -> Result<Source, Diagnostic> {
    let bytes = std::fs::read(&file.abs).map_err(|err| {
        Diagnostic::new(
            &file.path,
            DiagnosticKind::Unreadable,
            format!("skipped: cannot read ({err})"),
        )
    })?;
    if is_binary(&bytes) {
        return Err(binary(&file.path));
    }
    let (text, lossy) = match std::str::from_utf8(&bytes) {
        Ok(text) => (text.to_string(), false),
        Err(_) => (String::from_utf8_lossy(&bytes).into_owned(), true),
    };
    Ok(Source { bytes, text, lossy })
}

/// Whether a file that is not parsed is binary; reads only its first 8 KiB.
pub fn probe_binary(file: &WalkedFile) -> Result<bool, Diagnostic> {
    let mut buf = vec![0u8; BINARY_PROBE];
    let mut f = std::fs::File::open(&file.abs).map_err(|err| {
        Diagnostic::new(
            &file.path,
            DiagnosticKind::Unreadable,
            format!("skipped: cannot read ({err})"),
        )
    })?;
    let mut filled = 0;
    loop {
        match f.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if filled == buf.len() {
                    break;
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => {
                return Err(Diagnostic::new(
                    &file.path,
                    DiagnosticKind::Unreadable,
                    format!("skipped: cannot read ({err})"),
                ))
            }
        }
    }
    Ok(is_binary(&buf[..filled]))
}

pub fn binary(path: &str) -> Diagnostic {
    Diagnostic::new(
        path,
        DiagnosticKind::Binary,
        "skipped: binary file (NUL bytes in the first 8 KiB)",
    )
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_PROBE)].contains(&0)
}

/// Python dotted module name of a repository-relative `.py` path.
///
/// `a/b/c.py` → `a.b.c`, `a/b/__init__.py` → `a.b`. Folders above the outermost package (the
/// nearest chain of folders holding an `__init__.py`) are dropped, so a src-layout
/// `src/pkg/mod.py` becomes `pkg.mod`. A file outside any package keeps its whole path, less a
/// leading `src/`. `package_dirs` holds the repository-relative folders that have `__init__.py`
/// (the root is `""`).
pub fn python_module(path: &str, package_dirs: &HashSet<String>) -> String {
    let stem = path
        .strip_suffix(".py")
        .or_else(|| path.strip_suffix(".pyi"))
        .unwrap_or(path);
    let parts: Vec<&str> = stem.split('/').collect();
    let dirs = &parts[..parts.len() - 1];
    // Walk up from the file's own folder while folders are packages.
    let mut first_pkg = dirs.len();
    while first_pkg > 0 && package_dirs.contains(&dirs[..first_pkg].join("/")) {
        first_pkg -= 1;
    }
    let keep_from = if first_pkg < dirs.len() {
        first_pkg
    } else if dirs.first() == Some(&"src") {
        1
    } else {
        0
    };
    let mut kept = &parts[keep_from..];
    if kept.last() == Some(&"__init__") {
        kept = &kept[..kept.len() - 1];
    }
    kept.join(".")
}

/// The folders holding an `__init__.py`, from a list of repository-relative paths.
pub fn package_dirs<'a>(paths: impl IntoIterator<Item = &'a str>) -> HashSet<String> {
    paths
        .into_iter()
        .filter_map(|p| {
            if p == "__init__.py" {
                Some(String::new())
            } else {
                p.strip_suffix("/__init__.py").map(str::to_string)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk(dirs: &[&str]) -> HashSet<String> {
        dirs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn module_names() {
        let p = pk(&["a", "a/b", "src/pkg", "src/pkg/sub"]);
        assert_eq!(python_module("a/b/c.py", &p), "a.b.c");
        assert_eq!(python_module("a/b/__init__.py", &p), "a.b");
        assert_eq!(python_module("src/pkg/mod.py", &p), "pkg.mod");
        assert_eq!(python_module("src/pkg/sub/__init__.py", &p), "pkg.sub");
        assert_eq!(python_module("src/tool.py", &p), "tool");
        assert_eq!(python_module("setup.py", &p), "setup");
        assert_eq!(python_module("scripts/run.py", &p), "scripts.run");
        // A package nested in a non-package folder: the folder is dropped.
        let p = pk(&["boltons"]);
        assert_eq!(python_module("boltons/strutils.py", &p), "boltons.strutils");
        assert_eq!(
            python_module("x/boltons/strutils.py", &pk(&["x/boltons"])),
            "boltons.strutils"
        );
    }

    #[test]
    fn package_dirs_from_paths() {
        let d = package_dirs(["__init__.py", "a/__init__.py", "a/b.py"]);
        assert_eq!(d, pk(&["", "a"]));
    }
}
