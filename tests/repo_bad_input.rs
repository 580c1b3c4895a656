//! Each bad input of the repository model: none panics, each is reported naming the file and
//! what happened.

use repohop::repo::{
    resolve_target, DiagnosticKind, IndexOptions, RepoError, Repository, TargetError,
};
use std::fs;
use std::path::Path;

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, bytes).unwrap();
}

fn open(root: &Path) -> Repository {
    Repository::open(root, &IndexOptions::default()).expect("index")
}

fn diag<'a>(repo: &'a Repository, path: &str, kind: DiagnosticKind) -> &'a str {
    let found = repo
        .diagnostics()
        .iter()
        .find(|d| d.path == path && d.kind == kind);
    match found {
        Some(d) => &d.what,
        None => panic!(
            "no {kind:?} diagnostic for {path}: {:?}",
            repo.diagnostics()
        ),
    }
}

#[test]
fn syntax_errors_keep_what_parsed_and_are_counted() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "pkg/broken.py",
        b"def good(a):\n    return a\n\ndef bad(:\n    pass\n\ndef also_good():\n    return 2\n",
    );
    let repo = open(t.path());
    let names: Vec<&str> = repo.functions().map(|f| f.qualname.as_str()).collect();
    assert!(names.contains(&"pkg.broken.good"), "{names:?}");
    assert!(names.contains(&"pkg.broken.also_good"), "{names:?}");
    assert_eq!(repo.stats().files_with_parse_errors, 1);
    let what = diag(&repo, "pkg/broken.py", DiagnosticKind::SyntaxErrors);
    assert!(what.contains("syntax error"), "{what}");
}

#[test]
fn non_utf8_is_decoded_lossily_parsed_and_reported() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "latin.py",
        b"# caf\xe9\ndef f():\n    return '\xff'\n",
    );
    let repo = open(t.path());
    assert_eq!(
        repo.functions()
            .map(|f| f.qualname.as_str())
            .collect::<Vec<_>>(),
        ["latin.f"]
    );
    let what = diag(&repo, "latin.py", DiagnosticKind::NonUtf8);
    assert!(what.contains("not valid UTF-8"), "{what}");
    assert!(repo.file_text("latin.py").unwrap().contains('\u{fffd}'));
}

#[test]
fn empty_file_is_indexed_with_no_symbols_and_reported() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "empty.py", b"");
    write(t.path(), "pkg/__init__.py", b"");
    let repo = open(t.path());
    assert_eq!(repo.file_text("empty.py"), Some(""));
    assert_eq!(repo.stats().functions, 0);
    assert_eq!(
        diag(&repo, "empty.py", DiagnosticKind::Empty),
        "empty file: no symbols"
    );
    // An empty __init__.py is normal and not worth a line.
    assert!(repo
        .diagnostics()
        .iter()
        .all(|d| d.path != "pkg/__init__.py"));
}

#[test]
fn fifty_megabyte_file_is_skipped_by_size() {
    let t = tempfile::tempdir().unwrap();
    let f = fs::File::create(t.path().join("huge.py")).unwrap();
    f.set_len(50 * 1024 * 1024).unwrap();
    write(t.path(), "small.py", b"def f():\n    pass\n");
    let repo = open(t.path());
    let what = diag(&repo, "huge.py", DiagnosticKind::TooLarge);
    assert!(
        what.contains("52428800 bytes") && what.contains("1048576"),
        "{what}"
    );
    assert!(repo.file_id("huge.py").is_none());
    assert_eq!(repo.stats().skipped, 1);
    assert_eq!(repo.stats().functions, 1);
    // A larger limit lets it through (and it is binary then: all NUL bytes).
    let opts = IndexOptions {
        max_file_size: 60 << 20,
        use_cache: false,
        ..Default::default()
    };
    let repo = Repository::open(t.path(), &opts).unwrap();
    diag(&repo, "huge.py", DiagnosticKind::Binary);
}

#[test]
fn binary_file_with_py_name_is_skipped() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "blob.py",
        b"\x7fELF\x02\x01\x01\x00\x00\x00def f(): pass\n",
    );
    write(
        t.path(),
        "image.png",
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR",
    );
    write(t.path(), "notes.txt", b"plain text\n");
    let repo = open(t.path());
    assert!(diag(&repo, "blob.py", DiagnosticKind::Binary).contains("binary file"));
    diag(&repo, "image.png", DiagnosticKind::Binary);
    assert!(repo.file_id("blob.py").is_none());
    assert!(
        repo.file_id("notes.txt").is_some(),
        "text files are listed for the tree"
    );
    assert_eq!(repo.stats().functions, 0);
}

#[cfg(unix)]
#[test]
fn symlink_loop_is_recorded_not_fatal() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "a/m.py", b"def f():\n    pass\n");
    std::os::unix::fs::symlink(t.path().join("a"), t.path().join("a/loop")).unwrap();
    let repo = open(t.path());
    let what = diag(&repo, "a/loop", DiagnosticKind::SymlinkLoop);
    assert!(
        what.contains("symbolic link loop") && what.contains("leads back to a"),
        "{what}"
    );
    assert_eq!(
        repo.functions()
            .map(|f| f.qualname.as_str())
            .collect::<Vec<_>>(),
        ["a.m.f"]
    );
}

#[test]
fn repository_path_missing_or_a_file() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("nope");
    let err = Repository::open(&missing, &IndexOptions::default()).unwrap_err();
    assert!(matches!(err, RepoError::Missing(_)));
    assert_eq!(
        err.to_string(),
        format!("repository path {} does not exist", missing.display())
    );
    write(t.path(), "file.py", b"x = 1\n");
    let file = t.path().join("file.py");
    let err = Repository::open(&file, &IndexOptions::default()).unwrap_err();
    assert!(matches!(err, RepoError::NotADirectory(_)));
    assert!(
        err.to_string().contains("file.py is a file, not a folder"),
        "{err}"
    );
}

#[test]
fn target_missing_lists_close_candidates() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "pkg/__init__.py", b"");
    write(
        t.path(),
        "pkg/text.py",
        b"def slugify(s):\n    return s\n\ndef split(s):\n    return s\n",
    );
    let repo = open(t.path());
    let err = resolve_target(&repo, "pkg.text.slugfy").unwrap_err();
    let TargetError::NotFound { candidates, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(candidates[0], "pkg.text.slugify (pkg/text.py:1)");
    assert!(
        err.to_string()
            .starts_with("target pkg.text.slugfy: no function or method"),
        "{err}"
    );
    let err = resolve_target(&repo, "pkg/txt.py::slugify").unwrap_err();
    assert!(matches!(err, TargetError::FileNotFound { .. }), "{err}");
    assert!(
        err.to_string().contains("pkg/txt.py is not in the index"),
        "{err}"
    );
}

#[test]
fn ambiguous_target_lists_candidates_with_locations() {
    let t = tempfile::tempdir().unwrap();
    // `dup.py` and `dup/__init__.py` are both module `dup`.
    write(t.path(), "dup.py", b"def f():\n    return 1\n");
    write(t.path(), "dup/__init__.py", b"\n\ndef f():\n    return 2\n");
    let repo = open(t.path());
    let err = resolve_target(&repo, "dup.f").unwrap_err();
    let TargetError::Ambiguous { candidates, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        candidates,
        &["dup.f (dup.py:1)", "dup.f (dup/__init__.py:3)"]
    );
    assert!(err.to_string().contains("add @LINE"), "{err}");
    let id = resolve_target(&repo, "dup.f@3").unwrap();
    assert_eq!(repo.function(id).path, "dup/__init__.py");
}

#[test]
fn a_name_defined_twice_in_one_file_is_its_last_definition() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "m.py",
        b"class C:\n    @property\n    def p(self):\n        return 1\n\n    @p.setter\n    def p(self, v):\n        pass\n",
    );
    let repo = open(t.path());
    assert_eq!(
        repo.function(resolve_target(&repo, "m.C.p").unwrap())
            .span
            .start_line,
        6
    );
    assert_eq!(
        repo.function(resolve_target(&repo, "m.py::C.p@2").unwrap())
            .span
            .start_line,
        2
    );
}
