//! Parses every file of the fixture repositories through the public front-end API and checks the
//! exact symbols, ranges, imports and call sites. Ranges are checked through the text they cut
//! out of the file (`sig` is the signature slice, `body` the first and last line of the body
//! slice), so every byte offset is verified without magic numbers.

use std::fmt::Write;

use repohop::repo::lang::for_path;
use repohop::repo::{FileSymbols, Span};

const PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pyproj/");
const JAVA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/javaproj/");

fn parse(root: &str, path: &str, module: &str) -> (String, FileSymbols) {
    let source = std::fs::read_to_string(format!("{root}{path}")).expect(path);
    let fs = for_path(path)
        .expect("a parsed language")
        .parse(path, module, &source);
    (source, fs)
}

fn slice(src: &str, s: Span) -> &str {
    &src[s.start_byte..s.end_byte]
}

/// `first line … last line` of a range, with its line numbers checked against its bytes.
fn lines(src: &str, s: Span) -> String {
    let text = slice(src, s);
    assert_eq!(
        src[..s.start_byte].matches('\n').count() + 1,
        s.start_line,
        "start line of {text:?}"
    );
    assert_eq!(
        s.start_line + text.matches('\n').count(),
        s.end_line,
        "end line of {text:?}"
    );
    if text.is_empty() {
        return format!("L{} empty", s.start_line);
    }
    let first = text.lines().next().unwrap_or("");
    let last = text.lines().last().unwrap_or("").trim_start();
    if text.contains('\n') {
        format!("L{}-{} {first} … {last}", s.start_line, s.end_line)
    } else {
        format!("L{} {first}", s.start_line)
    }
}

/// A compact, exact rendering of what a file yielded.
fn render(src: &str, fs: &FileSymbols) -> String {
    let mut out = String::new();
    writeln!(out, "module {:?} errors {}", fs.module, fs.parse_errors).unwrap();
    for i in &fs.imports {
        writeln!(
            out,
            "import {:?} name={:?} alias={:?} level={} static={} wildcard={} line={} scope={:?}",
            i.module, i.name, i.alias, i.level, i.is_static, i.is_wildcard, i.line, i.scope
        )
        .unwrap();
    }
    for c in &fs.classes {
        writeln!(
            out,
            "class {} {} bases={:?} members={:?} methods={:?}",
            c.qualname,
            lines(src, c.span),
            c.bases,
            c.members,
            c.methods
        )
        .unwrap();
    }
    for f in &fs.functions {
        assert_eq!(f.span.start_byte, f.signature.start_byte);
        assert_eq!(f.span.end_byte, f.body.end_byte);
        writeln!(
            out,
            "{:?} {} class={:?} params={:?}",
            f.kind, f.qualname, f.class, f.params
        )
        .unwrap();
        writeln!(out, "  span {}", lines(src, f.span)).unwrap();
        writeln!(out, "  sig {:?}", slice(src, f.signature)).unwrap();
        writeln!(out, "  body {}", lines(src, f.body)).unwrap();
        if let Some(d) = &f.docstring {
            writeln!(out, "  doc {d:?}").unwrap();
        }
        for c in &f.calls {
            writeln!(out, "  call {} @{}", c.callee, c.line).unwrap();
        }
    }
    out
}

fn check(root: &str, path: &str, module: &str, expected: &str) {
    let (src, fs) = parse(root, path, module);
    assert_eq!(fs.path, path);
    assert!(fs.functions.iter().all(|f| f.path == path));
    let got = render(&src, &fs);
    if got.trim() != expected.trim() {
        panic!("{path}: got\n{got}\nexpected\n{expected}");
    }
}

#[test]
fn py_package_init_reexports_relative() {
    check(
        PY,
        "walkway/__init__.py",
        "walkway",
        r##"
module "walkway" errors 0
import "pathops" name=Some("iterate_path") alias=None level=1 static=false wildcard=false line=2 scope=None
import "pathops" name=Some("norm_path") alias=None level=1 static=false wildcard=false line=2 scope=None
import "core.engine" name=Some("Engine") alias=None level=1 static=false wildcard=false line=3 scope=None
"##,
    );
}

#[test]
fn py_pathops_target_and_in_file_helper() {
    check(
        PY,
        "walkway/pathops.py",
        "walkway.pathops",
        r##"
module "walkway.pathops" errors 0
import "re" name=None alias=None level=0 static=false wildcard=false line=2 scope=None
Function walkway.pathops.norm_path class=None params=["path"]
  span L7-25 def norm_path(path): … return "/" + joined if absolute else joined
  sig "def norm_path(path):"
  body L8-25 """Normalize a path. … return "/" + joined if absolute else joined
  doc "Normalize a path.\n\nCollapses back-references and removes duplicated separators."
  call path.startswith @14
  call _SEP_RUN.sub("/", path).split @16
  call _SEP_RUN.sub @16
  call parts.pop @21
  call parts.append @23
  call "/".join @24
Function walkway.pathops.iterate_path class=None params=["path"]
  span L28-37 def iterate_path(path): … return [component for component in _path.strip("/").split("/") if component]
  sig "def iterate_path(path):"
  body L29-37 """Iterate over the components of a path. … return [component for component in _path.strip("/").split("/") if component]
  doc "Iterate over the components of a path.\n\n:param path: the path to iterate over, for example ``/foo/bar/baz``.\n:return: a list of path components."
  call norm_path @34
  call _path.strip("/").split @37
  call _path.strip @37
Function walkway.pathops.join_path class=None params=["*paths"]
  span L40-42 def join_path(*paths): … return norm_path("/".join(paths))
  sig "def join_path(*paths):"
  body L41-42 """Join paths and normalize the result.""" … return norm_path("/".join(paths))
  doc "Join paths and normalize the result."
  call norm_path @42
  call "/".join @42
"##,
    );
}

#[test]
fn py_subpackage_init() {
    check(
        PY,
        "walkway/core/__init__.py",
        "walkway.core",
        r##"
module "walkway.core" errors 0
import "engine" name=Some("Engine") alias=None level=1 static=false wildcard=false line=1 scope=None
import "engine" name=Some("trace") alias=None level=1 static=false wildcard=false line=1 scope=None
"##,
    );
}

#[test]
fn py_registry_nested_function_and_members() {
    check(
        PY,
        "walkway/core/registry.py",
        "walkway.core.registry",
        r##"
module "walkway.core.registry" errors 0
class walkway.core.registry.Registry L16-23 class Registry: … return self.entries.get(name) bases=[] members=["kind", "entries"] methods=["walkway.core.registry.Registry.__init__", "walkway.core.registry.Registry.lookup"]
Function walkway.core.registry.register class=None params=["name"]
  span L6-13 def register(name): … return wrap
  sig "def register(name):"
  body L7-13 """Register the decorated function under ``name``.""" … return wrap
  doc "Register the decorated function under ``name``."
Function walkway.core.registry.register.wrap class=None params=["fn"]
  span L9-11 def wrap(fn): … return fn
  sig "def wrap(fn):"
  body L10-11 _REGISTRY[name] = fn … return fn
Method walkway.core.registry.Registry.__init__ class=Some("walkway.core.registry.Registry") params=["self"]
  span L19-20 def __init__(self): … self.entries = dict(_REGISTRY)
  sig "def __init__(self):"
  body L20 self.entries = dict(_REGISTRY)
  call dict @20
Method walkway.core.registry.Registry.lookup class=Some("walkway.core.registry.Registry") params=["self", "name"]
  span L22-23 def lookup(self, name): … return self.entries.get(name)
  sig "def lookup(self, name):"
  body L23 return self.entries.get(name)
  call self.entries.get @23
"##,
    );
}

#[test]
fn py_engine_methods_decorators_lazy_import() {
    check(
        PY,
        "walkway/core/engine.py",
        "walkway.core.engine",
        r##"
module "walkway.core.engine" errors 0
import "" name=Some("registry") alias=None level=1 static=false wildcard=false line=2 scope=None
import "registry" name=Some("register") alias=Some("reg") level=1 static=false wildcard=false line=3 scope=None
import "registry" name=Some("Registry") alias=None level=1 static=false wildcard=false line=3 scope=None
import "pathops" name=Some("join_path") alias=None level=2 static=false wildcard=false line=4 scope=None
import "pathops" name=Some("iterate_path") alias=None level=2 static=false wildcard=false line=34 scope=Some("walkway.core.engine.Engine.parts")
class walkway.core.engine.Engine L13-40 class Engine(Registry): … return Engine(root, limit=registry.Registry.kind.count("a")) bases=["Registry"] members=["depth", "root", "limit"] methods=["walkway.core.engine.Engine.__init__", "walkway.core.engine.Engine.name", "walkway.core.engine.Engine.walk", "walkway.core.engine.Engine.parts", "walkway.core.engine.Engine.make"]
Function walkway.core.engine.trace class=None params=["fn"]
  span L7-10 def trace(fn): … return fn
  sig "def trace(fn):"
  body L8-10 """Mark a function as traced.""" … return fn
  doc "Mark a function as traced."
Method walkway.core.engine.Engine.__init__ class=Some("walkway.core.engine.Engine") params=["self", "root", "limit"]
  span L18-21 def __init__(self, root, *, limit=10): … self.limit = limit
  sig "def __init__(self, root, *, limit=10):"
  body L19-21 super().__init__() … self.limit = limit
  call super().__init__ @19
  call super @19
Method walkway.core.engine.Engine.name class=Some("walkway.core.engine.Engine") params=["self"]
  span L23-25 @property … return self.root.rsplit("/", 1)[-1]
  sig "@property\n    def name(self):"
  body L25 return self.root.rsplit("/", 1)[-1]
  call self.root.rsplit @25
Method walkway.core.engine.Engine.walk class=Some("walkway.core.engine.Engine") params=["self", "path"]
  span L27-31 @trace … yield join_path(self.root, part)
  sig "@trace\n    @reg(\"walk\")\n    def walk(self, path):"
  body L30-31 for part in self.parts(path): … yield join_path(self.root, part)
  call self.parts @30
  call join_path @31
Method walkway.core.engine.Engine.parts class=Some("walkway.core.engine.Engine") params=["self", "path"]
  span L33-36 def parts(self, path): … return iterate_path(path)[: self.limit]
  sig "def parts(self, path):"
  body L34-36 from ..pathops import iterate_path … return iterate_path(path)[: self.limit]
  call iterate_path @36
Method walkway.core.engine.Engine.make class=Some("walkway.core.engine.Engine") params=["root"]
  span L38-40 @staticmethod … return Engine(root, limit=registry.Registry.kind.count("a"))
  sig "@staticmethod\n    def make(root):"
  body L40 return Engine(root, limit=registry.Registry.kind.count("a"))
  call Engine @40
  call registry.Registry.kind.count @40
"##,
    );
}

#[test]
fn py_cli_calls_into_other_modules() {
    check(
        PY,
        "walkway/cli.py",
        "walkway.cli",
        r##"
module "walkway.cli" errors 0
import "sys" name=None alias=None level=0 static=false wildcard=false line=2 scope=None
import "walkway.pathops" name=None alias=Some("po") level=0 static=false wildcard=false line=3 scope=None
import "walkway.core" name=Some("engine") alias=None level=0 static=false wildcard=false line=4 scope=None
Function walkway.cli.main class=None params=["argv"]
  span L7-12 def main(argv=None): … return 0
  sig "def main(argv=None):"
  body L8-12 args = argv if argv is not None else sys.argv[1:] … return 0
  call engine.Engine.make @9
  call po.norm_path @9
  call eng.walk @10
  call print @11
"##,
    );
}

#[test]
fn py_test_file() {
    check(
        PY,
        "tests/test_pathops.py",
        "tests.test_pathops",
        r##"
module "tests.test_pathops" errors 0
import "walkway.pathops" name=Some("iterate_path") alias=None level=0 static=false wildcard=false line=1 scope=None
import "walkway.pathops" name=Some("norm_path") alias=None level=0 static=false wildcard=false line=1 scope=None
Function tests.test_pathops.test_iterate_path class=None params=[]
  span L4-5 def test_iterate_path(): … assert iterate_path("/foo//bar/../baz") == ["foo", "baz"]
  sig "def test_iterate_path():"
  body L5 assert iterate_path("/foo//bar/../baz") == ["foo", "baz"]
  call iterate_path @5
Function tests.test_pathops.test_norm_path_keeps_relative class=None params=[]
  span L8-9 def test_norm_path_keeps_relative(): … assert norm_path("a/./b/") == "a/b"
  sig "def test_norm_path_keeps_relative():"
  body L9 assert norm_path("a/./b/") == "a/b"
  call norm_path @9
"##,
    );
}

#[test]
fn java_interface_default_and_abstract() {
    check(
        JAVA,
        "src/main/java/com/acme/shapes/Shape.java",
        "",
        r##"
module "com.acme.shapes" errors 0
class com.acme.shapes.Shape L4-10 public interface Shape { … } bases=[] members=[] methods=["com.acme.shapes.Shape.area", "com.acme.shapes.Shape.describe"]
Method com.acme.shapes.Shape.area class=Some("com.acme.shapes.Shape") params=[]
  span L5 double area();
  sig "double area()"
  body L5 empty
Method com.acme.shapes.Shape.describe class=Some("com.acme.shapes.Shape") params=[]
  span L7-9 default String describe() { … }
  sig "default String describe()"
  body L7-9 { … }
  call getClass().getSimpleName @8
  call getClass @8
  call area @8
"##,
    );
}

#[test]
fn java_overloads_javadoc_inner_class() {
    check(
        JAVA,
        "src/main/java/com/acme/shapes/Circle.java",
        "",
        r##"
module "com.acme.shapes" errors 0
import "com.acme.util" name=Some("MathUtil") alias=None level=0 static=false wildcard=false line=3 scope=None
class com.acme.shapes.Circle L5-43 public class Circle implements Shape { … } bases=["Shape"] members=["radius"] methods=["com.acme.shapes.Circle.Circle", "com.acme.shapes.Circle.area", "com.acme.shapes.Circle.scale"]
class com.acme.shapes.Circle.Builder L31-42 public static class Builder { … } bases=[] members=["radius"] methods=["com.acme.shapes.Circle.Builder.radius", "com.acme.shapes.Circle.Builder.build"]
Method com.acme.shapes.Circle.Circle class=Some("com.acme.shapes.Circle") params=["radius"]
  span L8-10 public Circle(double radius) { … }
  sig "public Circle(double radius)"
  body L8-10 { … }
  call MathUtil.clamp @9
Method com.acme.shapes.Circle.area class=Some("com.acme.shapes.Circle") params=[]
  span L12-15 @Override … }
  sig "@Override\n    public double area()"
  body L13-15 { … }
Method com.acme.shapes.Circle.scale class=Some("com.acme.shapes.Circle") params=["factor"]
  span L20-22 public Circle scale(int factor) { … }
  sig "public Circle scale(int factor)"
  body L20-22 { … }
  doc "Scales by an integer factor."
  call scale @21
Method com.acme.shapes.Circle.scale class=Some("com.acme.shapes.Circle") params=["factor"]
  span L27-29 public Circle scale(double factor) { … }
  sig "public Circle scale(double factor)"
  body L27-29 { … }
  doc "Scales by a real factor."
  call new Circle @28
Method com.acme.shapes.Circle.Builder.radius class=Some("com.acme.shapes.Circle.Builder") params=["r"]
  span L34-37 public Builder radius(double r) { … }
  sig "public Builder radius(double r)"
  body L34-37 { … }
Method com.acme.shapes.Circle.Builder.build class=Some("com.acme.shapes.Circle.Builder") params=[]
  span L39-41 public Circle build() { … }
  sig "public Circle build()"
  body L39-41 { … }
  call new Circle @40
"##,
    );
}

#[test]
fn java_static_overloads_varargs() {
    check(
        JAVA,
        "src/main/java/com/acme/util/MathUtil.java",
        "",
        r##"
module "com.acme.util" errors 0
class com.acme.util.MathUtil L3-21 public final class MathUtil { … } bases=[] members=[] methods=["com.acme.util.MathUtil.MathUtil", "com.acme.util.MathUtil.clamp", "com.acme.util.MathUtil.sum"]
Method com.acme.util.MathUtil.MathUtil class=Some("com.acme.util.MathUtil") params=[]
  span L4 private MathUtil() {}
  sig "private MathUtil()"
  body L4 {}
Method com.acme.util.MathUtil.clamp class=Some("com.acme.util.MathUtil") params=["v", "lo", "hi"]
  span L6-8 public static int clamp(int v, int lo, int hi) { … }
  sig "public static int clamp(int v, int lo, int hi)"
  body L6-8 { … }
  call Math.max @7
  call Math.min @7
Method com.acme.util.MathUtil.clamp class=Some("com.acme.util.MathUtil") params=["v", "lo", "hi"]
  span L10-12 public static double clamp(double v, double lo, double hi) { … }
  sig "public static double clamp(double v, double lo, double hi)"
  body L10-12 { … }
  call Math.max @11
  call Math.min @11
Method com.acme.util.MathUtil.sum class=Some("com.acme.util.MathUtil") params=["values"]
  span L14-20 public static int sum(int... values) { … }
  sig "public static int sum(int... values)"
  body L14-20 { … }
  call clamp @19
"##,
    );
}

#[test]
fn java_static_and_wildcard_imports() {
    check(
        JAVA,
        "src/main/java/com/acme/App.java",
        "",
        r##"
module "com.acme" errors 0
import "com.acme.shapes" name=None alias=None level=0 static=false wildcard=true line=3 scope=None
import "java.util" name=Some("List") alias=None level=0 static=false wildcard=false line=4 scope=None
import "com.acme.util.MathUtil" name=Some("clamp") alias=None level=0 static=true wildcard=false line=5 scope=None
import "com.acme.util.MathUtil" name=None alias=None level=0 static=true wildcard=true line=6 scope=None
class com.acme.App L8-16 public class App { … } bases=[] members=[] methods=["com.acme.App.main"]
Method com.acme.App.main class=Some("com.acme.App") params=["args"]
  span L9-15 public static void main(String[] args) { … }
  sig "public static void main(String[] args)"
  body L9-15 { … }
  call List.of @10
  call new Circle.Builder().radius(2).build @10
  call new Circle.Builder().radius @10
  call new Circle.Builder @10
  call System.out.println @12
  call s.describe @12
  call System.exit @14
  call clamp @14
  call sum @14
"##,
    );
}

#[test]
fn java_test_file() {
    check(
        JAVA,
        "src/test/java/com/acme/util/MathUtilTest.java",
        "",
        r##"
module "com.acme.util" errors 0
import "org.junit.Assert" name=Some("assertEquals") alias=None level=0 static=true wildcard=false line=3 scope=None
import "org.junit" name=Some("Test") alias=None level=0 static=false wildcard=false line=5 scope=None
class com.acme.util.MathUtilTest L7-12 public class MathUtilTest { … } bases=[] members=[] methods=["com.acme.util.MathUtilTest.clampsIntoRange"]
Method com.acme.util.MathUtilTest.clampsIntoRange class=Some("com.acme.util.MathUtilTest") params=[]
  span L8-11 @Test … }
  sig "@Test\n    public void clampsIntoRange()"
  body L9-11 { … }
  call assertEquals @10
  call MathUtil.clamp @10
"##,
    );
}
