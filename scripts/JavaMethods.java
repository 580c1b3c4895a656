// Every method and constructor javac's own parser finds under a folder, as JSON, named in
// repohop's scheme (see src/repo/lang/mod.rs). The reference for tests/java_parity.rs.
//
// Usage: java scripts/JavaMethods.java ROOT        (JDK 11+, single-file launch)
//
// Prints a JSON list of {"path", "qualname", "class", "start_line", "end_line", "params"}:
// - qualname: package + enclosing named classes (+ enclosing method for local and anonymous
//   classes) + method name; a constructor is named after its class; overloads share a name;
// - class: the named class whose body declares the method, null inside an anonymous class body;
// - start_line: first line of the declaration with its modifiers and annotations (not the
//   Javadoc); end_line: line of its closing brace or `;`;
// - params: parameter names in order.
// Hidden files and folders are skipped. Only parsing is done (no symbol resolution), so files
// need not compile together.

import com.sun.source.tree.ClassTree;
import com.sun.source.tree.CompilationUnitTree;
import com.sun.source.tree.MethodTree;
import com.sun.source.tree.NewClassTree;
import com.sun.source.tree.Tree;
import com.sun.source.tree.VariableTree;
import com.sun.source.util.JavacTask;
import com.sun.source.util.SourcePositions;
import com.sun.source.util.TreeScanner;
import com.sun.source.util.Trees;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import javax.tools.JavaCompiler;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

public class JavaMethods {
    /** Where a declaration sits: its qualified-name prefix and the directly enclosing class. */
    record Ctx(String prefix, String classQual, String className) {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1 || !Files.isDirectory(Paths.get(args[0]))) {
            System.err.println("usage: java scripts/JavaMethods.java ROOT  (ROOT must be a directory)");
            System.exit(2);
        }
        Path root = Paths.get(args[0]).toAbsolutePath().normalize();
        List<Path> files;
        try (Stream<Path> s = Files.walk(root)) {
            files = s.filter(p -> p.toString().endsWith(".java"))
                    .filter(p -> !hidden(root.relativize(p)))
                    .sorted()
                    .toList();
        }
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        StandardJavaFileManager fm = javac.getStandardFileManager(null, null, StandardCharsets.UTF_8);
        JavacTask task = (JavacTask) javac.getTask(
                null, fm, d -> {}, List.of("-proc:none"), null, fm.getJavaFileObjectsFromPaths(files));
        SourcePositions pos = Trees.instance(task).getSourcePositions();
        List<String> out = new ArrayList<>();
        for (CompilationUnitTree cu : task.parse()) {
            String rel = root.relativize(Paths.get(cu.getSourceFile().toUri())).toString().replace('\\', '/');
            String pkg = cu.getPackageName() == null ? "" : cu.getPackageName().toString();
            new TreeScanner<Void, Ctx>() {
                @Override
                public Void visitClass(ClassTree t, Ctx c) {
                    String name = t.getSimpleName().toString();
                    if (name.isEmpty()) {
                        // Anonymous class: no name of its own, no enclosing class.
                        return scan(t.getMembers(), new Ctx(c.prefix(), null, null));
                    }
                    String q = join(c.prefix(), name);
                    return scan(t.getMembers(), new Ctx(q, q, name));
                }

                @Override
                public Void visitNewClass(NewClassTree n, Ctx c) {
                    scan(n.getArguments(), c);
                    if (n.getClassBody() != null) {
                        scan(n.getClassBody().getMembers(), new Ctx(c.prefix(), null, null));
                    }
                    return null;
                }

                @Override
                public Void visitMethod(MethodTree m, Ctx c) {
                    String name = m.getName().toString();
                    if (name.equals("<init>")) {
                        name = c.className() != null ? c.className() : last(c.prefix());
                    }
                    String q = join(c.prefix(), name);
                    long start = pos.getStartPosition(cu, m);
                    long end = pos.getEndPosition(cu, m);
                    List<String> params = new ArrayList<>();
                    for (VariableTree v : m.getParameters()) {
                        params.add("\"" + esc(v.getName().toString()) + "\"");
                    }
                    out.add("{\"path\": \"" + esc(rel) + "\", \"qualname\": \"" + esc(q)
                            + "\", \"class\": " + (c.classQual() == null ? "null" : "\"" + esc(c.classQual()) + "\"")
                            + ", \"start_line\": " + cu.getLineMap().getLineNumber(start)
                            + ", \"end_line\": " + cu.getLineMap().getLineNumber(Math.max(start, end - 1))
                            + ", \"params\": [" + String.join(", ", params) + "]}");
                    Tree body = m.getBody();
                    return body == null ? null : scan(body, new Ctx(q, null, null));
                }
            }.scan(cu.getTypeDecls(), new Ctx(pkg, null, null));
        }
        System.out.println("[\n" + String.join(",\n", out) + "\n]");
    }

    static boolean hidden(Path rel) {
        for (Path part : rel) {
            if (part.toString().startsWith(".")) {
                return true;
            }
        }
        return false;
    }

    static String join(String prefix, String name) {
        return prefix.isEmpty() ? name : prefix + "." + name;
    }

    static String last(String qual) {
        return qual.substring(qual.lastIndexOf('.') + 1);
    }

    static String esc(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"");
    }
}
