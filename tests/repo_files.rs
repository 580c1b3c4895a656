//! What repohop reads and writes on the user's disk: never outside the repository, never
//! through a symbolic link, never a truncated or broken function, never a trusted cache entry
//! that does not fit its file; and the command line's answers to bad input.
#![cfg(unix)]

use repohop::llm::FinishReason;
use repohop::repo::write::{self, Placement, WriteError, WriteOptions};
use repohop::repo::{
    resolve_target, DiagnosticKind, IndexOptions, RepoError, Repository, TargetError,
};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn put(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    p
}

fn open(root: &Path) -> Repository {
    Repository::open(root, &IndexOptions::default()).expect("index")
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn repohop() -> Command {
    Command::new(env!("CARGO_BIN_EXE_repohop"))
}

const M_PY: &str =
    "def f(a):\n    \"\"\"Add one.\"\"\"\n    return a\n\n\ndef g():\n    return 2\n";
const NEW_F: &str = "def f(a):\n    \"\"\"Add one.\"\"\"\n    return a + 1\n";

/// A repository with `m.py` in `<tmp>/repo`, and the target `f`.
fn repo_with_m(t: &Path) -> (PathBuf, PathBuf) {
    let root = t.join("repo");
    let m = put(&root, "m.py", M_PY);
    (root, m)
}

fn replace_f(
    root: &Path,
    function: &str,
    finish: FinishReason,
    force: bool,
) -> Result<write::Written, WriteError> {
    let repo = open(root);
    let id = resolve_target(&repo, "m.f").unwrap();
    write::write_function(
        &repo,
        Placement::Replace(id),
        function,
        finish == FinishReason::Length,
        WriteOptions { force },
    )
}

/// Replaces `target` of the repository at `root` with `function`, as a finished generation.
fn replace(root: &Path, target: &str, function: &str) -> Result<write::Written, WriteError> {
    let repo = open(root);
    let id = resolve_target(&repo, target).unwrap();
    write::write_function(
        &repo,
        Placement::Replace(id),
        function,
        false,
        WriteOptions::default(),
    )
}

// 8. The walk never leaves the root.

#[test]
fn links_leading_out_of_the_repository_are_skipped_with_a_diagnostic() {
    let t = tempfile::tempdir().unwrap();
    put(t.path(), "outside/secret.py", "def leaked():\n    pass\n");
    let root = t.path().join("repo");
    put(&root, "pkg/m.py", "def f():\n    pass\n");
    symlink(t.path().join("outside"), root.join("ext")).unwrap();
    symlink(t.path().join("outside/secret.py"), root.join("leak.py")).unwrap();
    symlink("/etc", root.join("etc")).unwrap();
    // A link that stays inside is still followed.
    symlink(root.join("pkg"), root.join("alias")).unwrap();

    let repo = open(&root);
    let paths: Vec<&str> = repo.files().iter().map(|f| f.path.as_str()).collect();
    assert!(
        paths
            .iter()
            .all(|p| !p.starts_with("ext") && !p.starts_with("etc") && *p != "leak.py"),
        "{paths:?}"
    );
    assert!(paths.contains(&"alias/m.py"), "{paths:?}");
    assert!(repo.functions().all(|f| f.name != "leaked"));
    for link in ["ext", "leak.py", "etc"] {
        let d = repo
            .diagnostics()
            .iter()
            .find(|d| d.path == link)
            .unwrap_or_else(|| panic!("no diagnostic for {link}: {:?}", repo.diagnostics()));
        assert_eq!(d.kind, DiagnosticKind::LinkOutsideRoot, "{d}");
        assert!(d.what.contains("outside the repository"), "{d}");
        assert!(d.is_skip(), "{d}");
    }

    // Nor does the command line show what lies outside.
    for cmd in ["tree", "symbols"] {
        let out = repohop().arg(cmd).arg(&root).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("secret") && !stdout.contains("leaked") && !stdout.contains("passwd"),
            "{cmd}: {stdout}"
        );
    }
}

// 9. A `.repohop` link to a folder outside is refused, and so is such a link inside it.

#[test]
fn a_cache_folder_linked_outside_the_repository_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let elsewhere = t.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let (root, _) = repo_with_m(t.path());
    symlink(&elsewhere, root.join(".repohop")).unwrap();

    let err = Repository::open(&root, &IndexOptions::default()).unwrap_err();
    assert!(matches!(err, RepoError::CacheOutside { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&root.join(".repohop").display().to_string())
            && msg.contains("symbolic link")
            && msg.contains("--cache-dir"),
        "{msg}"
    );
    assert!(names(&elsewhere).is_empty(), "{:?}", names(&elsewhere));

    let out = repohop().arg("index").arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(".repohop is a symbolic link"));
    assert!(names(&elsewhere).is_empty());

    // A cache folder given on purpose is used.
    let opts = IndexOptions {
        cache_dir: Some(elsewhere.clone()),
        ..IndexOptions::default()
    };
    Repository::open(&root, &opts).unwrap();
    assert_eq!(names(&elsewhere), ["symbols.json"]);
}

#[test]
fn cache_entries_linked_outside_the_repository_are_refused() {
    // What repohop writes under `.repohop/`: the symbol cache, the function vectors, the slices.
    for entry in ["symbols.json", "vectors", "slices"] {
        let t = tempfile::tempdir().unwrap();
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let (root, _) = repo_with_m(t.path());
        fs::create_dir(root.join(".repohop")).unwrap();
        let link = root.join(".repohop").join(entry);
        if entry == "symbols.json" {
            let theirs = put(&elsewhere, "theirs.json", "not ours\n");
            symlink(&theirs, &link).unwrap();
        } else {
            symlink(&elsewhere, &link).unwrap();
        }

        let err = Repository::open(&root, &IndexOptions::default()).unwrap_err();
        assert!(
            matches!(err, RepoError::CacheOutside { .. }),
            "{entry}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&link.display().to_string()) && msg.contains("--cache-dir"),
            "{msg}"
        );
        let out = repohop().arg("index").arg(&root).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{entry}: {out:?}");
        let theirs = if entry == "symbols.json" {
            vec!["theirs.json".to_string()]
        } else {
            vec![]
        };
        assert_eq!(names(&elsewhere), theirs, "{entry}");
        if entry == "symbols.json" {
            assert_eq!(
                fs::read_to_string(elsewhere.join("theirs.json")).unwrap(),
                "not ours\n"
            );
        }
    }

    // A link that stays inside the repository is followed.
    let t = tempfile::tempdir().unwrap();
    let (root, _) = repo_with_m(t.path());
    fs::create_dir_all(root.join("store/vectors")).unwrap();
    fs::create_dir(root.join(".repohop")).unwrap();
    symlink(root.join("store/vectors"), root.join(".repohop/vectors")).unwrap();
    open(&root);
}

// 10. `--write`.

#[test]
fn write_replaces_the_function_and_keeps_a_backup_mode_and_nothing_else() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    fs::set_permissions(&m, fs::Permissions::from_mode(0o640)).unwrap();
    let w = replace_f(&root, NEW_F, FinishReason::Stop, false).unwrap();
    assert_eq!(w.path, m.canonicalize().unwrap());
    assert_eq!(
        fs::read_to_string(&m).unwrap(),
        M_PY.replace("return a\n", "return a + 1\n")
    );
    assert_eq!(fs::read_to_string(&w.backup).unwrap(), M_PY);
    assert_eq!(mode(&m), 0o640);
    let mut left = names(&root);
    left.retain(|n| n != ".repohop");
    assert_eq!(left, ["m.py", "m.py.repohop.bak"]);
}

#[test]
fn write_keeps_the_targets_own_docstring_whatever_the_model_made_of_it() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    let want = M_PY.replace("return a\n", "return a + 1\n");
    // Reflowed and reworded, quoted otherwise, or left out: the file's own docstring stays.
    for function in [
        "def f(a):\n    \"\"\"\n    Adds one to a.\n    \"\"\"\n    return a + 1\n",
        "def f(a):\n    r'''Add one.'''\n    return a + 1\n",
        "def f(a):\n    return a + 1\n",
    ] {
        fs::write(&m, M_PY).unwrap();
        replace_f(&root, function, FinishReason::Stop, false).unwrap();
        assert_eq!(fs::read_to_string(&m).unwrap(), want, "{function}");
    }

    // A method whose docstring holds an example the model's version dropped.
    let class = "class C:\n    def f(self, a):\n        \"\"\"Add one.\n\n        >>> C().f(1)\n        2\n        \"\"\"\n        return a\n";
    let c = put(&root, "c.py", class);
    let function = "    def f(self, a):\n        \"\"\"Add one.\"\"\"\n        return a + 1\n";
    replace(&root, "c.C.f", function).unwrap();
    assert_eq!(
        fs::read_to_string(&c).unwrap(),
        class.replace("return a\n", "return a + 1\n")
    );
}

#[test]
fn write_never_goes_through_a_planted_backup_link() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    let victim = put(t.path(), "victim.txt", "precious\n");
    symlink(&victim, root.join("m.py.repohop.bak")).unwrap();
    let err = replace_f(&root, NEW_F, FinishReason::Stop, false).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(fs::read_to_string(&m).unwrap(), M_PY);
    assert!(fs::symlink_metadata(root.join("m.py.repohop.bak"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn write_refuses_a_read_only_file_unless_forced_and_keeps_its_mode() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    fs::set_permissions(&m, fs::Permissions::from_mode(0o555)).unwrap();
    let err = replace_f(&root, NEW_F, FinishReason::Stop, false).unwrap_err();
    assert!(matches!(err, WriteError::ReadOnly { .. }), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(fs::read_to_string(&m).unwrap(), M_PY);
    assert!(!root.join("m.py.repohop.bak").exists());

    replace_f(&root, NEW_F, FinishReason::Stop, true).unwrap();
    assert!(fs::read_to_string(&m).unwrap().contains("return a + 1"));
    assert_eq!(mode(&m), 0o555);
}

#[test]
fn write_refuses_a_file_that_is_a_link_out_of_the_repository() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("repo");
    put(&root, "m.py", M_PY);
    let repo = open(&root);
    let id = resolve_target(&repo, "m.f").unwrap();
    // After indexing, the file is swapped for a link to an outside copy.
    let outside = put(t.path(), "outside.py", M_PY);
    fs::remove_file(root.join("m.py")).unwrap();
    symlink(&outside, root.join("m.py")).unwrap();
    let err = write::write_function(
        &repo,
        Placement::Replace(id),
        NEW_F,
        false,
        WriteOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, WriteError::Outside { .. }), "{err}");
    assert_eq!(fs::read_to_string(&outside).unwrap(), M_PY);
}

#[test]
fn write_refuses_a_truncated_generation() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    // What a generation cut off after the docstring looks like once assembled.
    let cut = "def f(a):\n    \"\"\"Add one.\"\"\"\n";
    let err = replace_f(&root, cut, FinishReason::Length, false).unwrap_err();
    assert!(matches!(err, WriteError::Truncated), "{err}");
    assert!(err.to_string().contains("--max-tokens"), "{err}");
    // Even when the generation says it stopped, a docstring alone is not a function body.
    let err = replace_f(&root, cut, FinishReason::Stop, false).unwrap_err();
    assert!(matches!(err, WriteError::OnlyDocstring { .. }), "{err}");
    assert_eq!(fs::read_to_string(&m).unwrap(), M_PY);
    assert!(!root.join("m.py.repohop.bak").exists());
}

#[test]
fn write_refuses_a_function_that_does_not_parse_or_is_not_the_target() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    let broken = "def f(a):\n    return (a +\n";
    let err = replace_f(&root, broken, FinishReason::Stop, false).unwrap_err();
    assert!(matches!(err, WriteError::SyntaxErrors { .. }), "{err}");
    let other = "def h(a):\n    return a + 1\n";
    let err = replace_f(&root, other, FinishReason::Stop, false).unwrap_err();
    assert!(matches!(err, WriteError::NotDefined { .. }), "{err}");
    assert!(err.to_string().contains("does not define f"), "{err}");
    assert_eq!(fs::read_to_string(&m).unwrap(), M_PY);
    assert!(!root.join("m.py.repohop.bak").exists());
}

#[test]
fn write_appends_a_new_function_and_checks_it_too() {
    let t = tempfile::tempdir().unwrap();
    let (root, m) = repo_with_m(t.path());
    let append = |function: &str, docstring: Option<&str>| {
        write::write_function(
            &open(&root),
            Placement::Append {
                path: "m.py",
                name: "h",
                docstring,
            },
            function,
            false,
            WriteOptions::default(),
        )
    };
    let err = append("def g2():\n    return 3\n", None).unwrap_err();
    assert!(matches!(err, WriteError::NotDefined { .. }), "{err}");
    append("def h():\n    return 3\n", None).unwrap();
    assert_eq!(
        fs::read_to_string(&m).unwrap(),
        format!("{M_PY}\n\ndef h():\n    return 3\n")
    );
    // The docstring the user wrote for it, not the model's version of it.
    fs::write(&m, M_PY).unwrap();
    let doc = "\"\"\"Three.\n\n    >>> h()\n    3\n    \"\"\"";
    append(
        "def h():\n    \"\"\"Return three.\"\"\"\n    return 3\n",
        Some(doc),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(&m).unwrap(),
        format!("{M_PY}\n\ndef h():\n    {doc}\n    return 3\n")
    );
}

#[test]
fn write_appends_a_java_method_under_the_javadoc_its_signature_gave() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("repo");
    let original = "class A {\n    int one() {\n        return 1;\n    }\n}\n";
    let a = put(&root, "A.java", original);
    let signature = "/**\n * Two.\n * @return 2\n */\nint two()";
    let target = repohop::generate::Target::from_signature("A.java", signature).unwrap();
    write::write_function(
        &open(&root),
        Placement::Append {
            path: "A.java",
            name: "two",
            docstring: target.docstring_literal.as_deref(),
        },
        "    int two() {\n        return 2;\n    }\n",
        false,
        WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(&a).unwrap(),
        original.replace(
            "    }\n}",
            "    }\n\n    /**\n     * Two.\n     * @return 2\n     */\n    int two() {\n        return 2;\n    }\n}"
        )
    );
}

// 11. Cache entries whose spans do not fit their file.

fn corrupt_cache(root: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let cache = root.join(".repohop/symbols.json");
    let text = fs::read_to_string(&cache).unwrap();
    let (head, body) = text.split_once('\n').unwrap();
    let mut entries: serde_json::Value = serde_json::from_str(body).unwrap();
    edit(&mut entries);
    fs::write(&cache, format!("{head}\n{entries}")).unwrap();
}

#[test]
fn a_cache_entry_with_spans_outside_its_file_is_reparsed_with_a_warning() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("repo");
    let text = "# é\ndef f(a):\n    \"\"\"Add one.\"\"\"\n    return a\n";
    let m = put(&root, "m.py", text);
    open(&root);
    let cases: [(&str, serde_json::Value); 3] = [
        ("end_byte", serde_json::json!(10_000)),
        // Inside the two bytes of `é`.
        ("start_byte", serde_json::json!(3)),
        ("end_line", serde_json::json!(999)),
    ];
    for (field, value) in cases {
        corrupt_cache(&root, |e| {
            e["m.py"]["symbols"]["functions"][0]["span"][field] = value.clone();
        });
        let repo = open(&root);
        let d = repo
            .diagnostics()
            .iter()
            .find(|d| d.path == "m.py" && d.kind == DiagnosticKind::Cache)
            .unwrap_or_else(|| panic!("{field}: {:?}", repo.diagnostics()));
        assert!(d.what.contains("re-parsed"), "{d}");
        assert_eq!(repo.stats().parsed, 1, "{field}");
        let id = resolve_target(&repo, "m.f").unwrap();
        assert_eq!(
            repo.function_code(id),
            "def f(a):\n    \"\"\"Add one.\"\"\"\n    return a"
        );
        // The repaired cache is trusted again.
        let again = open(&root);
        assert_eq!((again.stats().parsed, again.stats().cached), (0, 1));
        assert!(again.diagnostics().is_empty(), "{:?}", again.diagnostics());
    }
    // And a write from the re-parsed symbols lands where the function is.
    corrupt_cache(&root, |e| {
        e["m.py"]["symbols"]["functions"][0]["span"]["start_byte"] = serde_json::json!(9_999);
    });
    replace(&root, "m.f", NEW_F).unwrap();
    assert_eq!(
        fs::read_to_string(&m).unwrap(),
        text.replace("return a\n", "return a + 1\n")
    );
}

// 12. Small ones.

#[test]
fn an_unreadable_repository_root_is_an_error_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("locked");
    put(&root, "m.py", M_PY);
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads any folder: run as nobody then.
    let as_root = unsafe { libc::geteuid() } == 0;
    let run = |exe: &Path| {
        let mut cmd = Command::new(exe);
        cmd.arg("index").arg(&root);
        if as_root {
            use std::os::unix::process::CommandExt;
            cmd.uid(65534).gid(65534);
        }
        cmd.output()
    };
    let exe = Path::new(env!("CARGO_BIN_EXE_repohop"));
    let out = match run(exe) {
        Ok(out) => out,
        // The build folder is private to root: a copy nobody can run.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let copy = t.path().join("repohop");
            fs::copy(exe, &copy).unwrap();
            fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
            run(&copy).unwrap()
        }
        Err(e) => panic!("{e}"),
    };
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains(&format!("cannot read repository path {}", root.display())),
        "{stderr}"
    );
    if !as_root {
        // The library says the same.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o000)).unwrap();
        let err = Repository::open(&root, &IndexOptions::default()).unwrap_err();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(err, RepoError::Io { .. }), "{err}");
    }
}

#[test]
fn a_line_where_no_definition_starts_lists_where_they_do() {
    let t = tempfile::tempdir().unwrap();
    let (root, _) = repo_with_m(t.path());
    let repo = open(&root);
    let err = resolve_target(&repo, "m.py::f@999").unwrap_err();
    assert!(
        matches!(err, TargetError::NotAtLine { line: 999, .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("no definition of m.py::f starts at line 999") && msg.contains("m.f (m.py:1)"),
        "{msg}"
    );
    assert!(!msg.contains("no function or method of that name"), "{msg}");
    // A name that does not exist at all is still reported as such.
    let err = resolve_target(&repo, "m.py::nope@1").unwrap_err();
    assert!(matches!(err, TargetError::NotFound { .. }), "{err}");
}

#[test]
fn a_bad_gguf_is_one_message_without_a_backtrace() {
    let t = tempfile::tempdir().unwrap();
    let gguf = t.path().join("bad.gguf");
    // The GGUF magic and a version no reader knows.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&99u32.to_le_bytes());
    bytes.extend_from_slice(&[0xff; 64]);
    fs::write(&gguf, bytes).unwrap();
    let out = repohop()
        .args(["llm", "hello", "--model"])
        .arg(&gguf)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.lines().count() <= 3 && !stderr.contains("backtrace"),
        "{stderr}"
    );
    // The model is named once: the load error says which file, nothing repeats it.
    assert_eq!(stderr.matches("bad.gguf").count(), 1, "{stderr}");
}

// 13. A closed output pipe.

#[test]
fn a_closed_output_pipe_ends_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("repo");
    let mut src = String::new();
    for i in 0..4000 {
        src.push_str(&format!("def function_number_{i}(a):\n    return a\n\n"));
    }
    put(&root, "big.py", &src);
    // Index first, so that the command below only prints.
    open(&root);
    let mut child = repohop()
        .arg("symbols")
        .arg(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn a_symbol_cache_file_planted_as_a_link_is_neither_read_nor_written() {
    let t = tempfile::tempdir().unwrap();
    let (root, _) = repo_with_m(t.path());
    // A valid cache elsewhere, then the cache folder's `symbols.json` made a link to it.
    let elsewhere = t.path().join("elsewhere");
    let opts = |dir: &Path| IndexOptions {
        cache_dir: Some(dir.to_path_buf()),
        ..IndexOptions::default()
    };
    Repository::open(&root, &opts(&elsewhere)).unwrap();
    let theirs = elsewhere.join("symbols.json");
    let before = fs::read(&theirs).unwrap();
    let cache = t.path().join("cache");
    fs::create_dir(&cache).unwrap();
    symlink(&theirs, cache.join("symbols.json")).unwrap();
    put(&root, "n.py", "def g():\n    return 2\n");

    let repo = Repository::open(&root, &opts(&cache)).unwrap();
    let said: Vec<&str> = repo.diagnostics().iter().map(|d| d.what.as_str()).collect();
    assert!(
        said.iter()
            .any(|w| w.contains("symbolic link") && w.contains("read")),
        "{said:?}"
    );
    assert_eq!(repo.stats().cached, 0, "nothing taken from the linked file");
    assert_eq!(fs::read(&theirs).unwrap(), before);
}
