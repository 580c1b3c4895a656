//! The imports a module the model wrote (its tests) forgot: the small model often uses a name
//! the target's file has (`socket`, a class imported from a sibling module) without importing
//! it, and the test then fails the same way with every answer, telling nothing apart.

use super::{
    function_of, import_suggestions, module_names, named_children, names_bound_in, parse_python,
    scope_uses, ScopeUses,
};
use crate::generate::Target;
use crate::repo::symbols::PY_BUILTINS;
use crate::repo::MaskedView;

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
}
