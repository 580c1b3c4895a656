//! The repository model on small repositories: name resolution, the masked view, the tree budget
//! and the symbol cache.

use repohop::repo::mask::MaskedView;
use repohop::repo::{
    resolve_target, Def, DiagnosticKind, FnId, ImportTarget, IndexOptions, Repository, TreeOptions,
    Unresolved,
};
use std::fs;
use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn open(root: &Path) -> Repository {
    Repository::open(root, &IndexOptions::default()).expect("index")
}

fn func(repo: &Repository, qualname: &str) -> FnId {
    resolve_target(repo, qualname).unwrap_or_else(|e| panic!("{e}"))
}

/// Qualified names (and start lines) a name resolves to from inside `from`.
fn resolve(repo: &Repository, from: &str, name: &str) -> Result<Vec<String>, Unresolved> {
    let defs = repo.resolver().resolve_name(func(repo, from), name)?;
    Ok(defs
        .into_iter()
        .map(|d| format!("{}@{}", repo.qualname(d), repo.location(d)))
        .collect())
}

const FS_INIT: &str = "from .path import normpath as norm\n";
const FS_PATH: &str = "\
import os


def normpath(p):
    return os.path.normpath(p)


def joinpath(a, b):
    return normpath(a + '/' + b)
";
const FS_BASE: &str = "\
class Base(object):
    def close(self):
        return None

    def open(self, path):
        return path
";
const FS_OSFS: &str = "\
from .base import Base
from . import path as fspath
from ..util import helper


class OSFS(Base):
    def __init__(self, root):
        self.root = root

    def open(self, path):
        p = fspath.normpath(path)
        self.check(p)
        self.close()
        return helper(p)

    def check(self, p):
        from .path import joinpath
        import json
        return joinpath(self.root, json.dumps(p))
";
const UTIL: &str = "\
def helper(x):
    return x


def other():
    return helper(1)
";

fn pyproj(root: &Path) {
    write(root, "src/proj/__init__.py", "");
    write(root, "src/proj/util.py", UTIL);
    write(root, "src/proj/fs/__init__.py", FS_INIT);
    write(root, "src/proj/fs/path.py", FS_PATH);
    write(root, "src/proj/fs/base.py", FS_BASE);
    write(root, "src/proj/fs/osfs.py", FS_OSFS);
    write(
        root,
        "tests/test_osfs.py",
        "from proj.fs.osfs import OSFS\n\ndef test_open():\n    assert OSFS('/').open('a')\n",
    );
    write(
        root,
        "src/proj/fs/conftest.py",
        "def fixture():\n    return 1\n",
    );
}

#[test]
fn python_resolution_is_import_aware() {
    let t = tempfile::tempdir().unwrap();
    pyproj(t.path());
    let repo = open(t.path());
    // src-layout: `src/` is not part of module names.
    assert_eq!(
        repo.file_symbols(repo.file_id("src/proj/fs/osfs.py").unwrap())
            .unwrap()
            .module,
        "proj.fs.osfs"
    );
    let open_m = "proj.fs.osfs.OSFS.open";
    assert_eq!(
        resolve(&repo, open_m, "fspath.normpath").unwrap(),
        ["proj.fs.path.normpath@src/proj/fs/path.py:4"]
    );
    assert_eq!(
        resolve(&repo, open_m, "self.check").unwrap(),
        ["proj.fs.osfs.OSFS.check@src/proj/fs/osfs.py:16"]
    );
    // Inherited through `from .base import Base`.
    assert_eq!(
        resolve(&repo, open_m, "self.close").unwrap(),
        ["proj.fs.base.Base.close@src/proj/fs/base.py:2"]
    );
    // `from ..util import helper`.
    assert_eq!(
        resolve(&repo, open_m, "helper").unwrap(),
        ["proj.util.helper@src/proj/util.py:1"]
    );
    // Lazy import inside `check`, and only there.
    let check = "proj.fs.osfs.OSFS.check";
    assert_eq!(
        resolve(&repo, check, "joinpath").unwrap(),
        ["proj.fs.path.joinpath@src/proj/fs/path.py:8"]
    );
    assert!(
        matches!(resolve(&repo, check, "json.dumps"), Err(Unresolved::External { module, .. }) if module == "json")
    );
    // Outside `check` the lazy import is not in scope; the unique simple name still resolves.
    assert_eq!(
        resolve(&repo, open_m, "joinpath").unwrap(),
        ["proj.fs.path.joinpath@src/proj/fs/path.py:8"]
    );
    // Same file first.
    assert_eq!(
        resolve(&repo, "proj.fs.path.joinpath", "normpath").unwrap(),
        ["proj.fs.path.normpath@src/proj/fs/path.py:4"]
    );
    // Re-export through the package `__init__` with an alias.
    assert_eq!(
        resolve(&repo, open_m, "proj.fs.norm").unwrap(),
        ["proj.fs.path.normpath@src/proj/fs/path.py:4"]
    );
    // Class.method, and a method found in a base class.
    assert_eq!(
        resolve(&repo, "proj.util.other", "proj.fs.osfs.OSFS.close").unwrap(),
        ["proj.fs.base.Base.close@src/proj/fs/base.py:2"]
    );
    // Builtins and stdlib are external; unknown names are not found; the module itself is no def.
    assert!(
        matches!(resolve(&repo, open_m, "len"), Err(Unresolved::External { module, .. }) if module == "builtins")
    );
    assert!(matches!(
        resolve(&repo, "proj.fs.path.normpath", "os.path.normpath"),
        Err(Unresolved::External { .. })
    ));
    assert!(matches!(
        resolve(&repo, open_m, "nonexistent_fn"),
        Err(Unresolved::NotFound { .. })
    ));
    assert!(matches!(
        resolve(&repo, open_m, "fspath"),
        Err(Unresolved::Module { .. })
    ));
    assert!(matches!(
        resolve(&repo, open_m, "self.root.strip"),
        Err(Unresolved::NotFound { .. })
    ));

    // Import resolution, file by file.
    let osfs = repo.file_id("src/proj/fs/osfs.py").unwrap();
    let r = repo.resolver();
    let targets: Vec<String> = r
        .imports_of(osfs)
        .into_iter()
        .map(|(i, t)| match t {
            Ok(ImportTarget::Module { files }) => {
                format!("{}: module {}", i.line, repo.file(files[0]).path)
            }
            Ok(ImportTarget::Defs { defs }) => format!("{}: {}", i.line, repo.qualname(defs[0])),
            Ok(ImportTarget::External { module }) => format!("{}: external {module}", i.line),
            Err(e) => format!("{}: {e}", i.line),
        })
        .collect();
    assert_eq!(
        targets,
        [
            "1: proj.fs.base.Base",
            "2: module src/proj/fs/path.py",
            "3: proj.util.helper",
            "17: proj.fs.path.joinpath",
            "18: external json",
        ]
    );
}

#[test]
fn ambiguous_simple_names_are_reported_with_candidates() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "a.py", "def run():\n    pass\n");
    write(t.path(), "b.py", "def run():\n    pass\n");
    write(t.path(), "c.py", "def main():\n    run()\n");
    let repo = open(t.path());
    let Err(Unresolved::Ambiguous { candidates, .. }) = resolve(&repo, "c.main", "run") else {
        panic!("expected ambiguous")
    };
    let mut names: Vec<&str> = candidates.iter().map(|d| repo.qualname(*d)).collect();
    names.sort();
    assert_eq!(names, ["a.run", "b.run"]);
}

#[test]
fn a_module_path_is_never_guessed_as_an_unrelated_method() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "pkg/__init__.py", "");
    write(
        t.path(),
        "pkg/strutils.py",
        "def slugify(text):\n    return text\n",
    );
    write(
        t.path(),
        "pkg/other.py",
        "class Cleaner:\n    def unescape(self, t):\n        return t\n\n    def sub(self, a):\n        return a\n",
    );
    write(
        t.path(),
        "pkg/use.py",
        "def run(node, s):\n    node.sub(s)\n    re.sub(s)\n    strutils.unescape(s)\n    a.b.sub(s)\n",
    );
    let repo = open(t.path());
    // A value of unknown type: the one class that has the method.
    assert_eq!(
        resolve(&repo, "pkg.use.run", "node.sub").unwrap(),
        ["pkg.other.Cleaner.sub@pkg/other.py:5"]
    );
    // A standard module, a module of the repository and a dotted path that the file does not
    // import are not receivers: no method of an unrelated class.
    for name in ["re.sub", "strutils.unescape", "a.b.sub"] {
        match resolve(&repo, "pkg.use.run", name) {
            Err(Unresolved::NotFound { hint, .. }) => {
                assert!(hint.contains("module path"), "{name}: {hint}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // A module's own function still resolves by its dotted tail.
    assert_eq!(
        resolve(&repo, "pkg.use.run", "strutils.slugify").unwrap(),
        ["pkg.strutils.slugify@pkg/strutils.py:1"]
    );
}

const JAVA_UTIL: &str = "\
package com.ex.util;

public class Strings {
    public static String trim(String s) { return s.trim(); }
    public static String trim(String s, int n) { return s.substring(n); }
    public static String pad(String s) { return s + \" \"; }
}
";
const JAVA_APP: &str = "\
package com.ex.app;

import static com.ex.util.Strings.pad;
import com.ex.util.Strings;
import java.util.List;

public class App extends Base {
    public String run(String s) {
        helper();
        inherited();
        return pad(Strings.trim(s));
    }

    private void helper() {}
}
";
const JAVA_BASE: &str = "\
package com.ex.app;

public class Base {
    protected void inherited() {}
}
";

#[test]
fn java_resolution_static_imports_overloads_and_inheritance() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "src/main/java/com/ex/util/Strings.java",
        JAVA_UTIL,
    );
    write(t.path(), "src/main/java/com/ex/app/App.java", JAVA_APP);
    write(t.path(), "src/main/java/com/ex/app/Base.java", JAVA_BASE);
    let repo = open(t.path());
    let run = "com.ex.app.App.run";
    assert_eq!(
        resolve(&repo, run, "pad").unwrap(),
        ["com.ex.util.Strings.pad@src/main/java/com/ex/util/Strings.java:6"]
    );
    // Both overloads.
    assert_eq!(
        resolve(&repo, run, "Strings.trim").unwrap(),
        [
            "com.ex.util.Strings.trim@src/main/java/com/ex/util/Strings.java:4",
            "com.ex.util.Strings.trim@src/main/java/com/ex/util/Strings.java:5"
        ]
    );
    assert_eq!(
        resolve(&repo, run, "helper").unwrap(),
        ["com.ex.app.App.helper@src/main/java/com/ex/app/App.java:14"]
    );
    assert_eq!(
        resolve(&repo, run, "this.helper").unwrap(),
        ["com.ex.app.App.helper@src/main/java/com/ex/app/App.java:14"]
    );
    // Base class of the same package, no import needed.
    assert_eq!(
        resolve(&repo, run, "inherited").unwrap(),
        ["com.ex.app.Base.inherited@src/main/java/com/ex/app/Base.java:4"]
    );
    let app = repo.file_id("src/main/java/com/ex/app/App.java").unwrap();
    let imports = repo.resolver().imports_of(app);
    assert!(
        matches!(&imports[2].1, Ok(ImportTarget::External { module }) if module == "java.util.List")
    );
    // An overloaded target needs a line.
    let err = resolve_target(&repo, "com.ex.util.Strings.trim")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Strings.java:4") && err.contains("Strings.java:5"),
        "{err}"
    );
    let id = resolve_target(
        &repo,
        "src/main/java/com/ex/util/Strings.java::Strings.trim@5",
    )
    .unwrap();
    assert_eq!(repo.function(id).params.len(), 2);
}

#[test]
fn masked_view_hides_the_whole_definition_and_tests() {
    let t = tempfile::tempdir().unwrap();
    pyproj(t.path());
    let repo = open(t.path());
    let target = func(&repo, "proj.fs.osfs.OSFS.open");
    let f = repo.function(target).clone();
    let definition = repo.function_code(target).to_string();
    let signature = repo
        .slice(
            repo.function_file(target),
            f.signature.start_byte,
            f.signature.end_byte,
        )
        .to_string();
    let body = repo
        .slice(
            repo.function_file(target),
            f.body.start_byte,
            f.body.end_byte,
        )
        .to_string();
    assert_eq!(signature, "def open(self, path):");
    assert!(body.contains("fspath.normpath(path)"));

    let view = MaskedView::new(&repo, Some(target), false);
    let text = view.file_text("src/proj/fs/osfs.py").unwrap();
    assert!(
        !text.contains(&signature) && !text.contains(body.trim()),
        "{text}"
    );
    assert_eq!(
        text.len(),
        repo.file_text("src/proj/fs/osfs.py").unwrap().len() - definition.len()
    );
    assert!(
        text.contains("def check(self, p):"),
        "the rest of the file stays"
    );
    assert!(view.functions().all(|(id, _)| id != target));
    assert!(view.function(target).is_none() && view.function_code(target).is_none());
    assert!(!view.functions_in("src/proj/fs/osfs.py").contains(&target));
    let osfs = view.file_symbols("src/proj/fs/osfs.py").unwrap();
    assert!(osfs.functions.iter().all(|g| g.span != f.span));
    assert_eq!(
        osfs.classes[0].methods,
        ["proj.fs.osfs.OSFS.__init__", "proj.fs.osfs.OSFS.check"]
    );
    // (`Base.open` in base.py has the same signature, legitimately.)
    for id in view.functions_in("src/proj/fs/osfs.py") {
        let code = view.function_code(id).unwrap();
        assert!(!code.contains(&signature) && !code.contains(body.trim()));
    }
    let tree = view.tree(TreeOptions {
        budget: 10_000,
        functions: true,
    });
    assert!(
        tree.contains("OSFS.check") && !tree.contains("OSFS.open"),
        "{tree}"
    );
    // The resolver no longer finds it; the base class method of the same name remains.
    let check = func(&repo, "proj.fs.osfs.OSFS.check");
    let found = view.resolver().resolve_name(check, "self.open").unwrap();
    assert_eq!(
        found.iter().map(|d| repo.qualname(*d)).collect::<Vec<_>>(),
        ["proj.fs.base.Base.open"]
    );

    // Test files are out by default, in with the switch.
    let paths: Vec<&str> = view.files().map(|f| f.path).collect();
    assert!(!paths.contains(&"tests/test_osfs.py") && !paths.contains(&"src/proj/fs/conftest.py"));
    assert!(view
        .functions()
        .all(|(_, g)| !g.qualname.contains("test_open")));
    assert!(view.file_text("tests/test_osfs.py").is_none());
    assert!(!tree.contains("test_osfs.py"));
    let with_tests = MaskedView::new(&repo, Some(target), true);
    assert!(with_tests.files().any(|f| f.path == "tests/test_osfs.py"));
    assert!(with_tests.functions().any(|(_, g)| g.name == "test_open"));
    assert!(with_tests.function(target).is_none());
}

#[test]
fn masking_a_nested_function_cuts_it_from_the_enclosing_one() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "m.py",
        "def outer(x):\n    def inner(y):\n        return y * 42\n    return inner(x)\n",
    );
    let repo = open(t.path());
    let inner = func(&repo, "m.outer.inner");
    let outer = func(&repo, "m.outer");
    let view = MaskedView::new(&repo, Some(inner), false);
    let code = view.function_code(outer).unwrap();
    assert_eq!(code, "def outer(x):\n    \n    return inner(x)");
    assert!(!view.file_text("m.py").unwrap().contains("42"));
}

#[test]
fn tree_budget_elides_and_says_so() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..40 {
        write(
            t.path(),
            &format!("pkg/mod{i:02}.py"),
            "def f():\n    pass\n",
        );
    }
    write(t.path(), "README.md", "# hi\n");
    let repo = open(t.path());
    let view = MaskedView::new(&repo, None, false);
    let full = view.tree(TreeOptions {
        budget: 100_000,
        functions: true,
    });
    assert_eq!(full.lines().count(), 1 + 1 + 80 + 1);
    let small = view.tree(TreeOptions {
        budget: 300,
        functions: true,
    });
    assert!(small.chars().count() <= 300, "{small}");
    assert!(small.contains("more files in pkg/"), "{small}");
    assert!(small.contains("README.md"));
    // Deterministic.
    assert_eq!(
        small,
        view.tree(TreeOptions {
            budget: 300,
            functions: true
        })
    );
}

#[test]
fn cache_reparses_only_changed_files_and_rebuilds_when_broken() {
    let t = tempfile::tempdir().unwrap();
    pyproj(t.path());
    let first = open(t.path());
    assert_eq!(first.stats().parsed, first.stats().source_files);
    let cache_file = t.path().join(".repohop/symbols.json");
    assert!(cache_file.is_file());
    let second = open(t.path());
    assert_eq!(
        (second.stats().parsed, second.stats().cached),
        (0, first.stats().source_files)
    );
    assert_eq!(second.functions().count(), first.functions().count());
    assert!(second
        .diagnostics()
        .iter()
        .all(|d| d.kind != DiagnosticKind::Cache));
    let mtime = fs::metadata(&cache_file).unwrap().modified().unwrap();

    // Edit one file: exactly that one is parsed again.
    write(
        t.path(),
        "src/proj/util.py",
        &format!("{UTIL}\n\ndef added():\n    return 3\n"),
    );
    let third = open(t.path());
    assert_eq!(third.stats().parsed, 1);
    assert!(third.functions().any(|f| f.qualname == "proj.util.added"));
    assert_ne!(
        fs::metadata(&cache_file).unwrap().modified().unwrap(),
        mtime
    );

    // Remove one: gone from the index, nothing parsed.
    fs::remove_file(t.path().join("src/proj/fs/base.py")).unwrap();
    let fourth = open(t.path());
    assert_eq!(fourth.stats().parsed, 0);
    assert!(fourth.functions().all(|f| f.path != "src/proj/fs/base.py"));

    // Corrupt: reported, rebuilt.
    fs::write(&cache_file, b"{\"format\":\"repohop-symbols\",\"vers").unwrap();
    let fifth = open(t.path());
    let d = fifth
        .diagnostics()
        .iter()
        .find(|d| d.kind == DiagnosticKind::Cache)
        .expect("reported");
    assert!(
        d.path.ends_with("symbols.json")
            && d.what.contains("corrupt")
            && d.what.contains("rebuilding"),
        "{d}"
    );
    assert_eq!(fifth.stats().parsed, fifth.stats().source_files);
    assert_eq!(
        open(t.path()).stats().parsed,
        0,
        "the rebuilt cache is used"
    );

    // Another version: reported, rebuilt.
    let text = fs::read_to_string(&cache_file).unwrap();
    let (_, body) = text.split_once('\n').unwrap();
    fs::write(
        &cache_file,
        format!("{{\"format\":\"repohop-symbols\",\"version\":0,\"repohop\":\"0.0.0\"}}\n{body}"),
    )
    .unwrap();
    let sixth = open(t.path());
    let d = sixth
        .diagnostics()
        .iter()
        .find(|d| d.kind == DiagnosticKind::Cache)
        .expect("reported");
    assert!(
        d.what.contains("version 0") && d.what.contains("rebuilding"),
        "{d}"
    );
    assert_eq!(sixth.stats().parsed, sixth.stats().source_files);

    // Truncated body with a valid header: corrupt, rebuilt.
    let text = fs::read_to_string(&cache_file).unwrap();
    fs::write(&cache_file, &text[..text.len() / 2]).unwrap();
    let seventh = open(t.path());
    assert!(seventh
        .diagnostics()
        .iter()
        .any(|d| d.kind == DiagnosticKind::Cache && d.what.contains("corrupt")));
    assert_eq!(seventh.stats().parsed, seventh.stats().source_files);
}

#[test]
fn module_names_follow_packages_and_key_the_cache() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "src/a.py", "def f():\n    pass\n");
    write(t.path(), "scripts/run.py", "def main():\n    pass\n");
    let repo = open(t.path());
    let names: Vec<&str> = repo.functions().map(|f| f.qualname.as_str()).collect();
    assert_eq!(names, ["scripts.run.main", "a.f"]);
    // `src/` becomes a package: same bytes, new module name, so the file is parsed again.
    write(t.path(), "src/__init__.py", "");
    let repo = open(t.path());
    assert_eq!(repo.stats().parsed, 2, "src/__init__.py and src/a.py");
    assert!(repo.functions().any(|f| f.qualname == "src.a.f"));
}

#[test]
fn defs_serialize_for_json_output() {
    let d = Def::Function(FnId(3));
    assert_eq!(
        serde_json::to_string(&d).unwrap(),
        "{\"kind\":\"function\",\"id\":3}"
    );
}

#[test]
fn ignore_files_and_hidden_folders_are_honoured_outside_git() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), ".gitignore", "build/\n");
    write(t.path(), ".ignore", "gen.py\n");
    write(t.path(), ".repohopignore", "vendor/\n");
    for p in [
        "build/b.py",
        "gen.py",
        "vendor/v.py",
        ".hidden/h.py",
        ".git/x.py",
        "keep.py",
        "docs/notes.md",
    ] {
        write(t.path(), p, "def f():\n    pass\n");
    }
    let repo = open(t.path());
    let paths: Vec<&str> = repo.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["docs/notes.md", "keep.py"]);
    assert_eq!(repo.stats().source_files, 1);
    assert!(t.path().join(".repohop/symbols.json").is_file());
    // The cache folder is not indexed on the next run either.
    assert_eq!(open(t.path()).files().len(), 2);
}

/// The fixture repositories of tests/fixtures, indexed without writing a cache into the tree.
fn fixture(name: &str) -> Repository {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let opts = IndexOptions {
        use_cache: false,
        ..Default::default()
    };
    Repository::open(&root, &opts).expect("fixture")
}

#[test]
fn pyproj_fixture_resolutions() {
    let repo = fixture("pyproj");
    let main = "walkway.cli.main";
    // `import walkway.pathops as po`; `from walkway.core import engine`.
    assert_eq!(
        resolve(&repo, main, "po.norm_path").unwrap(),
        ["walkway.pathops.norm_path@walkway/pathops.py:7"]
    );
    assert_eq!(
        resolve(&repo, main, "engine.Engine.make").unwrap(),
        ["walkway.core.engine.Engine.make@walkway/core/engine.py:38"]
    );
    // A local variable of unknown type: the one class with a `walk` method.
    assert_eq!(
        resolve(&repo, main, "eng.walk").unwrap(),
        ["walkway.core.engine.Engine.walk@walkway/core/engine.py:27"]
    );
    // Re-exported by the package `__init__`.
    assert_eq!(
        resolve(&repo, main, "walkway.Engine").unwrap(),
        ["walkway.core.engine.Engine@walkway/core/engine.py:13"]
    );
    assert_eq!(
        resolve(&repo, main, "walkway.core.trace").unwrap(),
        ["walkway.core.engine.trace@walkway/core/engine.py:7"]
    );
    assert!(
        matches!(resolve(&repo, main, "sys.exit"), Err(Unresolved::External { module, .. }) if module == "sys")
    );

    let walk = "walkway.core.engine.Engine.walk";
    assert_eq!(
        resolve(&repo, walk, "self.parts").unwrap(),
        ["walkway.core.engine.Engine.parts@walkway/core/engine.py:33"]
    );
    assert_eq!(
        resolve(&repo, walk, "join_path").unwrap(),
        ["walkway.pathops.join_path@walkway/pathops.py:40"]
    );
    assert_eq!(
        resolve(&repo, walk, "reg").unwrap(),
        ["walkway.core.registry.register@walkway/core/registry.py:6"]
    );
    assert_eq!(
        resolve(&repo, walk, "trace").unwrap(),
        ["walkway.core.engine.trace@walkway/core/engine.py:7"]
    );
    // Inherited from `Registry` (imported from `.registry`).
    assert_eq!(
        resolve(&repo, walk, "self.lookup").unwrap(),
        ["walkway.core.registry.Registry.lookup@walkway/core/registry.py:22"]
    );
    assert_eq!(
        resolve(
            &repo,
            "walkway.core.engine.Engine.__init__",
            "super().__init__"
        )
        .unwrap(),
        ["walkway.core.registry.Registry.__init__@walkway/core/registry.py:19"]
    );
    // The lazy import in `parts`.
    assert_eq!(
        resolve(&repo, "walkway.core.engine.Engine.parts", "iterate_path").unwrap(),
        ["walkway.pathops.iterate_path@walkway/pathops.py:28"]
    );
    assert_eq!(
        resolve(&repo, "walkway.core.engine.Engine.make", "Engine").unwrap(),
        ["walkway.core.engine.Engine@walkway/core/engine.py:13"]
    );
    // A nested function, from its enclosing one.
    assert_eq!(
        resolve(&repo, "walkway.core.registry.register", "wrap").unwrap(),
        ["walkway.core.registry.register.wrap@walkway/core/registry.py:9"]
    );

    let engine = repo.file_id("walkway/core/engine.py").unwrap();
    let r = repo.resolver();
    let targets: Vec<String> = r
        .imports_of(engine)
        .into_iter()
        .map(|(i, t)| match t {
            Ok(ImportTarget::Module { files }) => {
                format!("{}: module {}", i.line, repo.file(files[0]).path)
            }
            Ok(ImportTarget::Defs { defs }) => format!("{}: {}", i.line, repo.qualname(defs[0])),
            Ok(ImportTarget::External { module }) => format!("{}: external {module}", i.line),
            Err(e) => format!("{}: {e}", i.line),
        })
        .collect();
    assert_eq!(
        targets,
        [
            "2: module walkway/core/registry.py",
            "3: walkway.core.registry.register",
            "3: walkway.core.registry.Registry",
            "4: walkway.pathops.join_path",
            "34: walkway.pathops.iterate_path",
        ]
    );
}

#[test]
fn javaproj_fixture_resolutions() {
    let repo = fixture("javaproj");
    let main = "com.acme.App.main";
    let util = "src/main/java/com/acme/util/MathUtil.java";
    // `import static com.acme.util.MathUtil.clamp`: both overloads.
    assert_eq!(
        resolve(&repo, main, "clamp").unwrap(),
        [
            format!("com.acme.util.MathUtil.clamp@{util}:6"),
            format!("com.acme.util.MathUtil.clamp@{util}:10")
        ]
    );
    // `import static com.acme.util.MathUtil.*`.
    assert_eq!(
        resolve(&repo, main, "sum").unwrap(),
        [format!("com.acme.util.MathUtil.sum@{util}:14")]
    );
    // `import com.acme.shapes.*`, then an inner class.
    assert_eq!(
        resolve(&repo, main, "Circle.Builder").unwrap(),
        ["com.acme.shapes.Circle.Builder@src/main/java/com/acme/shapes/Circle.java:31"]
    );
    assert_eq!(
        resolve(&repo, main, "s.describe").unwrap(),
        ["com.acme.shapes.Shape.describe@src/main/java/com/acme/shapes/Shape.java:7"]
    );
    // Overloads in the same class; a bare method name inside a method is a member call.
    let circle = "src/main/java/com/acme/shapes/Circle.java";
    let scale_int = resolve_target(&repo, &format!("{circle}::Circle.scale@20")).unwrap();
    let found = repo.resolver().resolve_name(scale_int, "scale").unwrap();
    assert_eq!(
        found.iter().map(|d| repo.location(*d)).collect::<Vec<_>>(),
        [format!("{circle}:20"), format!("{circle}:27")]
    );
    assert_eq!(
        resolve(&repo, "com.acme.shapes.Circle.Circle", "MathUtil.clamp")
            .unwrap()
            .len(),
        2
    );
    let app = repo.file_id("src/main/java/com/acme/App.java").unwrap();
    let kinds: Vec<String> = repo
        .resolver()
        .imports_of(app)
        .into_iter()
        .map(|(i, t)| match t {
            Ok(ImportTarget::Module { files }) => {
                format!("{}: package of {} files", i.line, files.len())
            }
            Ok(ImportTarget::Defs { defs }) => {
                format!("{}: {} x{}", i.line, repo.qualname(defs[0]), defs.len())
            }
            Ok(ImportTarget::External { module }) => format!("{}: external {module}", i.line),
            Err(e) => format!("{}: {e}", i.line),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "3: package of 2 files",
            "4: external java.util.List",
            "5: com.acme.util.MathUtil.clamp x2",
            "6: com.acme.util.MathUtil x1",
        ]
    );

    // Masking one overload hides it alone; the Maven test tree is out by default.
    let scale_double = resolve_target(&repo, &format!("{circle}::Circle.scale@27")).unwrap();
    let view = MaskedView::new(&repo, Some(scale_double), false);
    let text = view.file_text(circle).unwrap();
    assert!(
        !text.contains("public Circle scale(double factor)") && !text.contains("radius * factor")
    );
    assert!(text.contains("public Circle scale(int factor)"));
    let found = view.resolver().resolve_name(scale_int, "scale").unwrap();
    assert_eq!(
        found.iter().map(|d| repo.location(*d)).collect::<Vec<_>>(),
        [format!("{circle}:20")]
    );
    assert!(view.files().all(|f| !f.path.starts_with("src/test/")));
    assert!(MaskedView::new(&repo, Some(scale_double), true)
        .files()
        .any(|f| f.path.ends_with("MathUtilTest.java")));
}

#[test]
fn pyproj_fixture_masked_view() {
    let repo = fixture("pyproj");
    let target = func(&repo, "walkway.pathops.iterate_path");
    let view = MaskedView::new(&repo, Some(target), false);
    let text = view.file_text("walkway/pathops.py").unwrap();
    assert!(!text.contains("def iterate_path(path):"));
    assert!(!text.contains("Iterate over the components of a path."));
    assert!(!text.contains("_path.strip(\"/\")"));
    assert!(text.contains("def norm_path(path):") && text.contains("def join_path(*paths):"));
    let tree = view.tree(TreeOptions {
        budget: 10_000,
        functions: true,
    });
    assert_eq!(
        tree,
        "pyproj/\n  walkway/\n    core/\n      __init__.py\n      engine.py\n        - trace\n        - Engine.__init__\n        - Engine.name\n        - Engine.walk\n        - Engine.parts\n        - Engine.make\n      registry.py\n        - register\n        - register.wrap\n        - Registry.__init__\n        - Registry.lookup\n    __init__.py\n    cli.py\n      - main\n    pathops.py\n      - norm_path\n      - join_path\n"
    );
    // The lazy import of the target is still resolvable from `parts`... to nothing visible.
    let parts = func(&repo, "walkway.core.engine.Engine.parts");
    assert!(matches!(
        view.resolver().resolve_name(parts, "iterate_path"),
        Err(Unresolved::NotFound { .. })
    ));
}
