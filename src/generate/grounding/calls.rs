//! Calls checked against the repository's definitions: what a generated Python function passes
//! to `self.m(...)`, or to a function of its file or imported from the repository, must fit
//! that definition's parameters, or CPython raises a `TypeError` at the call (too many
//! positional arguments, an unknown keyword, a required argument left out, one given both by
//! position and by keyword).
//!
//! Only what is known exactly is checked: a name the generated function does not bind itself,
//! resolving to a single definition (no overloads or alternatives) that carries no decorator
//! but `staticmethod` / `classmethod`, not shadowed by an instance attribute; a `*x` argument
//! turns off the positional checks and `**x` the missing-argument one.

use super::{decorators_of, first_function, named_children, parse_python, text, Problem};
use super::{ProblemKind, ScopeUses, Target};
use crate::repo::{ClassId, Def, FnId, MaskedView};
use tree_sitter::Node;

/// One definition's parameters, as a call has to fill them.
#[derive(Debug, Default, PartialEq)]
struct Params {
    /// Parameters that take positional arguments, in order, and whether each has a default.
    positional: Vec<(String, bool)>,
    /// How many of `positional` come before a `/` (they take no keywords).
    positional_only: usize,
    keyword_only: Vec<(String, bool)>,
    var_args: bool,
    var_kwargs: bool,
}

/// The arguments of one call.
#[derive(Debug, Default)]
struct Args {
    positional: usize,
    keywords: Vec<String>,
    /// `*x`: the positional count is unknown.
    list_splat: bool,
    /// `**x`: any parameter may be filled by it.
    dict_splat: bool,
}

/// Problems with the calls in `def` (the generated function, parsed from `src`) to definitions
/// of the repository. `self_name` is the instance parameter of a method, `class` its class.
pub(super) fn bad_calls(
    view: &MaskedView,
    target: &Target,
    src: &str,
    def: Node,
    self_name: Option<&str>,
    class: Option<ClassId>,
    scopes: &ScopeUses,
) -> Vec<Problem> {
    let Some(from) = view.target() else {
        return Vec::new();
    };
    let caller = Caller {
        view,
        target,
        src,
        from,
        self_name,
        class,
        scopes,
    };
    let mut out = Vec::new();
    let mut stack = vec![def];
    while let Some(node) = stack.pop() {
        if node.kind() == "call" {
            out.extend(caller.check_call(node));
        }
        stack.extend(named_children(node).into_iter().rev());
    }
    out
}

/// The generated function whose calls are checked, and what it binds itself.
struct Caller<'a> {
    view: &'a MaskedView<'a>,
    target: &'a Target,
    src: &'a str,
    from: FnId,
    self_name: Option<&'a str>,
    class: Option<ClassId>,
    scopes: &'a ScopeUses,
}

impl Caller<'_> {
    fn check_call(&self, call: Node) -> Option<Problem> {
        let (view, src) = (self.view, self.src);
        let callee = call.child_by_field_name("function")?;
        let (fid, on_self) = match callee.kind() {
            "identifier" => {
                let name = text(src, callee);
                if self.scopes.bound.contains(name) {
                    return None;
                }
                (module_function(view, self.target, self.from, name)?, false)
            }
            "attribute" => {
                let object = callee.child_by_field_name("object")?;
                let attr = text(src, callee.child_by_field_name("attribute")?);
                if object.kind() != "identifier"
                    || Some(text(src, object)) != self.self_name
                    || self.scopes.self_assigned.contains(attr)
                {
                    return None;
                }
                (own_method(view, self.from, self.class?, attr)?, true)
            }
            _ => return None,
        };
        let (header, mut params, static_method) = definition(view, fid)?;
        let bound = on_self && !static_method;
        if bound {
            if params.positional.is_empty() {
                // `def m(*args)`: the instance goes into `*args`.
                params.var_args.then_some(())?;
            } else {
                params.positional.remove(0);
                params.positional_only = params.positional_only.saturating_sub(1);
            }
        }
        let args = arguments(src, call.child_by_field_name("arguments")?)?;
        let complaint = mismatch(&params, &args, bound)?;
        Some(Problem {
            kind: ProblemKind::BadCall,
            name: format!(
                "line {}: `{}(...)`: `{header}` {complaint}",
                call.start_position().row + 1,
                text(src, callee)
            ),
            suggestions: Vec::new(),
        })
    }
}

/// The single top-level function `name` denotes in the target's file: defined there, or
/// imported there from an in-repository module by that name.
fn module_function(view: &MaskedView, target: &Target, from: FnId, name: &str) -> Option<FnId> {
    let repo = view.repository();
    let [Def::Function(fid)] = view.resolver().resolve_name(from, name).ok()?[..] else {
        return None;
    };
    let f = view.function(fid)?;
    if f.class.is_some() {
        return None;
    }
    let module = view.file_symbols(&target.path)?.module.as_str();
    let here = repo.function_file(fid) == repo.function_file(from)
        && (f.qualname == format!("{module}.{name}") || module.is_empty() && f.qualname == name);
    let imported = view.imports_of(&target.path).iter().any(|i| {
        !i.is_wildcard
            && i.scope.is_none()
            && i.name.as_deref() == Some(f.name.as_str())
            && i.alias.as_deref().or(i.name.as_deref()) == Some(name)
    });
    (here || imported).then_some(fid)
}

/// The method `self.attr` calls: defined in the class or an in-repo base, and not also an
/// instance attribute of the class.
fn own_method(view: &MaskedView, from: FnId, class: ClassId, attr: &str) -> Option<FnId> {
    let repo = view.repository();
    let [Def::Function(fid)] = view
        .resolver()
        .resolve_name(from, &format!("self.{attr}"))
        .ok()?[..]
    else {
        return None;
    };
    let resolver = view.resolver();
    let defining = resolver.lookup_qualname(view.function(fid)?.class.as_deref()?);
    let shadowed = |c: ClassId| {
        let c = view.class(c).unwrap_or_else(|| repo.class(c));
        c.members.iter().any(|m| m == attr)
    };
    let in_defining = defining.into_iter().any(|d| match d {
        Def::Class(c) => shadowed(c),
        Def::Function(_) => false,
    });
    (!shadowed(class) && !in_defining).then_some(fid)
}

/// The header of a visible definition (its `def` line as written, one line), its parameters,
/// and whether it is a static method; `None` for a definition with other decorators.
fn definition(view: &MaskedView, fid: FnId) -> Option<(String, Params, bool)> {
    let signature = view.signature_text(fid)?;
    // Lines of a header may be indented as in their class; a parameter list does not care.
    let mut source: String = signature
        .lines()
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n");
    source.push_str("\n    pass\n");
    let tree = parse_python(&source)?;
    let def = first_function(tree.root_node())?;
    let mut static_method = false;
    for d in decorators_of(def) {
        match text(&source, d).trim_start_matches('@').trim() {
            "staticmethod" => static_method = true,
            "classmethod" => {}
            _ => return None,
        }
    }
    let params = parameters(&source, def.child_by_field_name("parameters")?)?;
    let header = text(&source, def)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let header = header.strip_suffix(" pass").unwrap_or(&header).to_string();
    Some((header, params, static_method))
}

/// A parameter list as a call sees it; `None` for forms it does not model.
fn parameters(src: &str, list: Node) -> Option<Params> {
    let mut p = Params::default();
    let mut keyword_only = false;
    for node in named_children(list) {
        let (name, default) = match node.kind() {
            "identifier" => (text(src, node).to_string(), false),
            "typed_parameter" => match node.named_child(0)? {
                n if n.kind() == "identifier" => (text(src, n).to_string(), false),
                n if n.kind() == "list_splat_pattern" => {
                    p.var_args = true;
                    keyword_only = true;
                    continue;
                }
                n if n.kind() == "dictionary_splat_pattern" => {
                    p.var_kwargs = true;
                    continue;
                }
                _ => return None,
            },
            "default_parameter" | "typed_default_parameter" => (
                text(src, node.child_by_field_name("name")?).to_string(),
                true,
            ),
            "list_splat_pattern" => {
                p.var_args = true;
                keyword_only = true;
                continue;
            }
            "keyword_separator" => {
                keyword_only = true;
                continue;
            }
            "positional_separator" => {
                p.positional_only = p.positional.len();
                continue;
            }
            "dictionary_splat_pattern" => {
                p.var_kwargs = true;
                continue;
            }
            "comment" => continue,
            _ => return None,
        };
        if keyword_only {
            p.keyword_only.push((name, default));
        } else {
            p.positional.push((name, default));
        }
    }
    Some(p)
}

/// A call's arguments; `None` for forms it does not model.
fn arguments(src: &str, list: Node) -> Option<Args> {
    let mut a = Args::default();
    if list.kind() == "generator_expression" {
        a.positional = 1;
        return Some(a);
    }
    for node in named_children(list) {
        match node.kind() {
            "keyword_argument" => a
                .keywords
                .push(text(src, node.child_by_field_name("name")?).to_string()),
            "list_splat" => a.list_splat = true,
            "dictionary_splat" => a.dict_splat = true,
            "comment" => {}
            _ => a.positional += 1,
        }
    }
    Some(a)
}

/// What CPython would refuse in a call with `args` to a definition with `params` (the instance
/// parameter already taken when `bound`).
fn mismatch(params: &Params, args: &Args, bound: bool) -> Option<String> {
    let count = |n: usize| format!("{n} positional argument{}", if n == 1 { "" } else { "s" });
    let besides = if bound { " besides `self`" } else { "" };
    if !args.list_splat && !params.var_args && args.positional > params.positional.len() {
        return Some(format!(
            "takes {}{besides} but {} were given",
            count(params.positional.len()),
            args.positional
        ));
    }
    // A keyword given twice does not compile: the syntax check reports it.
    for k in &args.keywords {
        let at = params.positional.iter().position(|(n, _)| n == k);
        let named = at.is_some_and(|i| i >= params.positional_only)
            || params.keyword_only.iter().any(|(n, _)| n == k);
        if !named && !params.var_kwargs {
            return Some(match at {
                Some(_) => format!("takes `{k}` by position only"),
                None => format!("has no parameter `{k}`"),
            });
        }
        if at.is_some_and(|i| i >= params.positional_only && i < args.positional)
            && !args.list_splat
        {
            return Some(format!("is given `{k}` both by position and by keyword"));
        }
    }
    if args.dict_splat || args.list_splat {
        return None;
    }
    let given = |n: &str| args.keywords.iter().any(|k| k == n);
    let missing: Vec<&str> = params
        .positional
        .iter()
        .enumerate()
        .filter(|(i, (n, d))| !d && *i >= args.positional && !given(n))
        .map(|(_, (n, _))| n.as_str())
        .chain(
            params
                .keyword_only
                .iter()
                .filter(|(n, d)| !d && !given(n))
                .map(|(n, _)| n.as_str()),
        )
        .collect();
    (!missing.is_empty()).then(|| {
        let list: Vec<String> = missing.iter().map(|n| format!("`{n}`")).collect();
        format!("is not given its required argument {}", list.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(header: &str) -> Params {
        let src = format!("{header}\n    pass\n");
        let tree = parse_python(&src).unwrap();
        let def = first_function(tree.root_node()).unwrap();
        parameters(&src, def.child_by_field_name("parameters").unwrap()).unwrap()
    }

    fn args(call: &str) -> Args {
        let tree = parse_python(call).unwrap();
        let expr = tree
            .root_node()
            .named_child(0)
            .unwrap()
            .named_child(0)
            .unwrap();
        assert_eq!(expr.kind(), "call", "{call}");
        arguments(call, expr.child_by_field_name("arguments").unwrap()).unwrap()
    }

    #[test]
    fn parameter_lists_are_read_as_a_call_fills_them() {
        let p = params("def f(a, b: int, /, c=1, *args, d, e: str = 'x', **kw):");
        let names = |v: &[(String, bool)]| -> Vec<(String, bool)> { v.to_vec() };
        assert_eq!(
            names(&p.positional),
            [
                ("a".to_string(), false),
                ("b".to_string(), false),
                ("c".to_string(), true)
            ]
        );
        assert_eq!(p.positional_only, 2);
        assert_eq!(
            names(&p.keyword_only),
            [("d".to_string(), false), ("e".to_string(), true)]
        );
        assert!(p.var_args && p.var_kwargs);
        let p = params("def g(self, x, *, y):");
        assert_eq!(p.positional.len(), 2);
        assert_eq!(p.keyword_only, [("y".to_string(), false)]);
        assert!(!p.var_args && !p.var_kwargs);
        let p = params("def h(*args: int, **kwargs: str):");
        assert!(p.var_args && p.var_kwargs && p.positional.is_empty());
    }

    #[test]
    fn calls_that_cpython_refuses_are_named_and_the_rest_pass() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("def f(a, b=1)", "f(1)", None),
            ("def f(a, b=1)", "f(1, 2)", None),
            ("def f(a, b=1)", "f(a=1, b=2)", None),
            (
                "def f(a, b=1)",
                "f(1, 2, 3)",
                Some("takes 2 positional arguments"),
            ),
            ("def f(a, b=1)", "f(1, c=2)", Some("has no parameter `c`")),
            (
                "def f(a, b=1)",
                "f(1, a=2)",
                Some("both by position and by keyword"),
            ),
            ("def f(a, b=1)", "f(b=2)", Some("required argument `a`")),
            ("def f(a, b=1)", "f(*xs)", None),
            ("def f(a, b=1)", "f(*xs, c=1)", Some("has no parameter `c`")),
            ("def f(a, b=1)", "f(**kw)", None),
            ("def f(a, b=1)", "f(x for x in y)", None),
            (
                "def f(a, /, b)",
                "f(a=1, b=2)",
                Some("`a` by position only"),
            ),
            ("def f(a, /, **kw)", "f(1, a=2)", None),
            ("def f(a, *, key)", "f(1)", Some("required argument `key`")),
            ("def f(a, *, key)", "f(1, key=2)", None),
            (
                "def f(a, *, key)",
                "f(1, 2)",
                Some("takes 1 positional argument"),
            ),
            ("def f(*args, **kw)", "f(1, 2, x=3)", None),
            ("def f(a, **kw)", "f(1, z=3)", None),
        ];
        for (header, call, want) in cases {
            let got = mismatch(&params(&format!("{header}:")), &args(call), false);
            match want {
                None => assert_eq!(got, None, "{header} / {call}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{header} / {call}: {got:?}"
                ),
            }
        }
    }
}
