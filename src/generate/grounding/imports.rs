//! The imports a module the model wrote (its tests) forgot: the small model often uses a name
//! the target's file has (`socket`, a class imported from a sibling module) without importing
//! it, and the test then fails the same way with every answer, telling nothing apart.

use super::{
    dedent_first, function_of, import_suggestions, module_names, named_children, names_bound_in,
    parse_python, scope_uses, text, Grounding, ProblemKind, ScopeUses, MAX_NODE_DEPTH,
};
use crate::generate::postprocess::code_blocks;
use crate::generate::Target;
use crate::repo::lang;
use crate::repo::symbols::{bound_name, PY_BUILTINS, PY_STDLIB_MODULES};
use crate::repo::{Import, ImportTarget, MaskedView};
use tree_sitter::Node;

/// Import statements for the names the top-level functions of `code` (Python) read and nothing
/// in it binds, in order of first use: from the target's module `module` when it binds the name
/// at its top level (its definitions and its imports alike), else the one import of a
/// repository definition or module, or of a standard module, that binds it. Names with no
/// single answer are left alone, and so is a module with a wildcard import.
pub fn missing_imports(
    view: &MaskedView,
    target: &Target,
    module: &str,
    code: &str,
) -> Vec<String> {
    let Some(tree) = parse_python(code) else {
        return Vec::new();
    };
    let (bound, false) = names_bound_in(code, tree.root_node()) else {
        return Vec::new();
    };
    let mut scopes = ScopeUses::default();
    for stmt in named_children(tree.root_node()) {
        if let Some(def) = function_of(stmt) {
            scope_uses(code, def, None, false, &bound, &mut scopes, 0);
        }
    }
    let theirs = module_names(view, &target.path);
    let mut out = Vec::new();
    for name in &scopes.free {
        if PY_BUILTINS.contains(&name.as_str()) {
            continue;
        }
        let import = if theirs.names.contains(name) {
            Some(format!("from {module} import {name}"))
        } else if name == "pytest" {
            // Not a standard module, but what runs the tests.
            Some("import pytest".to_string())
        } else {
            Some(import_suggestions(view, name))
                .filter(|found| found.len() == 1)
                .and_then(|mut found| found.pop())
        };
        out.extend(import);
    }
    out
}

/// Imports to put at the top of a generated function's body, for the names `g` found undefined
/// in it: the small model often writes `import x` above its definition, and only the definition
/// is kept; and it reads standard modules (`collections.Counter(...)`) its file never imports.
/// For each such name, in order: an import of the answer's own code (`answer`, its top level)
/// that binds it and resolves from the target's file to this repository or a standard module;
/// else `import m` for a module `m` the function reads only as `m.attr`, when that is the one
/// import that binds it (a standard module no repository module shadows, or a top-level module
/// of the repository). Other names are left to the repair round.
pub fn body_imports(
    view: &MaskedView,
    target: &Target,
    g: &Grounding,
    function: &str,
    answer: &str,
) -> Vec<String> {
    let undefined: Vec<&str> = g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::UndefinedName)
        .map(|p| p.name.as_str())
        .collect();
    if undefined.is_empty() {
        return Vec::new();
    }
    let written = answer_imports(view, target, answer);
    let mut out = Vec::new();
    for name in undefined {
        let import = match written.iter().find(|(bound, _)| bound == name) {
            Some((_, statement)) => Some(statement.clone()),
            None => {
                let module = format!("import {name}");
                (import_suggestions(view, name) == [module.as_str()]
                    && read_only_as_module(function, name))
                .then_some(module)
            }
        };
        out.extend(import.filter(|i| !out.contains(i)));
    }
    out
}

/// The top-level imports of the answer's code that resolve from the target's file, each with
/// the name it binds, as one-name statements (one wrong name must not fail the others).
fn answer_imports(view: &MaskedView, target: &Target, answer: &str) -> Vec<(String, String)> {
    let (Some(front_end), Some(file)) = (lang::for_path(&target.path), view.file_id(&target.path))
    else {
        return Vec::new();
    };
    let module = view
        .file_symbols(&target.path)
        .map(|s| s.module.clone())
        .unwrap_or_default();
    let resolver = view.resolver();
    let mut out = Vec::new();
    for block in code_blocks(answer) {
        let symbols = front_end.parse(&target.path, &module, &block);
        for imp in symbols.imports.iter().filter(|i| i.scope.is_none()) {
            if imp.is_wildcard || imp.module == "__future__" {
                continue;
            }
            let resolves = match resolver.resolve_import(file, imp) {
                Ok(ImportTarget::Module { .. } | ImportTarget::Defs { .. }) => true,
                Ok(ImportTarget::External { module }) => {
                    let top = module.split('.').next().unwrap_or_default();
                    PY_STDLIB_MODULES.binary_search(&top).is_ok()
                }
                Err(_) => false,
            };
            if resolves {
                out.push((bound_name(imp, false).to_string(), import_statement(imp)));
            }
        }
    }
    out
}

/// `imp` written back as a Python statement.
fn import_statement(imp: &Import) -> String {
    let alias = imp
        .alias
        .as_ref()
        .map(|a| format!(" as {a}"))
        .unwrap_or_default();
    match &imp.name {
        Some(name) => format!(
            "from {}{} import {name}{alias}",
            ".".repeat(imp.level),
            imp.module
        ),
        None => format!("import {}{alias}", imp.module),
    }
}

/// Whether every read of `name` in `function` is the object of an attribute (`name.x`), as a
/// module is read; a name also read bare may be a variable the model forgot.
fn read_only_as_module(function: &str, name: &str) -> bool {
    let source = dedent_first(function);
    let Some(tree) = parse_python(&source) else {
        return false;
    };
    fn reads(src: &str, node: Node, name: &str, depth: usize, seen: &mut (bool, bool)) {
        if depth > MAX_NODE_DEPTH {
            seen.1 = true;
            return;
        }
        if node.kind() == "identifier" && text(src, node) == name {
            let object = node.parent().is_some_and(|p| {
                p.kind() == "attribute" && p.child_by_field_name("object") == Some(node)
            });
            if object {
                seen.0 = true;
            } else {
                seen.1 = true;
            }
        }
        for child in named_children(node) {
            reads(src, child, name, depth + 1, seen);
        }
    }
    // (read as `name.x`, read otherwise)
    let mut seen = (false, false);
    reads(&source, tree.root_node(), name, 0, &mut seen);
    seen == (true, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{resolve_target, temp_repository};

    #[test]
    fn names_the_tests_forgot_are_imported_from_the_targets_module_or_where_they_live() {
        let (_dir, repo) = temp_repository(&[
            ("pkg/__init__.py", ""),
            (
                "pkg/conf.py",
                "class Conf:\n    pass\n\nclass Twin:\n    pass\n",
            ),
            (
                "pkg/other.py",
                "class Twin:\n    pass\n\nclass Lone:\n    pass\n",
            ),
            (
                "pkg/net.py",
                "import socket\nfrom .conf import Conf\n\n\
                 def helper():\n    return 1\n\n\
                 def send(sock, data):\n    \"\"\"Send.\"\"\"\n    return sock.send(data)\n",
            ),
        ]);
        let id = resolve_target(&repo, "pkg.net.send").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let code = "from pkg.net import send\n\n\
                    def test_one():\n    s = socket.socket()\n    assert send(s, b'') == 0\n\n\
                    def test_two():\n    with pytest.raises(TypeError):\n        send(Conf(), helper())\n\n\
                    def test_three():\n    x = Lone()\n    assert Twin and json.dumps(x) and nowhere\n";
        let found = missing_imports(&view, &target, "pkg.net", code);
        assert_eq!(
            found,
            [
                "from pkg.net import socket",
                "import pytest",
                "from pkg.net import Conf",
                "from pkg.net import helper",
                "from pkg.other import Lone",
                "import json",
            ],
            "Twin is defined twice and `nowhere` nowhere: both left alone"
        );
        let fixed = format!("{}\n{code}", found.join("\n"));
        assert!(missing_imports(&view, &target, "pkg.net", &fixed).is_empty());
        let wildcard = format!("from pkg.net import *\n{code}");
        assert!(missing_imports(&view, &target, "pkg.net", &wildcard).is_empty());
    }

    #[test]
    fn the_answers_own_imports_and_standard_modules_read_as_modules_bind_the_undefined_names() {
        let (_dir, repo) = temp_repository(&[
            ("pkg/__init__.py", ""),
            ("pkg/util.py", "def helper(xs):\n    return xs\n"),
            (
                "pkg/core.py",
                "def count(xs):\n    \"\"\"Count.\"\"\"\n    return len(xs)\n",
            ),
        ]);
        let id = resolve_target(&repo, "pkg.core.count").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let answer = "```python\nfrom __future__ import annotations\nimport os\n\
                      from collections import Counter, nothing as naught\n\
                      from .util import helper, missing\nimport sixish\n\n\
                      def count(xs):\n    \"\"\"Count.\"\"\"\n    \
                      return Counter(helper(xs)), json.dumps(xs), missing, sixish.x, os.sep, \
                      string, string.digits\n```";
        let function = "def count(xs):\n    \"\"\"Count.\"\"\"\n    \
                        return Counter(helper(xs)), json.dumps(xs), missing, sixish.x, os.sep, \
                        string, string.digits\n";
        let g = super::super::check(&view, &target, function);
        let undefined: Vec<&str> = g.problems.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            undefined,
            ["Counter", "helper", "json", "missing", "sixish", "os", "string"]
        );
        assert_eq!(
            body_imports(&view, &target, &g, function, answer),
            [
                "from collections import Counter",
                "from .util import helper",
                "import json",
                "import os",
            ],
            "`missing` is not in pkg.util, `sixish` is not a standard module, and `string` is \
             also read bare"
        );
        let nothing_written = body_imports(&view, &target, &g, function, function);
        assert_eq!(nothing_written, ["import json", "import os"]);
    }
}
