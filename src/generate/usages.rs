//! Where the repository calls the target: call sites in visible functions (tests are hidden
//! from the view in evaluation) that resolve to the target, each shown as the statement that
//! makes the call with the line before it. They say what callers pass and what they do with
//! the result — the contract a docstring often leaves out.

use serde::Serialize;

use super::postprocess;
use crate::repo::mask::MaskedView;
use crate::repo::{Def, FnId, Resolver, Unresolved};

/// Most call sites shown, one per calling function.
pub const MAX_USAGES: usize = 4;
/// Lines shown above the call's own line.
const LINES_BEFORE: usize = 1;
/// Lines a call may continue over when its parentheses stay open.
const MAX_CONTINUATION: usize = 4;
/// A longer excerpt is not shown (a call buried in a huge expression).
const MAX_EXCERPT_CHARS: usize = 400;

/// One call of the target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    /// The calling function.
    pub caller: String,
    pub path: String,
    /// The line of the call.
    pub line: usize,
    /// The excerpt, dedented as a whole.
    pub code: String,
    /// The text of the call's own line, trimmed (to tell whether the file view shows it).
    #[serde(skip)]
    pub call_line: String,
}

/// The target's call sites, callers of its own class first, then of its file, then the rest in
/// path order; at most [`MAX_USAGES`]. Calls are matched by name, then kept only when the
/// repository's resolver takes them to the target (the view's own resolver cannot: the target
/// is hidden from it).
pub fn usages(view: &MaskedView, target: FnId) -> Vec<Usage> {
    let repo = view.repository();
    let resolver = repo.resolver();
    let t = repo.function(target);
    let mut found: Vec<(u8, Usage)> = Vec::new();
    for (id, f) in view.functions() {
        // A function enclosing the target is shown with the target cut out, calls and all.
        let encloses = f.path == t.path
            && f.span.start_byte <= t.span.start_byte
            && t.span.end_byte <= f.span.end_byte;
        if id == target || encloses {
            continue;
        }
        let call = f.calls.iter().find(|c| {
            let callee = c.callee.strip_prefix("new ").unwrap_or(&c.callee);
            callee.rsplit('.').next() == Some(t.name.as_str())
                && receiver_known(&resolver, id, callee)
                && resolver
                    .resolve_name(id, callee)
                    .is_ok_and(|defs| defs.contains(&Def::Function(target)))
        });
        let (Some(call), Some(code)) = (call, view.function_code(id)) else {
            continue;
        };
        let Some((excerpt, call_line)) =
            excerpt(&code, call.line.saturating_sub(f.span.start_line))
        else {
            continue;
        };
        let rank = match (f.class.is_some() && f.class == t.class, f.path == t.path) {
            (true, _) => 0,
            (false, true) => 1,
            _ => 2,
        };
        found.push((
            rank,
            Usage {
                caller: f.qualname.clone(),
                path: f.path.clone(),
                line: call.line,
                code: excerpt,
                call_line,
            },
        ));
    }
    found.sort_by(|a, b| (a.0, &a.1.path, a.1.line).cmp(&(b.0, &b.1.path, b.1.line)));
    found.into_iter().take(MAX_USAGES).map(|(_, u)| u).collect()
}

/// Whether the callee's receiver is something the resolver knows rather than guesses: a
/// plain name, a method of `self` / `cls` / `this` / `super()`, or a name on a module or class
/// of the repository. The resolver's last resort — a value of unknown type taken for the one
/// class with a method of that name — would make `text.replace(..)` a call of `Foo.replace`.
fn receiver_known(resolver: &Resolver, from: FnId, callee: &str) -> bool {
    match callee.rsplit_once('.') {
        None => true,
        Some(("self" | "cls" | "this" | "super" | "super()", _)) => true,
        Some((head, _)) if head.contains('(') || head.starts_with("self.") => false,
        Some((head, _)) => matches!(
            resolver.resolve_name(from, head),
            Ok(_) | Err(Unresolved::Module { .. })
        ),
    }
}

/// Lines of `code` around its line `at` (0-based): the one before, the call's line, and the
/// lines that close its parentheses; dedented. `None` when too long.
fn excerpt(code: &str, at: usize) -> Option<(String, String)> {
    let lines: Vec<&str> = code.lines().collect();
    let call_line = lines.get(at)?.trim().to_string();
    let mut end = at;
    let mut depth = 0i32;
    loop {
        for c in lines[end].chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
        }
        if depth <= 0 || end + 1 >= lines.len() || end >= at + MAX_CONTINUATION {
            break;
        }
        end += 1;
    }
    // Neither the header (the call is the first line) nor a blank line is worth showing.
    let mut start = at.saturating_sub(LINES_BEFORE).max(1.min(at));
    while start < at && lines[start].trim().is_empty() {
        start += 1;
    }
    let text = postprocess::dedent(&lines[start..=end].join("\n"));
    (text.len() <= MAX_EXCERPT_CHARS).then_some((text, call_line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{resolve_target, temp_repository};

    #[test]
    fn calls_that_resolve_to_the_target_are_shown_own_class_first_and_tests_stay_hidden() {
        let (_dir, repo) = temp_repository(&[
            (
                "pkg/cache.py",
                "class Cache(dict):\n    def __init__(self, values=None):\n        if values:\n            \
                 self.update(values)\n\n    def update(self, items):\n        pass\n\n\
                 class Other:\n    def update(self, x):\n        pass\n\n    def refresh(self):\n        \
                 self.update(1)\n",
            ),
            (
                "pkg/use.py",
                "from pkg.cache import Cache\n\ndef fill(pairs):\n    c = Cache()\n    c.update(\n        \
                 dict(pairs),\n    )\n    return c\n",
            ),
            (
                "tests/test_cache.py",
                "from pkg.cache import Cache\n\ndef test_update():\n    Cache().update({1: 2})\n",
            ),
        ]);
        let id = resolve_target(&repo, "pkg.cache.Cache.update").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let found = usages(&view, id);
        let callers: Vec<&str> = found.iter().map(|u| u.caller.as_str()).collect();
        // `Other.refresh` calls its own class's `update`; the test file is hidden; `c.update`
        // resolves through the last-resort rule only when unique, which it is not here.
        assert_eq!(callers, ["pkg.cache.Cache.__init__"], "{found:?}");
        assert_eq!(found[0].line, 4);
        assert_eq!(found[0].code, "if values:\n    self.update(values)\n");
        assert_eq!(found[0].call_line, "self.update(values)");
    }

    #[test]
    fn a_call_on_a_value_of_unknown_type_is_not_taken_for_the_only_method_of_that_name() {
        let (_dir, repo) = temp_repository(&[
            (
                "pkg/m2m.py",
                "class ManyToMany:\n    def replace(self, key, newkey):\n        pass\n",
            ),
            (
                "pkg/text.py",
                "from pkg.m2m import ManyToMany\n\ndef quote(arg):\n    return arg.replace('a', 'b')\n\n\
                 def rename(m):\n    ManyToMany.replace(m, 1, 2)\n",
            ),
        ]);
        let id = resolve_target(&repo, "pkg.m2m.ManyToMany.replace").unwrap();
        // The resolver alone takes `arg.replace` for the only method named `replace`.
        let resolver = repo.resolver();
        let quote = resolve_target(&repo, "pkg.text.quote").unwrap();
        assert_eq!(
            resolver.resolve_name(quote, "arg.replace"),
            Ok(vec![Def::Function(id)])
        );
        let view = MaskedView::new(&repo, Some(id), false);
        let callers: Vec<String> = usages(&view, id).into_iter().map(|u| u.caller).collect();
        assert_eq!(callers, ["pkg.text.rename"]);
    }

    #[test]
    fn an_excerpt_runs_to_the_line_that_closes_the_call() {
        let code = "def fill(pairs):\n    c = Cache()\n    c.update(\n        dict(pairs),\n    )\n    return c\n";
        let (text, line) = excerpt(code, 2).unwrap();
        assert_eq!(text, "c = Cache()\nc.update(\n    dict(pairs),\n)\n");
        assert_eq!(line, "c.update(");
        // A call on the first body line shows no header.
        let (text, _) = excerpt("def f(x):\n    return g(x)\n", 1).unwrap();
        assert_eq!(text, "return g(x)\n");
        // Nor a blank line above it.
        let (text, _) = excerpt("def f(x):\n    y = 1\n\n    return g(x)\n", 3).unwrap();
        assert_eq!(text, "return g(x)\n");
    }
}
