#!/usr/bin/env python3
"""Every function and method Python's own `ast` finds under a repository root, as JSON.

Usage: python3 scripts/ast_functions.py ROOT

Prints one JSON object:
  {"functions": [{"qualname", "kind", "path", "start_line", "end_line", "params", "docstring"}...],
   "syntax_errors": [path, ...]}
sorted by (path, start_line, qualname). It is the reference that repohop's Python front end is
checked against (tests/ast_parity.rs), so it names things exactly as repohop does:

- module: as repohop's walker names it (src/repo/walk.rs `python_module`): the path relative to
  ROOT without `.py`, `/` -> `.`, `pkg/__init__.py` -> `pkg`; folders above the outermost package
  (chain of folders holding an `__init__.py`) are dropped, and a leading `src/` outside packages;
- qualname: module + enclosing classes and functions (`mod.Class.method`, `mod.outer.inner`;
  no `<locals>`);
- kind: "method" when defined directly in a class body, else "function";
- start_line: the first decorator's line if any, else the `def` line; end_line: `end_lineno`;
- params: names in order, `*args` / `**kwargs` marked; docstring: `ast.get_docstring`;
- calls: [callee, line] for each call the function's own code makes, sorted by (line, callee): the
  callee as written with line breaks (and the indentation around them) removed, on the line
  where the callee ends. Calls in nested functions belong to them; the decorators, default
  values and annotations of a nested function, and the body of a class nested in the function,
  belong to the function.

Walks every `.py` file, skipping hidden files and folders (names starting with `.`), as the
repohop walker does. Files `ast` cannot parse are listed under "syntax_errors".
"""

import ast
import json
import os
import sys


def module_name(rel, package_dirs):
    parts = rel[: -len(".py")].split("/")
    dirs = parts[:-1]
    first_pkg = len(dirs)
    while first_pkg > 0 and "/".join(dirs[:first_pkg]) in package_dirs:
        first_pkg -= 1
    if first_pkg < len(dirs):
        keep_from = first_pkg
    elif dirs and dirs[0] == "src":
        keep_from = 1
    else:
        keep_from = 0
    kept = parts[keep_from:]
    if kept[-1] == "__init__":
        kept.pop()
    return ".".join(kept)


def params(args):
    out = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        out.append("*" + args.vararg.arg)
    out += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        out.append("**" + args.kwarg.arg)
    return out


def own_calls(fn, source):
    """The calls `fn` itself makes (see the module docstring for the attribution rules)."""
    found = []

    def visit(node):
        if isinstance(node, ast.Call):
            seg = ast.get_source_segment(source, node.func) or ""
            callee = "".join(line.strip() for line in seg.split("\n"))
            found.append((node.func.end_lineno, callee))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # Only what runs when the enclosing function runs.
            for d in node.decorator_list:
                visit(d)
            visit(node.args)
            if node.returns:
                visit(node.returns)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in fn.body:
        visit(stmt)
    found.sort()
    return [[callee, line] for line, callee in found]


def collect(tree, module, rel, out, source):
    def visit(node, prefix, in_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{prefix}.{child.name}" if prefix else child.name
                start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                out.append(
                    {
                        "qualname": qual,
                        "kind": "method" if in_class else "function",
                        "path": rel,
                        "start_line": start,
                        "end_line": child.end_lineno,
                        "params": params(child.args),
                        "docstring": ast.get_docstring(child),
                        "calls": own_calls(child, source),
                    }
                )
                visit(child, qual, False)
            elif isinstance(child, ast.ClassDef):
                qual = f"{prefix}.{child.name}" if prefix else child.name
                visit(child, qual, True)
            else:
                # if/try/with/for blocks do not open a scope: keep the enclosing one.
                visit(child, prefix, in_class)

    visit(tree, module, False)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: ast_functions.py ROOT  (ROOT must be a directory)")
    root = sys.argv[1]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("."):
                full = os.path.join(dirpath, name)
                files.append((full, os.path.relpath(full, root).replace(os.sep, "/")))
    package_dirs = {
        rel[: -len("__init__.py")].rstrip("/") for _, rel in files
        if rel == "__init__.py" or rel.endswith("/__init__.py")
    }
    functions, errors = [], []
    for full, rel in files:
        try:
            with open(full, "rb") as f:
                raw = f.read()
            tree = ast.parse(raw, filename=rel)
            source = raw.decode("utf-8-sig")
        except (SyntaxError, ValueError, UnicodeDecodeError):
            errors.append(rel)
            continue
        collect(tree, module_name(rel, package_dirs), rel, functions, source)
    functions.sort(key=lambda f: (f["path"], f["start_line"], f["qualname"]))
    json.dump({"functions": functions, "syntax_errors": errors}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
