//! Putting a generated function into its file (`repohop generate --write`).
//!
//! [`prepare`] splices the function in place of the target's definition (or appends a new one),
//! under the docstring the user gave rather than the model's version of it, and checks the
//! result before anything is written: the generation was not cut off, the file
//! with it parses (no more syntax errors than the file had), and it defines the function where
//! it was put, with more than a docstring. [`apply`] then writes: never through a symbolic link
//! nor outside the repository, never a read-only file unless forced, keeping the file's mode and
//! owner, a `.repohop.bak` copy of the original first; on any failure nothing is left behind.

use super::ids::FnId;
use super::lang;
use super::model::{FileSymbols, Function, Lang};
use super::pystr::{leading_string_end, only_docstring};
use super::repository::Repository;
use crate::fsutil::{self, AtomicOptions};
use std::path::{Path, PathBuf};

/// Where the generated function goes.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// In place of this function's definition.
    Replace(FnId),
    /// A new function `name`, added to the parsed file `path` (repository-relative): Python at
    /// the end, Java before the closing brace of the file's last type.
    /// `docstring`: the one the user wrote for it (a Python literal, in place of the one the
    /// model's answer opens with; a Javadoc comment, before the method).
    Append {
        path: &'a str,
        name: &'a str,
        docstring: Option<&'a str>,
    },
}

#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Write a read-only file anyway (it stays read-only).
    pub force: bool,
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Written {
    pub path: PathBuf,
    /// The original file.
    pub backup: PathBuf,
}

/// Why nothing was written. Every message ends the same way: nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "the generation was cut off at the token limit (finish reason `length`), so the \
         function is incomplete; nothing written (raise --max-tokens)"
    )]
    Truncated,
    #[error(
        "{path}: with the generated function in it the file has {after} syntax error(s), \
         {before} before; nothing written"
    )]
    SyntaxErrors {
        path: String,
        before: usize,
        after: usize,
    },
    #[error("{path}: the generated code does not define {name} where it was put; nothing written")]
    NotDefined { path: String, name: String },
    #[error("{path}: the generated {name} has nothing but its docstring; nothing written")]
    OnlyDocstring { path: String, name: String },
    #[error("{path} has no class to add a method to; nothing written")]
    NoClass { path: String },
    #[error("{path} is not a parsed source file of the repository; nothing written")]
    NotSource { path: String },
    #[error(
        "{path}: the indexed location of {name} does not fit the file; nothing written \
         (index again)"
    )]
    BadSpan { path: String, name: String },
    #[error(
        "{} changed since it was indexed; nothing written (run again on the current file)",
        path.display()
    )]
    Changed { path: PathBuf },
    #[error(
        "{} is a symbolic link or leads outside the repository ({}); nothing written",
        path.display(),
        real.display()
    )]
    Outside { path: PathBuf, real: PathBuf },
    #[error(
        "{} is read-only; nothing written (--force writes it anyway and keeps its mode)",
        path.display()
    )]
    ReadOnly { path: PathBuf },
    /// The OS error is in the message, not chained, so `{:#}` prints it once.
    #[error("cannot {what} {}: {err}; nothing written", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
}

/// A checked edit of one file, ready for [`apply`].
#[derive(Debug, Clone)]
pub struct Edit {
    /// Repository-relative.
    pub rel: String,
    pub path: PathBuf,
    pub original: String,
    pub updated: String,
}

/// Splices and checks, then writes: [`prepare`] and [`apply`].
pub fn write_function(
    repo: &Repository,
    placement: Placement,
    function: &str,
    truncated: bool,
    opts: WriteOptions,
) -> Result<Written, WriteError> {
    let edit = prepare(repo, placement, function, truncated)?;
    apply(repo, &edit, opts)
}

/// The file with `function` put in place, checked; writes nothing. `truncated`: the generator
/// stopped at its token limit (finish reason `length`), so the function is incomplete: refused.
pub fn prepare(
    repo: &Repository,
    placement: Placement,
    function: &str,
    truncated: bool,
) -> Result<Edit, WriteError> {
    if truncated {
        return Err(WriteError::Truncated);
    }
    let (rel, name) = match placement {
        Placement::Replace(id) => {
            let f = repo.function(id);
            (f.path.as_str(), f.name.as_str())
        }
        Placement::Append { path, name, .. } => (path, name),
    };
    let (Some(file), Some(front_end)) = (repo.file_id(rel), lang::for_path(rel)) else {
        return Err(not_source(rel));
    };
    let Some(indexed) = repo.file_symbols(file) else {
        return Err(not_source(rel));
    };
    let path = inside(repo, rel)?;
    let original = unchanged_text(repo, rel, &path)?;
    let function = function.trim_end();

    // `at`, `len`: where the function is in the updated text.
    let (updated, at, mut len) = match placement {
        Placement::Replace(id) => {
            let f = repo.function(id);
            let bad_span = || WriteError::BadSpan {
                path: rel.into(),
                name: f.qualname.clone(),
            };
            let before = original.get(..f.span.start_byte).ok_or_else(bad_span)?;
            let after = original.get(f.span.end_byte..).ok_or_else(bad_span)?;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let head = &original[..line_start];
            (
                format!("{head}{function}{after}"),
                head.len(),
                function.len(),
            )
        }
        Placement::Append { .. } => match front_end.lang() {
            Lang::Python => {
                let head = original.trim_end();
                (
                    format!("{head}\n\n\n{function}\n"),
                    head.len() + 3,
                    function.len(),
                )
            }
            Lang::Java => {
                let Some(close) = original.rfind('}') else {
                    return Err(WriteError::NoClass { path: rel.into() });
                };
                let head = original[..close].trim_end();
                let doc = match placement {
                    Placement::Append {
                        docstring: Some(doc),
                        ..
                    } => javadoc_above(function, doc),
                    _ => String::new(),
                };
                (
                    format!("{head}\n\n{doc}{function}\n{}", &original[close..]),
                    head.len() + 2,
                    doc.len() + function.len(),
                )
            }
        },
    };

    let wanted = |f: &&Function| match placement {
        Placement::Replace(id) => f.qualname == repo.function(id).qualname,
        Placement::Append { name, .. } => f.name == name,
    };
    // The target's docstring is the user's specification: the model's restatement of it
    // (reflowed, reworded, its examples dropped) is not written over it. (A Java answer has
    // no Javadoc: the method's stays in the file, or the new one's is put above it.)
    let own = match placement {
        _ if front_end.lang() != Lang::Python => None,
        Placement::Replace(id) => repo.function(id).docstring_literal(&original),
        Placement::Append { docstring, .. } => docstring,
    };
    let updated = match own {
        Some(doc) => {
            let first = front_end.parse(rel, &indexed.module, &updated);
            match defined_at(&first, at, len, wanted) {
                Some(new) => {
                    let kept = with_docstring(&updated, new, doc);
                    len = (len + kept.len()).saturating_sub(updated.len());
                    kept
                }
                None => updated,
            }
        }
        None => updated,
    };

    let parsed = front_end.parse(rel, &indexed.module, &updated);
    if parsed.parse_errors > indexed.parse_errors {
        return Err(WriteError::SyntaxErrors {
            path: rel.into(),
            before: indexed.parse_errors,
            after: parsed.parse_errors,
        });
    }
    let Some(new) = defined_at(&parsed, at, len, wanted) else {
        return Err(WriteError::NotDefined {
            path: rel.into(),
            name: name.into(),
        });
    };
    if front_end.lang() == Lang::Python && new.docstring.is_some() {
        let body = updated.get(new.body.start_byte..new.body.end_byte);
        if body.is_some_and(only_docstring) {
            return Err(WriteError::OnlyDocstring {
                path: rel.into(),
                name: name.into(),
            });
        }
    }
    Ok(Edit {
        rel: rel.into(),
        path,
        original,
        updated,
    })
}

/// Writes a prepared edit: a backup of the original first, then the file, both atomically and
/// keeping the file's mode and owner. On failure neither is left behind.
pub fn apply(repo: &Repository, edit: &Edit, opts: WriteOptions) -> Result<Written, WriteError> {
    // Checked again: the file may have moved or changed since `prepare`.
    let path = inside(repo, &edit.rel)?;
    if unchanged_text(repo, &edit.rel, &path)? != edit.original {
        return Err(WriteError::Changed { path });
    }
    let meta = std::fs::metadata(&path).map_err(|err| WriteError::Io {
        what: "read",
        path: path.clone(),
        err,
    })?;
    if read_only(&meta) && !opts.force {
        return Err(WriteError::ReadOnly { path });
    }
    let keep = AtomicOptions {
        keep_metadata_of: Some(path.clone()),
        create_dirs: false,
    };
    let backup = backup_path(&path);
    fsutil::write_atomic_with(&backup, edit.original.as_bytes(), &keep).map_err(|err| {
        WriteError::Io {
            what: "write the backup",
            path: backup.clone(),
            err,
        }
    })?;
    if let Err(err) = fsutil::write_atomic_with(&path, edit.updated.as_bytes(), &keep) {
        // The file is as it was: a backup of it is only clutter.
        let _ = std::fs::remove_file(&backup);
        return Err(WriteError::Io {
            what: "replace",
            path,
            err,
        });
    }
    Ok(Written { path, backup })
}

/// `file.py` → `file.py.repohop.bak`.
pub fn backup_path(path: &Path) -> PathBuf {
    let ext = match path.extension().and_then(|e| e.to_str()) {
        Some(ext) => format!("{ext}.repohop.bak"),
        None => "repohop.bak".into(),
    };
    path.with_extension(ext)
}

fn not_source(rel: &str) -> WriteError {
    WriteError::NotSource { path: rel.into() }
}

/// The real path of a repository file, provided it is not itself a symbolic link and really
/// lies inside the repository (a folder on the way may be a link within it).
fn inside(repo: &Repository, rel: &str) -> Result<PathBuf, WriteError> {
    let path = repo.root().join(rel);
    let real = path.canonicalize().map_err(|err| WriteError::Io {
        what: "read",
        path: path.clone(),
        err,
    })?;
    let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
    if link || !real.starts_with(repo.root()) {
        return Err(WriteError::Outside { path, real });
    }
    Ok(real)
}

/// The file's text, provided it is still what was indexed.
fn unchanged_text(repo: &Repository, rel: &str, path: &Path) -> Result<String, WriteError> {
    let text = std::fs::read_to_string(path).map_err(|err| WriteError::Io {
        what: "read",
        path: path.to_path_buf(),
        err,
    })?;
    if repo.file_text(rel) != Some(text.as_str()) {
        return Err(WriteError::Changed {
            path: path.to_path_buf(),
        });
    }
    Ok(text)
}

#[cfg(unix)]
fn read_only(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o222 == 0
}

#[cfg(not(unix))]
fn read_only(meta: &std::fs::Metadata) -> bool {
    meta.permissions().readonly()
}

/// `text` with `doc` as the docstring of the function `f` defined in it: in place of the one
/// its body opens with, or on a line of its own before the first statement (not when the body
/// is on the header's line).
fn with_docstring(text: &str, f: &Function, doc: &str) -> String {
    let Some(body) = text.get(f.body.start_byte..f.body.end_byte) else {
        return text.to_string();
    };
    let start = f.body.start_byte + body.len() - body.trim_start().len();
    let (head, rest) = text.split_at(start);
    match leading_string_end(body) {
        Some(end) => format!("{head}{doc}{}", &text[f.body.start_byte + end..]),
        None if f.body.start_line == f.signature.end_line => text.to_string(),
        None => {
            let margin = &head[head.rfind('\n').map_or(0, |i| i + 1)..];
            format!("{head}{doc}\n{margin}{rest}")
        }
    }
}

/// A Javadoc comment on the lines above `function`, at its indentation.
fn javadoc_above(function: &str, doc: &str) -> String {
    let margin = &function[..function.len() - function.trim_start().len()];
    let mut out = String::new();
    for (i, line) in doc.lines().enumerate() {
        match i {
            0 => out.push_str(margin),
            _ => {
                out.push_str(margin);
                out.push(' ');
            }
        }
        out.push_str(line.trim());
        out.push('\n');
    }
    out
}

/// The function `wanted` accepts that starts within `len` bytes from `at`.
fn defined_at(
    symbols: &FileSymbols,
    at: usize,
    len: usize,
    wanted: impl Fn(&&Function) -> bool,
) -> Option<&Function> {
    symbols
        .functions
        .iter()
        .filter(wanted)
        .find(|f| f.span.start_byte >= at && f.span.start_byte < at + len.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{resolve_target, IndexOptions};

    #[test]
    fn a_failed_replacement_removes_the_backup_and_keeps_the_file() {
        let t = tempfile::tempdir().unwrap();
        let original = "def f(a):\n    return a\n";
        std::fs::write(t.path().join("m.py"), original).unwrap();
        let opts = IndexOptions {
            use_cache: false,
            ..IndexOptions::default()
        };
        let repo = Repository::open(t.path(), &opts).unwrap();
        let id = resolve_target(&repo, "m.f").unwrap();
        let edit = prepare(
            &repo,
            Placement::Replace(id),
            "def f(a):\n    return a + 1\n",
            false,
        )
        .unwrap();
        // The backup's rename is the first; the file's is the one that fails.
        fsutil::fail_next_rename_after(1);
        let err = apply(&repo, &edit, WriteOptions::default()).unwrap_err();
        assert!(matches!(err, WriteError::Io { .. }), "{err}");
        let mut names: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["m.py"]);
        assert_eq!(
            std::fs::read_to_string(t.path().join("m.py")).unwrap(),
            original
        );
    }
}
