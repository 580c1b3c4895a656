//! Grounding: checks a generated function's names against the repository model without running
//! anything, so that a repair round can tell the model what does not exist and what does.
//!
//! Python: the generated definition is parsed with tree-sitter; every name it reads must be bound in the function (Python binds a name
//! function-wide wherever it is assigned; nested scopes are merged into the function's, which only
//! errs on the lenient side), a builtin, bound at the top level of the target's file (the masked
//! file: without the target), or the target itself. For a method, `self.x` reads must name an
//! attribute or method of the class or of its in-repo bases; a base from outside the repository
//! turns that check off for the class, since it may provide anything.
//!
//! Java: calls without a receiver or on `this` must name a method of the class, its enclosing
//! classes, its in-repo supertypes or a static import, and `this.x` a field or method of them
//! (a supertype from outside the repository turns both off).

use super::{Completion, Target};
use crate::repo::lang;
use crate::repo::mask::edit_distance;
use crate::repo::symbols::{PY_BUILTINS, PY_STDLIB_MODULES};
use crate::repo::{ClassId, Def, FnId, ImportTarget, Lang, MaskedView};
use std::collections::HashSet;
use tree_sitter::{Node, Tree};

mod calls;
mod imports;
mod recursion;
mod slots;
mod typed;

pub use imports::missing_imports;

/// The result of checking one generated function.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Grounding {
    /// The target's file (for the repair message).
    pub path: String,
    /// The target's language (`None` only in a default value).
    pub lang: Option<Lang>,
    /// Free names (and `self.x` attributes) that were looked up, in order of first use.
    pub checked: Vec<String>,
    pub problems: Vec<Problem>,
    /// The target's class, when it is a method whose class is known.
    pub class_name: Option<String>,
    /// Attributes and methods of that class (own and in-repo inherited), for the repair message.
    pub class_attributes: Vec<String>,
    /// Builtin types the class derives from (directly or through in-repo bases): a missing
    /// attribute with no close name is answered with their methods.
    pub builtin_bases: Vec<String>,
    /// Imports [`check_importing`] put at the top of the body before this check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added_imports: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The undefined name, the missing attribute (without `self.`), the recursive call's name,
    /// or where the function stops parsing (`line N: ...`).
    pub name: String,
    /// Close existing names (an `import` statement where the name exists elsewhere).
    pub suggestions: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// A name read in the function that nothing binds.
    UndefinedName,
    /// `self.x` read where the class (and its in-repo bases) has no `x`.
    MissingAttribute,
    /// A call of the target itself that the call it makes reaches again: it recurses forever.
    SelfRecursion,
    /// A local read before anything assigns it, on the way every call takes.
    UnboundLocal,
    /// The function does not parse.
    Syntax,
    /// A call to a repository function with arguments its parameters do not take.
    BadCall,
    /// `v.y` where `v`'s repository type is known and has no `y`.
    TypedAttribute,
    /// `self.x = …` where the class's `__slots__` (and its family's) leave no room for `x`.
    SlotStore,
}

/// What a syntax error weighs, in problems: an answer that does not parse fails every test,
/// while one with names flagged may still pass (the check errs both ways), so it ranks below
/// any answer that parses (checks find a few problems at most).
pub const SYNTAX_WEIGHT: usize = 1_000;

impl Grounding {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// How much the check holds against the answer, for choosing among answers: the number
    /// of its problems, or [`SYNTAX_WEIGHT`] when it does not parse (the check's only problem
    /// then).
    pub fn weight(&self) -> usize {
        if self.problems.iter().any(|p| p.kind == ProblemKind::Syntax) {
            SYNTAX_WEIGHT
        } else {
            self.problems.len()
        }
    }
}

/// Most attributes listed for a class in the repair message.
const MAX_LISTED_ATTRIBUTES: usize = 30;
/// Most suggestions per problem.
const MAX_SUGGESTIONS: usize = 5;
/// How deep base classes and wildcard imports are followed.
const MAX_DEPTH: usize = 8;
/// How deep syntax trees are walked (guards the stack against pathological nesting).
const MAX_NODE_DEPTH: usize = 400;

/// Checks `function` (the generated definition, header + body, indented as in its file with
/// `target.indent` columns) against what the masked view shows.
pub fn check(view: &MaskedView, target: &Target, function: &str) -> Grounding {
    let mut g = Grounding {
        path: target.path.clone(),
        lang: Some(target.lang),
        ..Grounding::default()
    };
    if target.lang == Lang::Java {
        check_java(view, target, function, &mut g);
        return g;
    }
    let source = dedent_first(function);
    let Some(tree) = parse_python(&source) else {
        return g;
    };
    let root = tree.root_node();
    if root.has_error() {
        g.problems.push(Problem {
            kind: ProblemKind::Syntax,
            name: syntax_location(&source, root, 0),
            suggestions: Vec::new(),
        });
        return g;
    }
    let Some(def) = first_function(root) else {
        g.problems.push(Problem {
            kind: ProblemKind::Syntax,
            name: "no function definition".into(),
            suggestions: Vec::new(),
        });
        return g;
    };
    if let Some(error) = compile_error(&source, root) {
        g.problems.push(Problem {
            kind: ProblemKind::Syntax,
            name: error,
            suggestions: Vec::new(),
        });
        return g;
    }
    check_python(view, target, &source, def, &mut g);
    g
}

/// Checks `completion` like [`check`], first putting at the top of its body the imports it lacks
/// that [`imports::body_imports`] finds (from the model's own `answer`, or modules read as such),
/// when that leaves fewer problems; the result lists them.
pub fn check_importing(
    view: &MaskedView,
    target: &Target,
    completion: &mut Completion,
    answer: &str,
) -> Grounding {
    let g = check(view, target, &completion.function);
    if target.lang != Lang::Python {
        return g;
    }
    let imports = imports::body_imports(view, target, &g, &completion.function, answer);
    let Some(body) = body_with_imports(&completion.body, &imports) else {
        return g;
    };
    let fixed = completion.with_body(&target.shape(), body);
    let mut again = check(view, target, &fixed.function);
    if again.problems.len() >= g.problems.len() {
        return g;
    }
    again.added_imports = imports;
    *completion = fixed;
    again
}

/// `body` (a Python function body, dedented) with `imports` as its first statements, after its
/// docstring; `None` when there are none or the body does not parse.
fn body_with_imports(body: &str, imports: &[String]) -> Option<String> {
    if imports.is_empty() {
        return None;
    }
    let tree = parse_python(body)?;
    let first = named_children(tree.root_node())
        .into_iter()
        .find(|n| n.kind() != "comment");
    let at = match first {
        Some(doc) if is_docstring(doc) => body[doc.end_byte()..]
            .find('\n')
            .map_or(body.len(), |i| doc.end_byte() + i + 1),
        _ => 0,
    };
    let mut out = body[..at].to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    for import in imports {
        out.push_str(import);
        out.push('\n');
    }
    out.push_str(&body[at..]);
    Some(out)
}

/// The user message of the repair round: what is undefined and what exists instead; `None`
/// when there are no problems.
pub fn repair_request(g: &Grounding) -> Option<String> {
    if g.problems.is_empty() {
        return None;
    }
    let mut out = String::new();
    let syntax: Vec<&Problem> = g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::Syntax)
        .collect();
    let java = g.lang == Some(Lang::Java);
    let (language, fence, what) = if java {
        ("Java", "java", "method")
    } else {
        ("Python", "python", "function")
    };
    if let Some(p) = syntax.first() {
        out.push_str(&format!(
            "Your {what} is not valid {language} ({}).\n",
            p.name
        ));
    }
    let names: Vec<&Problem> = g
        .problems
        .iter()
        .filter(|p| {
            matches!(
                p.kind,
                ProblemKind::UndefinedName | ProblemKind::MissingAttribute
            )
        })
        .collect();
    if !names.is_empty() {
        out.push_str(&format!(
            "Your {what} uses names that do not exist in `{}`:\n",
            g.path
        ));
        let class = g.class_name.as_deref().unwrap_or("the class");
        for p in &names {
            match p.kind {
                ProblemKind::UndefinedName if java => {
                    out.push_str(&format!(
                        "- `{}(...)` is not a method of `{class}`, its superclasses or the static imports",
                        p.name
                    ));
                }
                ProblemKind::UndefinedName => {
                    out.push_str(&format!("- `{}` is not defined", p.name));
                }
                _ => {
                    let this = if java { "this" } else { "self" };
                    out.push_str(&format!(
                        "- `{this}.{}`: class `{class}` has no attribute `{}`",
                        p.name, p.name
                    ));
                }
            }
            out.push_str(&did_you_mean(&p.suggestions));
            out.push('\n');
        }
        if names
            .iter()
            .any(|p| p.kind == ProblemKind::MissingAttribute)
            && !g.class_attributes.is_empty()
        {
            let shown: Vec<&str> = g
                .class_attributes
                .iter()
                .take(MAX_LISTED_ATTRIBUTES)
                .map(String::as_str)
                .collect();
            let more = if g.class_attributes.len() > shown.len() {
                ", ..."
            } else {
                ""
            };
            out.push_str(&format!(
                "Class `{class}` has these attributes and methods: {}{more}\n",
                shown.join(", ")
            ));
        }
        let unmatched = names
            .iter()
            .any(|p| p.kind == ProblemKind::MissingAttribute && p.suggestions.is_empty());
        if unmatched {
            for base in &g.builtin_bases {
                let Some((_, attrs)) = BUILTIN_BASE_ATTRS.iter().find(|(b, _)| b == base) else {
                    continue;
                };
                let mut listed: Vec<String> = attrs.iter().map(|a| format!("`{a}`")).collect();
                if ITEM_ACCESS_BASES.contains(&base.as_str()) {
                    listed.push("item access (`self[...]`)".into());
                }
                out.push_str(&format!(
                    "Class `{class}` derives from the builtin `{base}`, which gives it: {}.\n",
                    listed.join(", ")
                ));
            }
        }
    }
    for p in g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::UnboundLocal)
    {
        out.push_str(&format!(
            "Your {what} reads `{}` before anything assigns it: every call would fail there \
             (UnboundLocalError). Give it a value first.\n",
            p.name
        ));
    }
    for p in g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::SelfRecursion)
    {
        out.push_str(&format!(
            "Your {what} calls `{}` itself before it can return: it would recurse forever. \
             Implement what the {what} has to do instead.\n",
            p.name
        ));
    }
    let calls: Vec<&Problem> = g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::BadCall)
        .collect();
    if !calls.is_empty() {
        out.push_str(&format!(
            "Your {what} calls functions of the repository with arguments they do not take \
             (each call would raise a TypeError):\n"
        ));
        for p in calls {
            out.push_str(&format!("- {}\n", p.name));
        }
        out.push_str("Call each one as its definition shows.\n");
    }
    let typed: Vec<&Problem> = g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::TypedAttribute)
        .collect();
    if !typed.is_empty() {
        out.push_str(&format!(
            "Your {what} reads attributes that objects of these repository types do not have \
             (each read would raise an AttributeError):\n"
        ));
        for p in typed {
            out.push_str(&format!("- {}{}\n", p.name, did_you_mean(&p.suggestions)));
        }
    }
    let stores: Vec<&Problem> = g
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::SlotStore)
        .collect();
    if !stores.is_empty() {
        let class = g.class_name.as_deref().unwrap_or("the class");
        out.push_str(&format!(
            "Instances of `{class}` have `__slots__` and no `__dict__`: they can only hold \
             the attributes the slots name, so these stores would raise an AttributeError:\n"
        ));
        for p in stores {
            out.push_str(&format!(
                "- `self.{}`{}\n",
                p.name,
                did_you_mean(&p.suggestions)
            ));
        }
        out.push_str("Keep the state in the slots the class has, or leave it out.\n");
    }
    if java {
        out.push_str(
            "Rewrite the complete method using only methods and names that exist (declared in \
             the class or its superclasses, imported in the file, or parameters).",
        );
    } else {
        out.push_str(
            "Rewrite the complete function using only names that exist (imported in the file, \
             defined in the file, builtins, or parameters; you may import a module inside the \
             function).",
        );
    }
    out.push_str(&format!(
        " Reply with the complete {what} in one ```{fence} code block."
    ));
    Some(out)
}

fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        return String::new();
    }
    let (imports, names): (Vec<&String>, Vec<&String>) = suggestions
        .iter()
        .partition(|s| s.starts_with("import ") || s.starts_with("from "));
    let mut parts = Vec::new();
    if !names.is_empty() {
        let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        parts.push(format!("did you mean {}?", list.join(" or ")));
    }
    if !imports.is_empty() {
        let list: Vec<String> = imports.iter().map(|n| format!("`{n}`")).collect();
        parts.push(format!("it can be imported: {}", list.join(" or ")));
    }
    format!(" ({})", parts.join("; "))
}

// ---------------------------------------------------------------------------------------------
// Python

fn parse_python(source: &str) -> Option<Tree> {
    lang::parse_tree(Lang::Python, source)
}

fn parse_java(source: &str) -> Option<Tree> {
    lang::parse_tree(Lang::Java, source)
}

/// Removes the first non-blank line's indentation from every line (as much of it as a line has).
fn dedent_first(text: &str) -> String {
    let indent = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .unwrap_or(0);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let ws = line.len() - line.trim_start().len();
        out.push_str(line.get(ws.min(indent)..).unwrap_or(line.trim_start()));
        out.push('\n');
    }
    out
}

fn text<'s>(src: &'s str, node: Node) -> &'s str {
    node.utf8_text(src.as_bytes()).unwrap_or("")
}

fn named_children<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut c = node.walk();
    node.named_children(&mut c).collect()
}

/// `line N: near `...`` for the first error or missing node (`skip`: lines added before the
/// function).
fn syntax_location(src: &str, root: Node, skip: usize) -> String {
    fn first_bad(node: Node) -> Option<Node> {
        if node.is_error() || node.is_missing() {
            return Some(node);
        }
        if !node.has_error() {
            return None;
        }
        let mut c = node.walk();
        let children: Vec<Node> = node.children(&mut c).collect();
        children.into_iter().find_map(first_bad)
    }
    let Some(bad) = first_bad(root) else {
        return "syntax error".into();
    };
    let line = (bad.start_position().row + 1).saturating_sub(skip).max(1);
    if bad.is_missing() {
        return format!("line {line}: missing `{}`", bad.kind());
    }
    let snippet: String = text(src, bad)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .chars()
        .take(40)
        .collect();
    if snippet.is_empty() {
        format!("line {line}: syntax error")
    } else {
        format!("line {line}: syntax error near `{snippet}`")
    }
}

/// The first error CPython's compiler reports that tree-sitter's grammar accepts: a keyword
/// argument given twice, a positional argument after a keyword one, a parameter named twice.
/// Each makes the whole module fail to import.
fn compile_error(src: &str, root: Node) -> Option<String> {
    let mut stack = vec![(root, 0usize)];
    while let Some((node, depth)) = stack.pop() {
        let line = node.start_position().row + 1;
        match node.kind() {
            "argument_list" => {
                let mut keywords: Vec<&str> = Vec::new();
                let mut after_keyword = false;
                let mut after_double_splat = false;
                for arg in named_children(node) {
                    match arg.kind() {
                        "keyword_argument" => {
                            let name = arg.child_by_field_name("name").map(|n| text(src, n));
                            if let Some(name) = name {
                                if keywords.contains(&name) {
                                    return Some(format!(
                                        "line {line}: keyword argument `{name}` repeated"
                                    ));
                                }
                                keywords.push(name);
                            }
                            after_keyword = true;
                        }
                        "dictionary_splat" => after_double_splat = true,
                        "list_splat" if after_double_splat => {
                            return Some(format!(
                                "line {line}: `*{}` after `**` unpacking",
                                arg.named_child(0).map_or("", |n| text(src, n))
                            ));
                        }
                        "list_splat" | "comment" => {}
                        _ if after_keyword || after_double_splat => {
                            return Some(format!(
                                "line {line}: positional argument `{}` follows a keyword argument",
                                text(src, arg).chars().take(40).collect::<String>()
                            ));
                        }
                        _ => {}
                    }
                }
            }
            "parameters" | "lambda_parameters" => {
                let mut seen: Vec<String> = Vec::new();
                for name in param_names(src, node) {
                    let bare = name.trim_start_matches('*').to_string();
                    if !is_identifier(&bare) {
                        continue;
                    }
                    if seen.contains(&bare) {
                        return Some(format!("line {line}: parameter `{bare}` named twice"));
                    }
                    seen.push(bare);
                }
            }
            _ => {}
        }
        if depth < MAX_NODE_DEPTH {
            let children = named_children(node);
            stack.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
        }
    }
    None
}

/// The first top-level function definition (possibly decorated).
fn first_function(root: Node) -> Option<Node> {
    named_children(root)
        .into_iter()
        .find_map(|n| match n.kind() {
            "function_definition" => Some(n),
            "decorated_definition" => n
                .child_by_field_name("definition")
                .filter(|d| d.kind() == "function_definition"),
            _ => None,
        })
}

fn decorators_of(def: Node) -> Vec<Node> {
    def.parent()
        .filter(|p| p.kind() == "decorated_definition")
        .map(|p| {
            named_children(p)
                .into_iter()
                .filter(|n| n.kind() == "decorator")
                .collect()
        })
        .unwrap_or_default()
}

/// Parameter names in order, with `*` / `**` markers; bare `*` and `/` are left out.
fn param_names(src: &str, params: Node) -> Vec<String> {
    let mut out = Vec::new();
    for p in named_children(params) {
        let name = match p.kind() {
            "identifier" => Some(text(src, p).to_string()),
            "default_parameter" | "typed_default_parameter" => p
                .child_by_field_name("name")
                .map(|n| text(src, n).to_string()),
            "typed_parameter" => p.named_child(0).map(|n| splat_name(src, n)),
            "list_splat_pattern" | "dictionary_splat_pattern" => Some(splat_name(src, p)),
            "tuple_pattern" => Some(text(src, p).to_string()),
            _ => None,
        };
        out.extend(name);
    }
    out
}

fn splat_name(src: &str, n: Node) -> String {
    match n.kind() {
        "list_splat_pattern" => format!("*{}", n.named_child(0).map_or("", |i| text(src, i))),
        "dictionary_splat_pattern" => {
            format!("**{}", n.named_child(0).map_or("", |i| text(src, i)))
        }
        _ => text(src, n).to_string(),
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// The unquoted texts of the plain string literals `value` is or holds (a list, tuple or
/// parenthesised string); `None` for anything else, a prefixed literal (`b''`, `f''`) included.
fn literal_strings<'s>(src: &'s str, value: Node) -> Option<Vec<&'s str>> {
    let strings = match value.kind() {
        "string" => vec![value],
        "list" | "tuple" | "parenthesized_expression" => named_children(value)
            .into_iter()
            .filter(|n| n.kind() != "comment")
            .collect(),
        _ => return None,
    };
    strings
        .into_iter()
        .map(|s| {
            let literal = text(src, s);
            (s.kind() == "string" && literal.starts_with(['\'', '"']))
                .then(|| literal.trim_matches(['\'', '"']))
        })
        .collect()
}

/// Collects the names a piece of code binds.
#[derive(Default)]
struct Binder<'s> {
    src: &'s str,
    /// The instance parameter whose attribute assignments are recorded.
    self_name: Option<String>,
    /// Top level of a module or class body: definitions bind their names and are not entered.
    top_level: bool,
    bound: HashSet<String>,
    /// `self.x` assigned (or deleted, or bound by `for` / `with`).
    self_assigned: HashSet<String>,
    /// Attribute nodes in store position.
    stores: HashSet<usize>,
    /// `from x import *` seen (module level).
    wildcard: bool,
    /// Nesting depth of the walk (deeper nodes are not looked at).
    depth: usize,
    /// Functions defined inside, when their scopes are looked at on their own (their names
    /// are bound here; their parameters and locals are not).
    nested: Option<Vec<Node<'s>>>,
}

impl<'s> Binder<'s> {
    fn new(src: &'s str, self_name: Option<String>, top_level: bool) -> Self {
        Binder {
            src,
            self_name,
            top_level,
            ..Binder::default()
        }
    }

    fn bind(&mut self, name: &str) {
        if is_identifier(name) {
            self.bound.insert(name.to_string());
        }
    }

    fn params(&mut self, params: Node) {
        for p in param_names(self.src, params) {
            let p = p.trim_start_matches('*');
            if p.starts_with('(') {
                continue;
            }
            self.bind(p);
        }
        // Tuple parameters (Python 2) and their parts.
        for p in named_children(params) {
            if p.kind() == "tuple_pattern" {
                self.target(p);
            }
        }
    }

    fn target(&mut self, node: Node) {
        match node.kind() {
            "identifier" => self.bind(text(self.src, node)),
            "as_pattern_target" => {
                let children = named_children(node);
                if children.is_empty() {
                    self.bind(text(self.src, node).trim());
                } else {
                    for c in children {
                        self.target(c);
                    }
                }
            }
            "pattern_list"
            | "tuple_pattern"
            | "list_pattern"
            | "tuple"
            | "list"
            | "parenthesized_expression"
            | "expression_list"
            | "list_splat_pattern"
            | "list_splat"
            | "splat_pattern" => {
                for c in named_children(node) {
                    self.target(c);
                }
            }
            "attribute" => {
                self.stores.insert(node.id());
                let object = node.child_by_field_name("object");
                let attr = node.child_by_field_name("attribute");
                if let (Some(o), Some(a), Some(me)) = (object, attr, self.self_name.as_deref()) {
                    if o.kind() == "identifier" && text(self.src, o) == me {
                        self.self_assigned.insert(text(self.src, a).to_string());
                    }
                }
            }
            _ => {}
        }
    }

    fn walk(&mut self, node: Node<'s>) {
        if self.depth > MAX_NODE_DEPTH {
            return;
        }
        self.depth += 1;
        self.walk_node(node);
        self.depth -= 1;
    }

    fn walk_node(&mut self, node: Node<'s>) {
        match node.kind() {
            "function_definition" => {
                if let Some(n) = node.child_by_field_name("name") {
                    self.bind(text(self.src, n));
                }
                if self.top_level {
                    return;
                }
                if let Some(nested) = &mut self.nested {
                    nested.push(node);
                    return;
                }
                if let Some(p) = node.child_by_field_name("parameters") {
                    self.params(p);
                }
                if let Some(b) = node.child_by_field_name("body") {
                    self.walk(b);
                }
                return;
            }
            "class_definition" => {
                if let Some(n) = node.child_by_field_name("name") {
                    self.bind(text(self.src, n));
                }
                if self.top_level {
                    return;
                }
                if let Some(b) = node.child_by_field_name("body") {
                    self.walk(b);
                }
                return;
            }
            "lambda" => {
                if self.top_level {
                    return;
                }
                if let Some(p) = node.child_by_field_name("parameters") {
                    self.params(p);
                }
            }
            "assignment" | "augmented_assignment" | "for_statement" | "for_in_clause" => {
                if let Some(l) = node.child_by_field_name("left") {
                    self.target(l);
                }
            }
            "as_pattern" | "except_clause" => {
                if let Some(a) = node.child_by_field_name("alias") {
                    self.target(a);
                }
            }
            "named_expression" => {
                if let Some(n) = node.child_by_field_name("name") {
                    self.bind(text(self.src, n));
                }
            }
            "global_statement" | "nonlocal_statement" => {
                for c in named_children(node) {
                    if c.kind() == "identifier" {
                        self.bind(text(self.src, c));
                    }
                }
                return;
            }
            "import_statement" | "import_from_statement" | "future_import_statement" => {
                self.import(node);
                return;
            }
            "delete_statement" => {
                for c in named_children(node) {
                    self.target(c);
                }
            }
            "case_pattern" => {
                self.case_pattern(node);
                return;
            }
            _ => {}
        }
        for c in named_children(node) {
            // At the top level only statements bind names (expressions are not entered).
            if !self.top_level || TOP_LEVEL_KINDS.contains(&c.kind()) {
                self.walk(c);
            }
        }
    }

    fn import(&mut self, node: Node) {
        let mut c = node.walk();
        let names: Vec<Node> = node.children_by_field_name("name", &mut c).collect();
        for n in names {
            match n.kind() {
                "aliased_import" => {
                    if let Some(a) = n.child_by_field_name("alias") {
                        self.bind(text(self.src, a));
                    }
                }
                _ => {
                    let t = text(self.src, n);
                    let head = if node.kind() == "import_statement" {
                        t.split('.').next().unwrap_or(t)
                    } else {
                        t.rsplit('.').next().unwrap_or(t)
                    };
                    self.bind(head.trim());
                }
            }
        }
        if named_children(node)
            .iter()
            .any(|n| n.kind() == "wildcard_import")
        {
            self.wildcard = true;
        }
    }

    /// Captures of a `case` pattern: identifiers, except dotted value patterns (`Color.RED`).
    fn case_pattern(&mut self, node: Node) {
        match node.kind() {
            "identifier" => self.bind(text(self.src, node)),
            "dotted_name" => {
                let parts = named_children(node);
                if parts.len() == 1 {
                    self.bind(text(self.src, parts[0]));
                }
            }
            "as_pattern" => {
                if let Some(a) = node.child_by_field_name("alias") {
                    self.target(a);
                }
                for c in named_children(node) {
                    self.case_pattern(c);
                }
            }
            _ => {
                for c in named_children(node) {
                    self.case_pattern(c);
                }
            }
        }
    }
}

/// What a top-level walk enters: statements, their blocks and clauses, and binding forms.
const TOP_LEVEL_KINDS: &[&str] = &[
    "module",
    "block",
    "if_statement",
    "elif_clause",
    "else_clause",
    "try_statement",
    "except_clause",
    "except_group_clause",
    "finally_clause",
    "with_statement",
    "with_clause",
    "with_item",
    "as_pattern",
    "for_statement",
    "while_statement",
    "match_statement",
    "case_clause",
    "case_pattern",
    "expression_statement",
    "decorated_definition",
    "function_definition",
    "class_definition",
    "assignment",
    "augmented_assignment",
    "named_expression",
    "import_statement",
    "import_from_statement",
    "future_import_statement",
    "global_statement",
    "nonlocal_statement",
];

/// What a function leaves unbound and how it uses `self`, its nested functions included.
#[derive(Default)]
struct ScopeUses {
    /// Names read where neither their function nor the functions around it bind them, in
    /// first-use order.
    free: Vec<String>,
    /// Every name the function and its nested functions bind (for suggestions).
    bound: HashSet<String>,
    attrs: Vec<String>,
    self_assigned: HashSet<String>,
    dynamic_attrs: bool,
}

/// Adds `def`'s scope to `acc`: the names it reads that neither it nor `outer` (the scopes
/// around it) binds. A function defined inside is a scope of its own, which sees this one's
/// names (Python's closures), while this one does not see its parameters and locals.
fn scope_uses<'s>(
    src: &'s str,
    def: Node<'s>,
    self_name: Option<&str>,
    self_visible: bool,
    outer: &HashSet<String>,
    acc: &mut ScopeUses,
    depth: usize,
) {
    if depth > MAX_NODE_DEPTH {
        return;
    }
    let params = def.child_by_field_name("parameters");
    let body = def.child_by_field_name("body");
    let mut binder = Binder::new(src, self_name.map(str::to_string), false);
    binder.nested = Some(Vec::new());
    if let Some(p) = params {
        binder.params(p);
    }
    if let Some(b) = body {
        binder.walk(b);
    }
    let mut uses = Uses {
        src,
        self_name,
        stores: &binder.stores,
        names: Vec::new(),
        attrs: Vec::new(),
        dynamic_attrs: false,
        depth: 0,
    };
    if depth == 0 {
        // The outermost function's defaults are evaluated around it (a nested one's by its
        // enclosing function, walked there).
        if let Some(p) = params {
            uses.defaults(p, false);
        }
    }
    if let Some(b) = body {
        uses.walk(b, self_visible);
    }
    let mut chain = outer.clone();
    chain.extend(binder.bound.iter().cloned());
    for name in &uses.names {
        if !chain.contains(name) {
            Uses::record(&mut acc.free, name);
        }
    }
    for attr in &uses.attrs {
        Uses::record(&mut acc.attrs, attr);
    }
    acc.dynamic_attrs |= uses.dynamic_attrs;
    acc.self_assigned
        .extend(binder.self_assigned.iter().cloned());
    acc.bound.extend(binder.bound.iter().cloned());
    for nested in binder.nested.take().unwrap_or_default() {
        let visible = self_visible
            && !nested
                .child_by_field_name("parameters")
                .is_some_and(|p| rebinds(src, self_name, p));
        scope_uses(src, nested, self_name, visible, &chain, acc, depth + 1);
    }
}

/// Whether the parameters `params` take the instance parameter's name `self_name` (so inside,
/// it means something else).
fn rebinds(src: &str, self_name: Option<&str>, params: Node) -> bool {
    self_name.is_some_and(|me| {
        param_names(src, params)
            .iter()
            .any(|p| p.trim_start_matches('*') == me)
    })
}

/// Collects the names a function body reads and its `self.x` reads.
struct Uses<'s, 'b> {
    src: &'s str,
    self_name: Option<&'b str>,
    stores: &'b HashSet<usize>,
    names: Vec<String>,
    attrs: Vec<String>,
    /// `setattr(self, ...)`, `self.__dict__`, `vars(self)`: attributes are made dynamically.
    dynamic_attrs: bool,
    depth: usize,
}

impl Uses<'_, '_> {
    fn record(list: &mut Vec<String>, name: &str) {
        if !list.iter().any(|n| n == name) {
            list.push(name.to_string());
        }
    }

    /// Walks `node`; `self_visible`: whether the instance parameter means the function's own here.
    fn walk(&mut self, node: Node, self_visible: bool) {
        if self.depth > MAX_NODE_DEPTH {
            return;
        }
        self.depth += 1;
        self.walk_node(node, self_visible);
        self.depth -= 1;
    }

    fn walk_node(&mut self, node: Node, self_visible: bool) {
        match node.kind() {
            "identifier" => {
                let t = text(self.src, node);
                if is_identifier(t) {
                    Self::record(&mut self.names, t);
                }
            }
            "attribute" => {
                let object = node.child_by_field_name("object");
                if let (Some(o), Some(a), Some(me), true) = (
                    object,
                    node.child_by_field_name("attribute"),
                    self.self_name,
                    self_visible,
                ) {
                    if o.kind() == "identifier" && text(self.src, o) == me {
                        let attr = text(self.src, a);
                        if attr == "__dict__" {
                            self.dynamic_attrs = true;
                        }
                        if !self.stores.contains(&node.id()) {
                            Self::record(&mut self.attrs, attr);
                        }
                    }
                }
                if let Some(o) = object {
                    self.walk(o, self_visible);
                }
            }
            "call" => {
                let f = node.child_by_field_name("function");
                if let (Some(f), Some(me)) = (f, self.self_name) {
                    let fname = text(self.src, f);
                    if matches!(fname, "setattr" | "vars") {
                        let args = node
                            .child_by_field_name("arguments")
                            .map(named_children)
                            .unwrap_or_default();
                        if args.first().is_some_and(|a| text(self.src, *a) == me) {
                            self.dynamic_attrs = true;
                        }
                    }
                }
                for c in named_children(node) {
                    self.walk(c, self_visible);
                }
            }
            "keyword_argument" => {
                if let Some(v) = node.child_by_field_name("value") {
                    self.walk(v, self_visible);
                }
            }
            "string" => {
                for c in named_children(node) {
                    if c.kind() == "interpolation" {
                        self.walk(c, self_visible);
                    }
                }
            }
            "interpolation" | "format_specifier" => {
                for c in named_children(node) {
                    if matches!(c.kind(), "type_conversion") {
                        continue;
                    }
                    self.walk(c, self_visible);
                }
            }
            "function_definition" => {
                // Its body is a scope of its own ([`scope_uses`]); the decorators and defaults
                // are evaluated here.
                for d in decorators_of(node) {
                    self.walk(d, self_visible);
                }
                if let Some(p) = node.child_by_field_name("parameters") {
                    self.defaults(p, self_visible);
                }
            }
            "lambda" => {
                let params = node.child_by_field_name("parameters");
                let shadows = params.is_some_and(|p| self.rebinds_self(p));
                if let Some(p) = params {
                    self.defaults(p, self_visible);
                }
                if let Some(b) = node.child_by_field_name("body") {
                    self.walk(b, self_visible && !shadows);
                }
            }
            "class_definition" => {
                for d in decorators_of(node) {
                    self.walk(d, self_visible);
                }
                if let Some(s) = node.child_by_field_name("superclasses") {
                    self.walk(s, self_visible);
                }
                if let Some(b) = node.child_by_field_name("body") {
                    self.walk(b, false);
                }
            }
            "decorated_definition" => {
                if let Some(d) = node.child_by_field_name("definition") {
                    self.walk(d, self_visible);
                }
            }
            "import_statement"
            | "import_from_statement"
            | "future_import_statement"
            | "global_statement"
            | "nonlocal_statement"
            | "type"
            | "case_pattern"
            | "dotted_name"
            | "parameters"
            | "lambda_parameters"
            | "type_alias_statement"
            | "comment" => {}
            "assignment" => {
                // An annotation without value binds nothing and reads nothing.
                for field in ["left", "right"] {
                    if let Some(c) = node.child_by_field_name(field) {
                        self.walk(c, self_visible);
                    }
                }
            }
            _ => {
                for c in named_children(node) {
                    self.walk(c, self_visible);
                }
            }
        }
    }

    fn rebinds_self(&self, params: Node) -> bool {
        rebinds(self.src, self.self_name, params)
    }

    fn defaults(&mut self, params: Node, self_visible: bool) {
        for p in named_children(params) {
            if matches!(p.kind(), "default_parameter" | "typed_default_parameter") {
                if let Some(v) = p.child_by_field_name("value") {
                    self.walk(v, self_visible);
                }
            }
        }
    }
}

/// Bases that add nothing a generated method would read.
const PLAIN_BASES: &[&str] = &[
    "object",
    "ABC",
    "abc.ABC",
    "Generic",
    "typing.Generic",
    "Protocol",
    "typing.Protocol",
];

/// Public attributes of the builtin types classes most often extend (Python 3.8–3.12): a class
/// based on one is still checked, against its own attributes and these.
const BUILTIN_BASE_ATTRS: &[(&str, &[&str])] = &[
    (
        "dict",
        &[
            "clear",
            "copy",
            "fromkeys",
            "get",
            "items",
            "keys",
            "pop",
            "popitem",
            "setdefault",
            "update",
            "values",
        ],
    ),
    (
        "list",
        &[
            "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove",
            "reverse", "sort",
        ],
    ),
    (
        "set",
        &[
            "add",
            "clear",
            "copy",
            "difference",
            "difference_update",
            "discard",
            "intersection",
            "intersection_update",
            "isdisjoint",
            "issubset",
            "issuperset",
            "pop",
            "remove",
            "symmetric_difference",
            "symmetric_difference_update",
            "union",
            "update",
        ],
    ),
    (
        "frozenset",
        &[
            "copy",
            "difference",
            "intersection",
            "isdisjoint",
            "issubset",
            "issuperset",
            "symmetric_difference",
            "union",
        ],
    ),
    ("tuple", &["count", "index"]),
    ("Exception", &["args", "with_traceback", "add_note"]),
    ("BaseException", &["args", "with_traceback", "add_note"]),
];

/// Builtin bases whose instances are read and written with subscripts.
const ITEM_ACCESS_BASES: &[&str] = &["dict", "list"];

/// Names bound at the top level of a Python module: imports, definitions, assignments (also in
/// top-level `if` / `try` / `with` / `for` blocks), and `global` declarations anywhere.
struct ModuleNames {
    names: HashSet<String>,
    /// A wildcard import that could not be followed: any name may exist.
    open: bool,
}

fn top_level_names(src: &str) -> Option<(HashSet<String>, bool)> {
    let tree = parse_python(src)?;
    Some(names_bound_in(src, tree.root_node()))
}

/// The names module `root` (parsed from `src`) binds at its top level or declares `global`,
/// and whether it has a wildcard import.
fn names_bound_in(src: &str, root: Node) -> (HashSet<String>, bool) {
    let mut b = Binder::new(src, None, true);
    b.walk(root);
    let mut names = b.bound;
    collect_globals(src, root, &mut names);
    (names, b.wildcard)
}

/// Names declared `global` anywhere in the file (an iterative walk: files can nest deeply).
fn collect_globals(src: &str, root: Node, out: &mut HashSet<String>) {
    let mut cursor = root.walk();
    loop {
        let node = cursor.node();
        let mut descend = true;
        if node.kind() == "global_statement" {
            for c in named_children(node) {
                if c.kind() == "identifier" {
                    out.insert(text(src, c).to_string());
                }
            }
            descend = false;
        }
        if descend && cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}

/// The module-level names of `path` (as the view shows it), following wildcard imports into
/// in-repo modules.
fn module_names(view: &MaskedView, path: &str) -> ModuleNames {
    let mut out = ModuleNames {
        names: HashSet::new(),
        open: false,
    };
    let mut seen = HashSet::new();
    add_module_names(view, path, &mut out, &mut seen, 0);
    out
}

fn add_module_names(
    view: &MaskedView,
    path: &str,
    out: &mut ModuleNames,
    seen: &mut HashSet<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH || !seen.insert(path.to_string()) {
        return;
    }
    let Some(src) = view.file_text(path) else {
        return;
    };
    let Some((names, wildcard)) = top_level_names(src) else {
        return;
    };
    out.names.extend(names);
    if !wildcard {
        return;
    }
    let Some(file) = view.file_id(path) else {
        out.open = true;
        return;
    };
    let resolver = view.resolver();
    for imp in view
        .imports_of(path)
        .iter()
        .filter(|i| i.is_wildcard && i.scope.is_none())
    {
        match resolver.resolve_import(file, imp) {
            Ok(ImportTarget::Module { files }) => {
                for f in files {
                    let p = view.file_path(f).to_string();
                    add_module_names(view, &p, out, seen, depth + 1);
                }
            }
            _ => out.open = true,
        }
    }
}

/// What is known about the target's class.
struct ClassInfo {
    name: String,
    /// Attributes and methods of the class and its in-repo bases; `None` when a base (or dynamic
    /// attribute creation) makes the set unknowable.
    attrs: Option<Vec<String>>,
    /// The same, for suggestions and the repair message, even when incomplete.
    known: Vec<String>,
    /// Builtin bases met on the way.
    builtin_bases: Vec<String>,
}

fn class_info(view: &MaskedView, class: ClassId) -> ClassInfo {
    let repo = view.repository();
    let name = repo.class(class).name.clone();
    let mut known = Vec::new();
    let mut seen = HashSet::new();
    let mut builtin_bases = Vec::new();
    let complete = collect_class_attrs(view, class, &mut known, &mut builtin_bases, &mut seen, 0);
    ClassInfo {
        name,
        attrs: complete.then(|| known.clone()),
        known,
        builtin_bases,
    }
}

/// Adds the attributes of `class` and its bases to `out`; false when they cannot all be known.
fn collect_class_attrs(
    view: &MaskedView,
    class: ClassId,
    out: &mut Vec<String>,
    builtins: &mut Vec<String>,
    seen: &mut HashSet<ClassId>,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH || !seen.insert(class) {
        return true;
    }
    let repo = view.repository();
    let c = view.class(class).unwrap_or_else(|| repo.class(class));
    let push = |name: &str, out: &mut Vec<String>| {
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    };
    for m in &c.members {
        push(m, out);
    }
    for m in &c.methods {
        push(m.rsplit('.').next().unwrap_or(m), out);
    }
    let mut complete = true;
    if let Some((attrs, dynamic)) = class_source_attrs(view, &c.path, &c.qualname) {
        let mut attrs: Vec<String> = attrs.into_iter().collect();
        attrs.sort();
        for a in attrs {
            push(&a, out);
        }
        complete &= !dynamic;
    }
    for (base, classes) in class_bases(view, class) {
        if PLAIN_BASES.contains(&base.as_str()) {
            continue;
        }
        if classes.is_empty() {
            match BUILTIN_BASE_ATTRS.iter().find(|(name, _)| *name == base) {
                Some((name, attrs)) => {
                    attrs.iter().for_each(|a| push(a, out));
                    if !builtins.iter().any(|b| b == name) {
                        builtins.push(name.to_string());
                    }
                }
                None => complete = false,
            }
            continue;
        }
        for b in classes {
            complete &= collect_class_attrs(view, b, out, builtins, seen, depth + 1);
        }
    }
    complete
}

/// Attributes a class's source defines: names bound in its body, and `self.x` assigned in any of
/// its methods; and whether it makes attributes dynamically (`__getattr__`, `setattr`,
/// `__dict__`).
fn class_source_attrs(
    view: &MaskedView,
    path: &str,
    qualname: &str,
) -> Option<(HashSet<String>, bool)> {
    with_class_def(view, path, qualname, source_attrs)
}

/// Calls `f` with the source of `path` and the definition of the class `qualname` in it.
fn with_class_def<R>(
    view: &MaskedView,
    path: &str,
    qualname: &str,
    f: impl FnOnce(&str, Node) -> Option<R>,
) -> Option<R> {
    let src = view.file_text(path)?;
    let module = view
        .file_symbols(path)
        .map(|s| s.module.as_str())
        .unwrap_or("");
    let rel = if module.is_empty() {
        qualname
    } else {
        qualname
            .strip_prefix(module)
            .and_then(|r| r.strip_prefix('.'))
            .unwrap_or(qualname)
    };
    let parts: Vec<&str> = rel.split('.').collect();
    let tree = parse_python(src)?;
    let class = find_definition(src, tree.root_node(), &parts)?;
    f(src, class)
}

fn source_attrs(src: &str, class: Node) -> Option<(HashSet<String>, bool)> {
    let body = class.child_by_field_name("body")?;
    let mut attrs = HashSet::new();
    let mut top = Binder::new(src, None, true);
    top.walk(body);
    attrs.extend(top.bound);
    for stmt in named_children(body) {
        let Some(def) = function_of(stmt) else {
            continue;
        };
        let me = def
            .child_by_field_name("parameters")
            .and_then(|p| param_names(src, p).into_iter().next())
            .filter(|p| is_identifier(p));
        let Some(me) = me else { continue };
        let mut b = Binder::new(src, Some(me), false);
        if let Some(body) = def.child_by_field_name("body") {
            b.walk(body);
        }
        attrs.extend(b.self_assigned);
    }
    let code = text(src, class);
    let dynamic = code.contains("__getattr__")
        || code.contains("__getattribute__")
        || code.contains("__dict__")
        || code.contains("setattr(");
    Some((attrs, dynamic))
}

/// Each base `class` names (keyword arguments such as `metaclass=` left out), as written without
/// its subscript or call, with the repository classes it resolves to (none for a builtin or
/// outside base).
fn class_bases(view: &MaskedView, class: ClassId) -> Vec<(String, Vec<ClassId>)> {
    let repo = view.repository();
    let c = view.class(class).unwrap_or_else(|| repo.class(class));
    let file = repo.class_file(class);
    let resolver = view.resolver();
    c.bases
        .iter()
        .filter(|b| !b.contains('='))
        .map(|b| b.split(['[', '(']).next().unwrap_or(b).trim())
        .filter(|b| !b.is_empty())
        .map(|base| {
            let classes = resolver
                .resolve_in_file(file, base)
                .map(|defs| {
                    defs.into_iter()
                        .filter_map(|d| match d {
                            Def::Class(id) => Some(id),
                            Def::Function(_) => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            (base.to_string(), classes)
        })
        .collect()
}

/// The function a statement of a class or module body defines, decorated or not.
fn function_of(stmt: Node) -> Option<Node> {
    let def = match stmt.kind() {
        "function_definition" => Some(stmt),
        "decorated_definition" => stmt.child_by_field_name("definition"),
        _ => None,
    };
    def.filter(|d| d.kind() == "function_definition")
}

/// The definition (class or function) at the nesting path `parts` under `node`.
fn find_definition<'t>(src: &str, node: Node<'t>, parts: &[&str]) -> Option<Node<'t>> {
    let (first, rest) = parts.split_first()?;
    for c in named_children(node) {
        let def = match c.kind() {
            "class_definition" | "function_definition" => c,
            "decorated_definition" => match c.child_by_field_name("definition") {
                Some(d) => d,
                None => continue,
            },
            // Definitions inside top-level `if` / `try` blocks.
            "if_statement" | "try_statement" | "with_statement" | "else_clause" | "elif_clause"
            | "except_clause" | "finally_clause" | "block" => {
                if let Some(found) = find_definition(src, c, parts) {
                    return Some(found);
                }
                continue;
            }
            _ => continue,
        };
        if def.child_by_field_name("name").map(|n| text(src, n)) != Some(*first) {
            continue;
        }
        if rest.is_empty() {
            return Some(def);
        }
        if let Some(body) = def.child_by_field_name("body") {
            if let Some(found) = find_definition(src, body, rest) {
                return Some(found);
            }
        }
    }
    None
}

/// Names bound in the functions that enclose the target (a nested function sees them).
fn enclosing_function_names(view: &MaskedView, id: FnId) -> HashSet<String> {
    let repo = view.repository();
    let resolver = view.resolver();
    let f = repo.function(id);
    let module = view
        .file_symbols(&f.path)
        .map(|s| s.module.clone())
        .unwrap_or_default();
    let mut out = HashSet::new();
    let mut q = f.qualname.as_str();
    while let Some(i) = q.rfind('.') {
        q = &q[..i];
        if q.len() <= module.len() {
            break;
        }
        for d in resolver.lookup_qualname(q) {
            let Def::Function(fid) = d else { continue };
            if repo.function_file(fid) != repo.function_file(id) {
                continue;
            }
            let Some(code) = view.function_code(fid) else {
                continue;
            };
            // The definition starts at its column; indent its first line as in the file.
            let column = repo
                .file(repo.function_file(fid))
                .text
                .as_deref()
                .map(|t| {
                    let start = repo.function(fid).span.start_byte.min(t.len());
                    start - t[..start].rfind('\n').map_or(0, |n| n + 1)
                })
                .unwrap_or(0);
            let src = dedent_first(&format!("{}{code}", " ".repeat(column)));
            let Some(tree) = parse_python(&src) else {
                continue;
            };
            if let Some(def) = first_function(tree.root_node()) {
                let mut b = Binder::new(&src, None, false);
                b.walk(def);
                out.extend(b.bound);
            }
        }
    }
    out
}

fn check_python(view: &MaskedView, target: &Target, src: &str, def: Node, g: &mut Grounding) {
    let params_node = def.child_by_field_name("parameters");
    let params: Vec<String> = params_node.map(|p| param_names(src, p)).unwrap_or_default();
    let static_method = decorators_of(def)
        .iter()
        .any(|d| text(src, *d).trim_start_matches('@').trim() == "staticmethod")
        || target
            .signature
            .lines()
            .any(|l| l.trim() == "@staticmethod");
    let target_id = view.target();
    let class_id = target_id.and_then(|id| view.resolver().enclosing_class(id));
    let class = class_id.map(|c| class_info(view, c));
    let self_name: Option<String> = if class.is_some() && !static_method {
        params.first().filter(|p| is_identifier(p)).cloned()
    } else {
        None
    };

    // What the function and the functions inside it bind, and what they read.
    let mut scopes = ScopeUses::default();
    scope_uses(
        src,
        def,
        self_name.as_deref(),
        true,
        &HashSet::new(),
        &mut scopes,
        0,
    );

    // What the file and the enclosing scopes bind.
    let module = module_names(view, &target.path);
    let mut outer: HashSet<String> = module.names.clone();
    if let Some(c) = &class {
        outer.insert(c.name.clone());
    }
    if class.is_none() {
        outer.insert(target.name.clone());
    }
    if let Some(id) = target_id {
        outer.extend(enclosing_function_names(view, id));
    }

    // `**kwargs`, for options the docstring documents that arrive through it.
    let kwargs = def
        .child_by_field_name("parameters")
        .map(|ps| param_names(src, ps))
        .and_then(|ps| {
            ps.into_iter()
                .find_map(|p| p.strip_prefix("**").map(str::to_string))
        })
        .filter(|k| !k.is_empty());
    for name in &scopes.free {
        g.checked.push(name.clone());
        if outer.contains(name) || PY_BUILTINS.contains(&name.as_str()) || module.open {
            continue;
        }
        let mut suggestions = name_suggestions(
            view,
            name,
            &scopes.bound,
            &outer,
            class.as_ref(),
            self_name.as_deref(),
        );
        if let Some(k) = kwargs.as_deref() {
            if documents(target.docstring.as_deref(), name) {
                suggestions.insert(0, format!("{k}.get('{name}')"));
                suggestions.truncate(MAX_SUGGESTIONS);
            }
        }
        g.problems.push(Problem {
            kind: ProblemKind::UndefinedName,
            name: name.clone(),
            suggestions,
        });
    }

    if let (Some(c), Some(me)) = (&class, self_name.as_deref()) {
        g.class_name = Some(c.name.clone());
        g.builtin_bases = c.builtin_bases.clone();
        g.class_attributes = c
            .known
            .iter()
            .filter(|a| !(a.starts_with("__") && a.ends_with("__")))
            .cloned()
            .collect();
        for attr in &scopes.attrs {
            g.checked.push(format!("{me}.{attr}"));
            let Some(attrs) = &c.attrs else { continue };
            if scopes.dynamic_attrs
                || attrs.contains(attr)
                || scopes.self_assigned.contains(attr)
                || *attr == target.name
                || (attr.starts_with("__") && attr.ends_with("__"))
            {
                continue;
            }
            let mut pool: Vec<&str> = attrs.iter().map(String::as_str).collect();
            pool.extend(scopes.self_assigned.iter().map(String::as_str));
            g.problems.push(Problem {
                kind: ProblemKind::MissingAttribute,
                name: attr.clone(),
                suggestions: close_names(attr, pool),
            });
        }
    }

    g.problems.extend(unbound_locals(src, def, &params));
    if let Some(p) = recursion::self_recursion(
        src,
        def,
        target,
        &params,
        self_name.as_deref(),
        class.as_ref().map(|c| c.name.as_str()),
    ) {
        g.problems.push(p);
    }
    g.problems.extend(calls::bad_calls(
        view,
        target,
        src,
        def,
        self_name.as_deref(),
        class_id,
        &scopes,
    ));
    g.problems.extend(slots::slot_stores(
        view,
        class_id,
        self_name.as_deref(),
        &scopes,
    ));
    g.problems.extend(typed::typed_attribute_reads(
        view,
        &target.path,
        src,
        def,
        self_name.as_deref(),
        class_id,
        &target.name,
        &scopes,
    ));
}

/// Whether `docstring` names `name` as a whole word.
fn documents(docstring: Option<&str>, name: &str) -> bool {
    docstring.is_some_and(|d| {
        d.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
    })
}

/// Suggestions for an undefined name: close names in scope, `self.x` for a class attribute, an
/// import of an in-repo definition or module of that name, `import m` for a standard module.
fn name_suggestions(
    view: &MaskedView,
    name: &str,
    local: &HashSet<String>,
    outer: &HashSet<String>,
    class: Option<&ClassInfo>,
    self_name: Option<&str>,
) -> Vec<String> {
    let mut pool: Vec<&str> = outer.iter().map(String::as_str).collect();
    pool.extend(local.iter().map(String::as_str));
    let mut out = close_names(name, pool);
    let builtins = PY_BUILTINS.iter().copied().filter(|b| !b.starts_with('_'));
    for b in close_names(name, builtins.collect()) {
        if !out.contains(&b) {
            out.push(b);
        }
    }
    if let (Some(c), Some(me)) = (class, self_name) {
        for a in close_names(name, c.known.iter().map(String::as_str).collect())
            .into_iter()
            .chain(c.known.iter().filter(|a| *a == name).cloned())
        {
            let s = format!("{me}.{a}");
            if !out.contains(&s) {
                out.insert(0, s);
            }
        }
    }
    let mut imports = import_suggestions(view, name);
    imports.truncate(3);
    out.extend(imports);
    out.truncate(MAX_SUGGESTIONS);
    out
}

/// The imports that would bind `name`: from each module of this repository that defines it at
/// the top level, of a repository module of that name, else of a standard module.
fn import_suggestions(view: &MaskedView, name: &str) -> Vec<String> {
    let repo = view.repository();
    let resolver = view.resolver();
    let mut imports = Vec::new();
    for d in resolver.lookup_name(name) {
        let (qual, path) = (
            repo.qualname(d),
            match d {
                Def::Function(f) => repo.function(f).path.as_str(),
                Def::Class(c) => repo.class(c).path.as_str(),
            },
        );
        let module = view.file_symbols(path).map(|s| s.module.as_str());
        if let Some(m) = module.filter(|m| !m.is_empty() && qual == format!("{m}.{name}")) {
            let s = format!("from {m} import {name}");
            if !imports.contains(&s) {
                imports.push(s);
            }
        }
    }
    for f in view.files() {
        if let Some(m) = view.file_symbols(f.path).map(|s| s.module.as_str()) {
            if m.rsplit('.').next() == Some(name) {
                let s = match m.rsplit_once('.') {
                    Some((pkg, _)) => format!("from {pkg} import {name}"),
                    None => format!("import {name}"),
                };
                if !imports.contains(&s) {
                    imports.push(s);
                }
            }
        }
    }
    if imports.is_empty() && PY_STDLIB_MODULES.binary_search(&name).is_ok() {
        imports.push(format!("import {name}"));
    }
    imports
}

/// Up to [`MAX_SUGGESTIONS`] names of `pool` close to `name`: equal modulo case and
/// underscores, within an edit distance of a third of its length, or one containing the other.
fn close_names(name: &str, pool: Vec<&str>) -> Vec<String> {
    let lower = name.to_lowercase();
    let squeezed = lower.replace('_', "");
    let limit = (name.chars().count() / 3).max(1);
    let mut scored: Vec<(usize, &str)> = Vec::new();
    for cand in pool {
        if cand == name || scored.iter().any(|(_, c)| *c == cand) {
            continue;
        }
        let cl = cand.to_lowercase();
        let score = if cl.replace('_', "") == squeezed && !squeezed.is_empty() {
            0
        } else {
            let d = edit_distance(&cl, &lower);
            if d <= limit {
                d
            } else {
                let (short, long) = if cl.len() < lower.len() {
                    (&cl, &lower)
                } else {
                    (&lower, &cl)
                };
                let short_core = short.trim_matches('_');
                if short_core.len() >= 4 && long.contains(short_core) {
                    10 + long.len() - short.len()
                } else {
                    continue;
                }
            }
        };
        scored.push((score, cand));
    }
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// Locals that the function reads before anything binds them, on a path every call takes as
/// far as the read: the first call raises `UnboundLocalError`. A loop body counts as taken;
/// a branch, a handler, an `else`, the right of `and`/`or` and a conditional expression don't.
/// Comprehensions, lambdas and nested functions (scopes of their own) are not entered; a
/// binding anywhere above a read, even in a branch, counts.
fn unbound_locals(src: &str, def: Node, params: &[String]) -> Vec<Problem> {
    let Some(body) = def.child_by_field_name("body") else {
        return Vec::new();
    };
    let mut binder = Binder::new(src, None, false);
    binder.nested = Some(Vec::new());
    binder.walk(body);
    let mut flow = Flow {
        src,
        locals: binder.bound,
        bound: params
            .iter()
            .map(|p| p.trim_start_matches('*').to_string())
            .collect(),
        found: Vec::new(),
        depth: 0,
    };
    flow.declared(body);
    flow.block(body, true);
    flow.found
        .into_iter()
        .map(|name| Problem {
            kind: ProblemKind::UnboundLocal,
            name,
            suggestions: Vec::new(),
        })
        .collect()
}

/// The walk of [`unbound_locals`], in the order Python runs a function's statements.
struct Flow<'s> {
    src: &'s str,
    /// Names the function's own scope binds somewhere (not `global`/`nonlocal` ones).
    locals: HashSet<String>,
    /// Names bound so far (parameters first).
    bound: HashSet<String>,
    found: Vec<String>,
    depth: usize,
}

impl Flow<'_> {
    /// Drops the names a `global` or `nonlocal` statement of this scope declares.
    fn declared(&mut self, node: Node) {
        for c in named_children(node) {
            match c.kind() {
                "global_statement" | "nonlocal_statement" => {
                    for n in named_children(c) {
                        self.locals.remove(text(self.src, n));
                    }
                }
                "function_definition" | "class_definition" | "lambda" => {}
                _ => self.declared(c),
            }
        }
    }

    /// Binds what `node` binds as an assignment target (or an import, with `import`).
    fn bind(&mut self, node: Node, import: bool) {
        let mut b = Binder::new(self.src, None, false);
        if import {
            b.import(node);
        } else {
            b.target(node);
        }
        self.bound.extend(b.bound);
        // Parts of a target that are reads: `a[i] = ...`, `a.b = ...`.
        if !import {
            self.target_reads(node);
        }
    }

    fn target_reads(&mut self, node: Node) {
        match node.kind() {
            "attribute" => {
                if let Some(o) = node.child_by_field_name("object") {
                    self.expr(o, true);
                }
            }
            "subscript" => self.expr(node, true),
            "identifier" => {}
            _ => {
                for c in named_children(node) {
                    self.target_reads(c);
                }
            }
        }
    }

    fn block(&mut self, node: Node, sure: bool) {
        for c in named_children(node) {
            self.stmt(c, sure);
        }
    }

    fn expr_at(&mut self, node: Node, field: &str, sure: bool) {
        if let Some(c) = node.child_by_field_name(field) {
            self.expr(c, sure);
        }
    }

    fn stmt_at(&mut self, node: Node, field: &str, sure: bool) {
        if let Some(c) = node.child_by_field_name(field) {
            self.stmt(c, sure);
        }
    }

    fn block_at(&mut self, node: Node, field: &str, sure: bool) {
        if let Some(c) = node.child_by_field_name(field) {
            self.block(c, sure);
        }
    }

    fn bind_at(&mut self, node: Node, field: &str) {
        if let Some(c) = node.child_by_field_name(field) {
            self.bind(c, false);
        }
    }

    fn stmt(&mut self, node: Node, sure: bool) {
        if self.depth > MAX_NODE_DEPTH {
            return;
        }
        self.depth += 1;
        match node.kind() {
            "function_definition" | "class_definition" => {
                if let Some(n) = node.child_by_field_name("name") {
                    self.bound.insert(text(self.src, n).to_string());
                }
            }
            "decorated_definition" => {
                self.stmt_at(node, "definition", sure);
            }
            "import_statement" | "import_from_statement" | "future_import_statement" => {
                self.bind(node, true)
            }
            "global_statement" | "nonlocal_statement" => {}
            "if_statement" => {
                self.expr_at(node, "condition", sure);
                for c in named_children(node).into_iter().skip(1) {
                    self.stmt(c, false);
                }
            }
            "for_statement" => {
                self.expr_at(node, "right", sure);
                self.bind_at(node, "left");
                self.block_at(node, "body", sure);
                self.stmt_at(node, "alternative", false);
            }
            "while_statement" => {
                self.expr_at(node, "condition", sure);
                self.block_at(node, "body", sure);
                self.stmt_at(node, "alternative", false);
            }
            "try_statement" => {
                for c in named_children(node) {
                    if c.kind() == "block" {
                        self.block(c, sure);
                    } else {
                        self.stmt(c, false);
                    }
                }
            }
            "with_statement" => {
                for c in named_children(node) {
                    if c.kind() == "block" {
                        self.block(c, sure);
                    } else {
                        self.with_items(c, sure);
                    }
                }
            }
            "except_clause" | "except_group_clause" => {
                // The exception type, and `as name` as in a `with` item.
                for c in named_children(node) {
                    if c.kind() == "block" {
                        self.block(c, sure);
                    } else {
                        self.with_items(c, sure);
                    }
                }
            }
            "elif_clause" => {
                self.expr_at(node, "condition", sure);
                self.block_at(node, "consequence", false);
            }
            "else_clause" | "finally_clause" | "block" => self.block(node, sure),
            "match_statement" => {
                self.expr_at(node, "subject", sure);
                // Cases bind and read under their patterns: counted as bound, never sure.
                let mut b = Binder::new(self.src, None, false);
                b.walk(node);
                self.bound.extend(b.bound);
            }
            _ => {
                for c in named_children(node) {
                    self.expr(c, sure);
                }
            }
        }
        self.depth -= 1;
    }

    fn with_items(&mut self, node: Node, sure: bool) {
        match node.kind() {
            "as_pattern" => {
                for v in named_children(node) {
                    if v.kind() == "as_pattern_target" {
                        self.bind(v, false);
                    } else {
                        self.expr(v, sure);
                    }
                }
            }
            "with_clause" | "with_item" => {
                for c in named_children(node) {
                    self.with_items(c, sure);
                }
            }
            _ => self.expr(node, sure),
        }
    }

    fn read(&mut self, node: Node, sure: bool) {
        let name = text(self.src, node);
        if sure
            && self.locals.contains(name)
            && !self.bound.contains(name)
            && !self.found.iter().any(|f| f == name)
        {
            self.found.push(name.to_string());
        }
    }

    fn expr(&mut self, node: Node, sure: bool) {
        if self.depth > MAX_NODE_DEPTH {
            return;
        }
        self.depth += 1;
        match node.kind() {
            "identifier" => self.read(node, sure),
            "attribute" => {
                self.expr_at(node, "object", sure);
            }
            "keyword_argument" => {
                self.expr_at(node, "value", sure);
            }
            "assignment" => {
                self.expr_at(node, "right", sure);
                if let Some(l) = node.child_by_field_name("left") {
                    // An annotation alone (`x: int`) binds nothing.
                    if node.child_by_field_name("right").is_some() {
                        self.bind(l, false);
                    }
                }
            }
            "augmented_assignment" => {
                self.expr_at(node, "left", sure);
                self.expr_at(node, "right", sure);
                self.bind_at(node, "left");
            }
            "named_expression" => {
                self.expr_at(node, "value", sure);
                if let Some(n) = node.child_by_field_name("name") {
                    self.bound.insert(text(self.src, n).to_string());
                }
            }
            "boolean_operator" => {
                self.expr_at(node, "left", sure);
                self.expr_at(node, "right", false);
            }
            "conditional_expression" => {
                let parts = named_children(node);
                if let Some(c) = parts.get(1) {
                    self.expr(*c, sure);
                }
                for (i, p) in parts.iter().enumerate() {
                    if i != 1 {
                        self.expr(*p, false);
                    }
                }
            }
            "lambda"
            | "list_comprehension"
            | "set_comprehension"
            | "dictionary_comprehension"
            | "generator_expression" => {}
            _ => {
                for c in named_children(node) {
                    self.expr(c, sure);
                }
            }
        }
        self.depth -= 1;
    }
}

/// Whether `node` holds a node of one of `kinds`, outside nested functions and classes.
fn contains_kind(node: Node, kinds: &[&str]) -> bool {
    named_children(node).into_iter().any(|c| {
        kinds.contains(&c.kind())
            || (!matches!(
                c.kind(),
                "function_definition" | "class_definition" | "lambda"
            ) && contains_kind(c, kinds))
    })
}

fn is_docstring(stmt: Node) -> bool {
    stmt.kind() == "expression_statement"
        && stmt
            .named_child(0)
            .is_some_and(|e| matches!(e.kind(), "string" | "concatenated_string"))
}

// ---------------------------------------------------------------------------------------------
// Java: calls without a receiver or on `this` (`foo(x)`, `this.foo(x)`, not `obj.foo(x)`),
// fields read through `this`, and self-recursion.

/// Methods every class can call without a receiver (`Object`'s, an enum's, a record's).
const JAVA_IMPLICIT_METHODS: &[&str] = &[
    "clone",
    "equals",
    "finalize",
    "getClass",
    "hashCode",
    "notify",
    "notifyAll",
    "toString",
    "wait",
    "values",
    "valueOf",
    "ordinal",
    "name",
    "compareTo",
    "getDeclaringClass",
    "describeConstable",
];

fn check_java(view: &MaskedView, target: &Target, function: &str, g: &mut Grounding) {
    let body = dedent_first(function);
    let src = format!("class RepohopGrounding {{\n{body}}}\n");
    let Some(tree) = parse_java(&src) else {
        return;
    };
    let root = tree.root_node();
    if root.has_error() {
        g.problems.push(Problem {
            kind: ProblemKind::Syntax,
            name: syntax_location(&src, root, 1),
            suggestions: Vec::new(),
        });
        return;
    }
    let def = root
        .named_child(0)
        .and_then(|c| c.child_by_field_name("body"))
        .and_then(|b| {
            named_children(b)
                .into_iter()
                .find(|m| matches!(m.kind(), "method_declaration" | "constructor_declaration"))
        });
    let Some(def) = def else {
        g.problems.push(Problem {
            kind: ProblemKind::Syntax,
            name: "no method definition".into(),
            suggestions: Vec::new(),
        });
        return;
    };
    let mut uses = JavaUses::default();
    if let Some(b) = def.child_by_field_name("body") {
        java_uses(&src, b, false, &mut uses, 0);
    }
    let JavaUses {
        calls,
        fields,
        declared,
    } = uses;

    let class = view
        .target()
        .and_then(|id| view.resolver().enclosing_class(id));
    if let Some(class) = class {
        let repo = view.repository();
        g.class_name = Some(repo.class(class).name.clone());
        let mut known = Vec::new();
        let mut seen = HashSet::new();
        let mut complete = java_class_methods(view, class, &mut known, &mut seen, 0);
        // Enclosing classes of a nested class.
        let file = repo.class_file(class);
        let mut q = repo.class(class).qualname.as_str();
        while let Some(i) = q.rfind('.') {
            q = &q[..i];
            for d in view.resolver().lookup_qualname(q) {
                if let Def::Class(c) = d {
                    if repo.class_file(c) == file {
                        complete &= java_class_methods(view, c, &mut known, &mut seen, 0);
                    }
                }
            }
        }
        let mut statics = Vec::new();
        for imp in view.imports_of(&target.path).iter().filter(|i| i.is_static) {
            match (&imp.name, imp.is_wildcard) {
                (Some(n), false) => statics.push(n.clone()),
                _ => complete = false,
            }
        }
        g.class_attributes = known.clone();
        for name in &calls {
            g.checked.push(name.clone());
            if !complete
                || *name == target.name
                || declared.contains(name)
                || known.contains(name)
                || statics.contains(name)
                || JAVA_IMPLICIT_METHODS.contains(&name.as_str())
            {
                continue;
            }
            g.problems.push(Problem {
                kind: ProblemKind::UndefinedName,
                name: name.clone(),
                suggestions: close_names(name, known.iter().map(String::as_str).collect()),
            });
        }
        for name in &fields {
            g.checked.push(format!("this.{name}"));
            if !complete || known.contains(name) || declared.contains(name) {
                continue;
            }
            g.problems.push(Problem {
                kind: ProblemKind::MissingAttribute,
                name: name.clone(),
                suggestions: close_names(name, known.iter().map(String::as_str).collect()),
            });
        }
    }
    if let Some(p) = java_self_recursion(&src, def, target) {
        g.problems.push(p);
    }
}

/// What a Java body uses of its class.
#[derive(Default)]
struct JavaUses {
    /// Methods called without a receiver or on `this`.
    calls: Vec<String>,
    /// Fields read or written through `this`.
    fields: Vec<String>,
    /// Members that anonymous or local classes in the body declare.
    declared: HashSet<String>,
}

/// What the code under `node` uses of its class, outside class bodies (an anonymous or local
/// class may inherit what it calls); members those classes declare go to `declared`.
fn java_uses(src: &str, node: Node, in_class: bool, uses: &mut JavaUses, depth: usize) {
    if depth > MAX_NODE_DEPTH {
        return;
    }
    let mut in_class = in_class;
    let on_this = |n: Node| n.child_by_field_name("object").map(|o| o.kind());
    let push = |list: &mut Vec<String>, n: Node| {
        let n = text(src, n).to_string();
        if !list.contains(&n) {
            list.push(n);
        }
    };
    match node.kind() {
        "method_invocation" if !in_class => {
            let receiver = on_this(node);
            let qualified = !matches!(receiver, None | Some("this"))
                || named_children(node).iter().any(|c| c.kind() == "super");
            if let (false, Some(n)) = (qualified, node.child_by_field_name("name")) {
                push(&mut uses.calls, n);
            }
        }
        "field_access" if !in_class && on_this(node) == Some("this") => {
            if let Some(n) = node.child_by_field_name("field") {
                push(&mut uses.fields, n);
            }
        }
        "class_body" => {
            in_class = true;
            for m in named_children(node) {
                let names: Vec<Node> = match m.kind() {
                    "method_declaration" => m.child_by_field_name("name").into_iter().collect(),
                    "field_declaration" => named_children(m)
                        .into_iter()
                        .filter(|d| d.kind() == "variable_declarator")
                        .filter_map(|d| d.child_by_field_name("name"))
                        .collect(),
                    _ => Vec::new(),
                };
                for n in names {
                    uses.declared.insert(text(src, n).to_string());
                }
            }
        }
        _ => {}
    }
    for c in named_children(node) {
        java_uses(src, c, in_class, uses, depth + 1);
    }
}

/// Methods (and record components) of `class` and its in-repo superclasses and interfaces;
/// false when a supertype is not in the repository.
fn java_class_methods(
    view: &MaskedView,
    class: ClassId,
    out: &mut Vec<String>,
    seen: &mut HashSet<ClassId>,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH || !seen.insert(class) {
        return true;
    }
    let repo = view.repository();
    let c = view.class(class).unwrap_or_else(|| repo.class(class));
    for m in c.methods.iter().chain(&c.members) {
        let m = m.rsplit('.').next().unwrap_or(m).to_string();
        if !out.contains(&m) {
            out.push(m);
        }
    }
    let file = repo.class_file(class);
    let mut complete = true;
    for base in &c.bases {
        let base = base.split('<').next().unwrap_or(base).trim();
        if base.is_empty() || base == "Object" || base == "java.lang.Object" {
            continue;
        }
        let classes: Vec<ClassId> = match view.resolver().resolve_in_file(file, base) {
            Ok(defs) => defs
                .into_iter()
                .filter_map(|d| match d {
                    Def::Class(id) => Some(id),
                    Def::Function(_) => None,
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        if classes.is_empty() {
            complete = false;
        }
        for b in classes {
            complete &= java_class_methods(view, b, out, seen, depth + 1);
        }
    }
    complete
}

/// A body that is only `return name(params);` / `name(params);` (or `this.name(...)`).
fn java_self_recursion(src: &str, def: Node, target: &Target) -> Option<Problem> {
    let params: Vec<String> = def
        .child_by_field_name("parameters")
        .map(named_children)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| match p.kind() {
            "formal_parameter" => p.child_by_field_name("name"),
            "spread_parameter" => named_children(p)
                .into_iter()
                .find(|c| c.kind() == "variable_declarator")
                .and_then(|d| d.child_by_field_name("name")),
            _ => None,
        })
        .map(|n| text(src, n).to_string())
        .collect();
    let body = def.child_by_field_name("body")?;
    let stmts: Vec<Node> = named_children(body)
        .into_iter()
        .filter(|s| !matches!(s.kind(), "line_comment" | "block_comment"))
        .collect();
    let [stmt] = stmts.as_slice() else {
        return None;
    };
    let call = match stmt.kind() {
        "return_statement" | "expression_statement" => stmt.named_child(0)?,
        _ => return None,
    };
    if call.kind() != "method_invocation"
        || call.child_by_field_name("name").map(|n| text(src, n)) != Some(target.name.as_str())
        || call
            .child_by_field_name("object")
            .is_some_and(|o| o.kind() != "this")
    {
        return None;
    }
    let args: Vec<String> = call
        .child_by_field_name("arguments")
        .map(named_children)
        .unwrap_or_default()
        .into_iter()
        .filter(|a| !matches!(a.kind(), "line_comment" | "block_comment"))
        .map(|a| text(src, a).to_string())
        .collect();
    (args == params).then(|| Problem {
        kind: ProblemKind::SelfRecursion,
        name: target.name.clone(),
        suggestions: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::complete_function;
    use crate::repo::{resolve_target, Repository};

    fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository) {
        crate::repo::temp_repository(files)
    }

    fn check_in(repo: &Repository, target: &str, function: &str) -> Grounding {
        let id = resolve_target(repo, target).unwrap();
        let view = MaskedView::new(repo, Some(id), false);
        let t = Target::of(repo, id).unwrap();
        check(&view, &t, function)
    }

    fn problems(g: &Grounding) -> Vec<(ProblemKind, &str)> {
        g.problems
            .iter()
            .map(|p| (p.kind, p.name.as_str()))
            .collect()
    }

    const TEXT_PY: &str = "import os\n\
        import xml.etree.ElementTree\n\
        from collections import OrderedDict as OD\n\
        LIMIT = 10\n\
        if os.name == 'nt':\n    SEP = '\\\\'\nelse:\n    SEP = '/'\n\
        try:\n    import json\nexcept ImportError:\n    json = None\n\
        for _i in range(2):\n    LAST = _i\n\n\
        def helper(x):\n    return x\n\n\
        def clean(text, *parts, sep=SEP, **opts):\n    \"\"\"Clean.\"\"\"\n    return text.strip()\n\n\
        def replace_all(text):\n    return text\n";

    #[test]
    fn an_unimported_module_is_undefined_and_bound_names_are_not() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/text.py", TEXT_PY)]);
        let generated = r#"def clean(text, *parts, sep=SEP, **opts):
    """Clean `undefined_in_docstring`."""
    words = [w.lower() for w in parts if w]
    total = sum(len(w) for w in words)
    out = OD()
    pairs = {a: b for a, b in zip(words, words[1:])}
    for i, (a, b) in enumerate(pairs.items()):
        out[a] = b
    with open(os.devnull) as fh, open(os.sep) as g1:
        fh.read()
    try:
        data = json.dumps(opts, indent=LIMIT, key=helper(LAST))
    except ValueError as err:
        raise RuntimeError(str(err)) from err
    if (n := len(words)) > total:
        pass
    f = lambda x, y=2: x + y
    def inner(z, *zs, **kz):
        nonlocal total
        return z
    class Local:
        attr = 1
    first, *rest = words
    count: int = 0
    count += 1
    tree = xml.etree.ElementTree.fromstring("<a/>")
    print(f"{sep}{n!r:>{LIMIT}}", key=inner, end=__name__, cls=Local, t=tree)
    return re.sub(r"\s+", sep, text + missing_thing + first + clean(text))
"#;
        let g = check_in(&repo, "pkg.text.clean", generated);
        assert_eq!(
            problems(&g),
            [
                (ProblemKind::UndefinedName, "re"),
                (ProblemKind::UndefinedName, "missing_thing"),
            ],
            "{g:#?}"
        );
        let re = &g.problems[0];
        assert!(re.suggestions.iter().any(|s| s == "import re"), "{re:?}");
        for name in [
            "OD", "json", "LIMIT", "os", "re", "xml", "sum", "helper", "LAST",
        ] {
            assert!(
                g.checked.iter().any(|c| c == name),
                "{name} not in {:?}",
                g.checked
            );
        }
        // Locals and parameters are not looked up outside the function.
        for name in [
            "words", "text", "w", "fh", "g1", "n", "first", "rest", "err", "inner",
        ] {
            assert!(
                !g.checked.iter().any(|c| c == name),
                "{name} in {:?}",
                g.checked
            );
        }
        // A close module-level name is suggested.
        let g = check_in(
            &repo,
            "pkg.text.replace_all",
            "def replace_all(text):\n    return helpr(text)\n",
        );
        assert_eq!(problems(&g), [(ProblemKind::UndefinedName, "helpr")]);
        assert_eq!(
            g.problems[0].suggestions.first().map(String::as_str),
            Some("helper")
        );
    }

    const SHAPES_PY: &str = "class Box:\n    SCALE = 2\n\n\
        \x20   def __init__(self, w):\n        self.w = w\n\n\
        \x20   def _helper(self, x):\n        return x * self.SCALE\n\n\
        \x20   def reset(self):\n        self.cache = {}\n\n\
        \x20   def area(self):\n        return self.w\n\n\
        \x20   @staticmethod\n    def unit(value):\n        return value\n";

    const COUNTER_PY: &str = "from .util import cached, merge, tagged\n\n\
        def scale(value, factor=2, *, floor=0):\n    return max(floor, value * factor)\n\n\
        class Counter:\n\
        \x20   def __init__(self, hook):\n        self.hook = hook\n        self.counts = {}\n\n\
        \x20   def add(self, key):\n        self.counts[key] = self.counts.get(key, 0) + 1\n\n\
        \x20   def hook(self, a, b):\n        return a\n\n\
        \x20   @staticmethod\n    def norm(key, lower=True):\n        return key\n\n\
        \x20   @property\n    def total(self):\n        return 0\n\n\
        \x20   def update(self, items):\n        pass\n";
    const HELPERS_PY: &str = "import functools\n\n\
        def merge(a, b, /):\n    return a\n\n\
        def tagged(fn):\n    return fn\n\n\
        @functools.lru_cache()\n\
        def cached(x):\n    return x\n";

    #[test]
    fn imports_the_body_lacks_go_after_its_docstring_when_they_leave_fewer_problems() {
        let (_dir, repo) = repo_with(&[(
            "m.py",
            "def top(xs):\n    \"\"\"Most common.\"\"\"\n    return xs[0]\n",
        )]);
        let id = resolve_target(&repo, "m.top").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let answer = "import collections\n\ndef top(xs):\n    \"\"\"Most common.\"\"\"\n    \
                      # the most common one\n    \
                      return collections.Counter(xs).most_common(1)[0][0]\n";
        let mut completion = complete_function(answer, &target.shape()).unwrap();
        let g = check_importing(&view, &target, &mut completion, answer);
        assert!(g.is_ok(), "{:?}", g.problems);
        assert_eq!(g.added_imports, ["import collections"]);
        assert_eq!(
            completion.function,
            "def top(xs):\n    \"\"\"Most common.\"\"\"\n    import collections\n    \
             # the most common one\n    return collections.Counter(xs).most_common(1)[0][0]\n"
        );
        assert_eq!(
            check(&view, &target, &completion.function),
            g_without_imports(&g)
        );
        // Nothing to import for a name that is no module: the answer is left as it was.
        let answer = "def top(xs):\n    return colections.Counter(xs)\n";
        let mut completion = complete_function(answer, &target.shape()).unwrap();
        let before = completion.clone();
        let g = check_importing(&view, &target, &mut completion, answer);
        assert_eq!(problems(&g), [(ProblemKind::UndefinedName, "colections")]);
        assert!(g.added_imports.is_empty());
        assert_eq!(completion, before);
    }

    fn g_without_imports(g: &Grounding) -> Grounding {
        Grounding {
            added_imports: Vec::new(),
            ..g.clone()
        }
    }

    #[test]
    fn calls_are_checked_against_the_definitions_they_reach() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            ("pkg/util.py", HELPERS_PY),
            ("pkg/counter.py", COUNTER_PY),
        ]);
        let generated = "    def update(self, items):
        for k, v in items:
            self.add(k, v)
            self.add(key=k)
            self.norm(k, lower=False)
            self.hook(k)
            merge(k, v)
            merge(a=k, b=v)
            scale(v, 3, floor=1)
            scale(v, ceiling=1)
            tagged(k, v, *items)
        def add(a, b, c):
            return a
        add(1, 2, 3)
";
        let g = check_in(&repo, "pkg.counter.Counter.update", generated);
        let bad: Vec<&str> = g
            .problems
            .iter()
            .filter(|p| p.kind == ProblemKind::BadCall)
            .map(|p| p.name.as_str())
            .collect();
        // `self.hook` is an instance attribute too, `add` inside is the local function, and
        // `*items` may fill anything: none is checked.
        assert_eq!(bad.len(), 3, "{g:#?}");
        assert!(
            bad[0].starts_with(
                "line 3: `self.add(...)`: `def add(self, key):` takes 1 positional \
                 argument besides `self` but 2 were given"
            ),
            "{bad:?}"
        );
        assert!(bad[1].contains("`merge(...)`") && bad[1].contains("`a` by position only"));
        assert!(bad[2].contains("`scale(...)`") && bad[2].contains("has no parameter `ceiling`"));
        let msg = repair_request(&g).unwrap();
        assert!(msg.contains("arguments they do not take"), "{msg}");
        assert!(msg.contains(bad[0]), "{msg}");
        // A definition behind a decorator may take anything.
        let g = check_in(
            &repo,
            "pkg.counter.Counter.update",
            "    def update(self, items):\n        return cached(1, 2) + self.total(1)\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn attributes_of_values_of_known_repository_types_are_checked() {
        const CONF_PY: &str = "from collections import namedtuple\n\n\
            Conf = namedtuple('Conf', [\n    'page_size',  # bytes per page\n    'order',\n])\n";
        const NODES_PY: &str = "from .conf import Conf\n\n\
            class Node:\n    def __init__(self, conf: Conf, parent=None):\n        \
            self.conf = conf\n        self.parent = parent\n        self.entries = []\n\n\
            class Root(Node):\n    def __init__(self, conf: Conf):\n        \
            super().__init__(conf)\n        self.children = []\n\n\
            class Leaf(Node):\n    pass\n\n\
            class Branch(Root):\n    def grow(self):\n        self.depth = 1\n";
        const TREE_PY: &str = "from .nodes import Node, Root, Leaf\nfrom .conf import Conf\n\n\
            class Tree:\n    def __init__(self, conf: Conf, root: Root):\n        \
            self.conf = conf\n        self.root = root\n        self.other = root\n        \
            self.other = None\n        self.spare = conf\n\n    \
            def walk(self, node: Node, depth: int = 0):\n        return node\n\n    \
            def fork(self):\n        self.copy = self.__class__(self.conf, self.root)\n\n\
            class Grove(Tree):\n    def replant(self):\n        self.spare = None\n";
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            ("pkg/conf.py", CONF_PY),
            ("pkg/nodes.py", NODES_PY),
            ("pkg/tree.py", TREE_PY),
        ]);
        let generated = "    def walk(self, node: Node, depth: int = 0):
        total = self.conf.page_size + self.conf.pagesize
        self.root.children.append(node.entries)
        if self.root.depth or node.children:
            total += node.weight
        self.other.anything + self.spare.extra + self.copy.branches + self.copy.walk
        cur = self.root
        while isinstance(cur, Leaf):
            cur = cur.left
            cur.right
        if isinstance(cur, Root):
            return cur.kids
        return cur.conf.order, node.__class__
";
        let g = check_in(&repo, "pkg.tree.Tree.walk", generated);
        let typed: Vec<&str> = g
            .problems
            .iter()
            .filter(|p| p.kind == ProblemKind::TypedAttribute)
            .map(|p| p.name.as_str())
            .collect();
        // Not flagged: what a subclass has (`children` of `Root`, `depth` of `Branch`), an
        // attribute assigned two ways (`self.other`, and `self.spare` by a subclass), a name
        // after it is rebound (`cur.right`), the method being written (`self.copy.walk`: the
        // masked view hides it), the namedtuple's fields and dunder names.
        assert_eq!(typed.len(), 5, "{g:#?}");
        assert!(
            typed[0].starts_with(
                "line 2: `self.conf.pagesize`: `self.conf` is a `Conf` (as the class assigns \
                 it), which has no attribute `pagesize`; it has: page_size, order"
            ),
            "{typed:?}"
        );
        assert!(typed[1].starts_with("line 5: `node.weight`: `node` is a `Node` (its annotation)"));
        assert!(typed[2].starts_with("line 6: `self.copy.branches`: `self.copy` is a `Tree`"));
        assert!(typed[3].starts_with("line 9: `cur.left`: `cur` is a `Leaf`"));
        assert!(typed[4].starts_with("line 12: `cur.kids`: `cur` is a `Root`"));
        assert_eq!(g.problems[0].suggestions, vec!["page_size".to_string()]);
        let msg = repair_request(&g).unwrap();
        assert!(
            msg.contains("do not have (each read would raise an AttributeError)"),
            "{msg}"
        );
        assert!(msg.contains("did you mean `page_size`?"), "{msg}");
        // The reference-style body passes.
        let g = check_in(
            &repo,
            "pkg.tree.Tree.walk",
            "    def walk(self, node: Node, depth: int = 0):\n        \
             while not isinstance(node, Leaf):\n            node = node.children[0]\n        \
             return node.entries[: self.conf.order]\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn stores_outside_the_slots_of_a_slotted_family_are_reported() {
        const MEM_PY: &str = "class Base(object):\n    __slots__ = ('_fd',)\n\n\
            class Memory(Base):\n    __slots__ = ['_cache', '_wal', 'last_page']\n    \
            limit = 3\n\n    @property\n    def size(self):\n        return 0\n\n    \
            @size.setter\n    def size(self, v):\n        self._cache = v\n\n    \
            def set_meta(self, page):\n        pass\n\n\
            class Fast(Memory):\n    __slots__ = 'spare'\n\n\
            class Open:\n    def set_meta(self, page):\n        pass\n\n\
            class Loose(Base):\n    __slots__ = ['__dict__']\n    def set_meta(self, page):\n        pass\n";
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/mem.py", MEM_PY)]);
        let generated = "    def set_meta(self, page):
        self._root_page = page
        self._fd, self.last_pag = 1, 2
        self._cache = self._wal = None
        self.size = 4
        self.spare = self.__class__
        for self.last_page in range(page):
            pass
";
        let g = check_in(&repo, "pkg.mem.Memory.set_meta", generated);
        assert_eq!(
            problems(&g),
            [
                (ProblemKind::SlotStore, "_root_page"),
                (ProblemKind::SlotStore, "last_pag")
            ],
            "{g:?}"
        );
        assert_eq!(g.problems[1].suggestions, ["last_page"]);
        let request = repair_request(&g).unwrap();
        assert!(
            request.contains("Instances of `Memory` have `__slots__`")
                && request.contains("- `self.last_pag` (did you mean"),
            "{request}"
        );
        // A class without slots, or one whose slots hold `__dict__`, takes any attribute.
        let open = "    def set_meta(self, page):\n        self._root_page = page\n";
        assert!(check_in(&repo, "pkg.mem.Open.set_meta", open).is_ok());
        assert!(check_in(&repo, "pkg.mem.Loose.set_meta", open).is_ok());
    }

    #[test]
    fn a_missing_method_is_reported_with_the_real_sibling() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/shapes.py", SHAPES_PY)]);
        let generated = "    def area(self):\n        self.tmp = 3\n        \
            return self.helper(self.w) + self.tmp + self.cache + self.SCALE + self._helper(1) \
            + self.area + self.__class__.__name__ + Box.SCALE\n";
        let g = check_in(&repo, "pkg/shapes.py::Box.area", generated);
        assert_eq!(
            problems(&g),
            [(ProblemKind::MissingAttribute, "helper")],
            "{g:#?}"
        );
        assert!(
            g.problems[0].suggestions.iter().any(|s| s == "_helper"),
            "{:?}",
            g.problems[0]
        );
        assert_eq!(g.class_name.as_deref(), Some("Box"));
        for a in ["w", "SCALE", "_helper", "reset", "cache"] {
            assert!(
                g.class_attributes.iter().any(|x| x == a),
                "{a}: {:?}",
                g.class_attributes
            );
        }
        assert!(
            g.checked.iter().any(|c| c == "self.helper"),
            "{:?}",
            g.checked
        );
        // A static method's first parameter is not the instance.
        let g = check_in(
            &repo,
            "pkg/shapes.py::Box.unit",
            "    @staticmethod\n    def unit(value):\n        return value.anything\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn an_attribute_of_an_in_repo_base_is_accepted() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            (
                "pkg/base.py",
                "class Root(object):\n    KIND = 'root'\n\n\
                 class Base(Root):\n    def __init__(self):\n        self.registry = {}\n\n\
                 \x20   def lookup(self, k):\n        return self.registry[k]\n",
            ),
            (
                "pkg/child.py",
                "from .base import Base\n\nclass Child(Base):\n    def get(self, k):\n        return None\n",
            ),
        ]);
        let generated = "    def get(self, k):\n        \
            return self.lookup(k) or self.registry.get(k) or self.KIND or self.nothing\n";
        let g = check_in(&repo, "pkg/child.py::Child.get", generated);
        assert_eq!(
            problems(&g),
            [(ProblemKind::MissingAttribute, "nothing")],
            "{g:#?}"
        );
    }

    #[test]
    fn a_third_party_base_turns_the_attribute_check_off() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            (
                "pkg/views.py",
                "from django.views import View\n\n\
                 class Page(View):\n    def render(self):\n        return None\n\n\
                 class Plain:\n    def render(self):\n        return None\n",
            ),
        ]);
        let generated = "    def render(self):\n        return self.get_context_data()\n";
        let g = check_in(&repo, "pkg/views.py::Page.render", generated);
        assert!(g.is_ok(), "{g:#?}");
        assert!(g.checked.iter().any(|c| c == "self.get_context_data"));
        // The same read on a class without bases is reported.
        let g = check_in(&repo, "pkg/views.py::Plain.render", generated);
        assert_eq!(
            problems(&g),
            [(ProblemKind::MissingAttribute, "get_context_data")]
        );
    }

    #[test]
    fn a_builtin_base_is_checked_with_its_known_attributes() {
        let (_dir, repo) = repo_with(&[(
            "bimap.py",
            "class OneToOne(dict):\n    def __init__(self):\n        self.inv = {}\n\n\
             \x20   def popitem(self):\n        return None\n",
        )]);
        let generated = "    def popitem(self):\n        with self._lock:\n            \
            key, value = dict.popitem(self)\n        self.inv.pop(value)\n        \
            self.setdefault(key, value)\n        return self.add(key)\n";
        let g = check_in(&repo, "bimap.py::OneToOne.popitem", generated);
        assert_eq!(
            problems(&g),
            [
                (ProblemKind::MissingAttribute, "_lock"),
                (ProblemKind::MissingAttribute, "add")
            ],
            "{g:#?}"
        );
        // No name is close to `add`: the message lists what `dict` gives the class.
        let msg = repair_request(&g).unwrap();
        assert!(
            msg.contains(
                "Class `OneToOne` derives from the builtin `dict`, which gives it: `clear`, `copy`,"
            ),
            "{msg}"
        );
        assert!(
            msg.contains("`values`, item access (`self[...]`).\n"),
            "{msg}"
        );
        // With a close name for every missing attribute, the list is left out.
        let g = check_in(
            &repo,
            "bimap.py::OneToOne.popitem",
            "    def popitem(self):\n        return self.invv\n",
        );
        assert_eq!(problems(&g), [(ProblemKind::MissingAttribute, "invv")]);
        assert!(!repair_request(&g).unwrap().contains("derives from"));
    }

    const UTIL_PY: &str =
        "def total(items, *args, start=0, **kw):\n    \"\"\"Sum.\"\"\"\n    return 0\n\n\
        class Acc:\n    def add(self, x, y):\n        return x\n";

    /// Whether the check finds self-recursion in `function`, asserting it finds nothing else.
    fn recursion_only(repo: &Repository, target: &str, function: &str) -> bool {
        let g = check_in(repo, target, function);
        assert!(
            g.problems
                .iter()
                .all(|p| p.kind == ProblemKind::SelfRecursion),
            "{g:#?}"
        );
        !g.problems.is_empty()
    }

    #[test]
    fn a_call_of_itself_that_every_call_reaches_is_self_recursion() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/util.py", UTIL_PY)]);
        let recursion = |target: &str, function: &str| recursion_only(&repo, target, function);
        let total = |body: &str| format!("def total(items, *args, start=0, **kw):\n{body}");
        // Its own arguments, other arguments, after other statements, inside an expression.
        for body in [
            "    \"\"\"Sum.\"\"\"\n    return total(items, *args, start=start, **kw)\n",
            "    return total(items[1:], *args, start=start, **kw)\n",
            "    rest = list(items)\n    if rest:\n        start += 1\n    return 1 + total(rest)\n",
            "    n = len(items) + total(items)\n    return n\n",
        ] {
            assert!(recursion("pkg.util.total", &total(body)), "{body}");
        }
        // A base case before it, or the call only under a condition, a lambda or a
        // comprehension; a generator runs nothing when called.
        for body in [
            "    if not items:\n        return start\n    return items[0] + total(items[1:])\n",
            "    if not items:\n        raise ValueError(items)\n    return total(items[1:])\n",
            "    return start if not items else total(items[1:])\n",
            "    return items and total(items[1:])\n",
            "    f = lambda: total(items)\n    return [total(i) for i in items]\n",
            "    yield from total(items)\n",
        ] {
            assert!(!recursion("pkg.util.total", &total(body)), "{body}");
        }
        let add = |body: &str| format!("    def add(self, x, y):\n{body}");
        for body in [
            "        \"\"\"Add.\"\"\"\n        return self.add(x, y)\n",
            "        return self.add(y, x)\n",
            "        y = Acc.add(self, x, y)\n        return y\n",
        ] {
            assert!(recursion("pkg.util.Acc.add", &add(body)), "{body}");
        }
        for body in [
            "        if x > y:\n            return self.add(y, x)\n        return x + y\n",
            "        return x.add(x, y)\n",
        ] {
            assert!(!recursion("pkg.util.Acc.add", &add(body)), "{body}");
        }
    }

    #[test]
    fn a_call_past_tests_no_call_can_change_is_self_recursion() {
        const TABLE_PY: &str =
            "class Table:\n    def __init__(self):\n        self._cache = None\n\n\
            \x20   def _load(self):\n        self._cache = {}\n\n\
            \x20   def get(self, cond=None, doc_id=None, doc_ids=None):\n        return None\n\n\
            \x20   def remove(self, cond=None, doc_ids=None):\n        return []\n\n\
            def total(items, *args, start=0, **kw):\n    return 0\n";
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/table.py", TABLE_PY)]);
        let recursion = |target: &str, function: &str| recursion_only(&repo, target, function);
        let get = |body: &str| {
            format!("    def get(self, cond=None, doc_id=None, doc_ids=None):\n{body}")
        };
        let remove = |body: &str| format!("    def remove(self, cond=None, doc_ids=None):\n{body}");
        // Past `is None` / `isinstance` tests (or their `else`) of what it passes on in place;
        // after such a guard, inside a `try` with every parameter passed on.
        for body in [
            "        if doc_id is not None:\n            return self.get(doc_id=doc_id)\n        return None\n",
            "        if cond is None and doc_id is not None:\n            return self.get(cond, doc_id)\n        return None\n",
            "        if not isinstance(doc_id, (int, str)):\n            return None\n        return self.get(cond, doc_id=doc_id)\n",
            "        if doc_id is None:\n            return None\n        else:\n            return Table.get(self, doc_id=doc_id)\n",
        ] {
            assert!(recursion("pkg.table.Table.get", &get(body)), "{body}");
        }
        let guarded = "        if cond is None and doc_ids is None:\n            raise ValueError(cond)\n\
            \x20       try:\n            removed = self.remove(cond, doc_ids)\n        except KeyError:\n\
            \x20           removed = []\n        return removed\n";
        assert!(recursion("pkg.table.Table.remove", &remove(guarded)));
        let total = "def total(items, *args, start=0, **kw):\n    try:\n        \
            return total(items, *args, start=start, **kw)\n    except TypeError:\n        return 0\n";
        assert!(recursion("pkg.table.total", total));
        // A tested parameter passed changed, left out or assigned; a test of a truth value,
        // of the instance's state; an earlier branch's test of what it leaves out; a `try`
        // passing other arguments.
        for body in [
            "        if doc_id is not None:\n            return self.get(cond=doc_id)\n        return None\n",
            "        if doc_id is not None:\n            return self.get(cond)\n        return None\n",
            "        if doc_id is not None:\n            doc_id = int(doc_id)\n            return self.get(doc_id=doc_id)\n        return None\n",
            "        if doc_id:\n            return self.get(doc_id=doc_id)\n        return None\n",
            "        if self._cache is None:\n            self._load()\n            return self.get(cond, doc_id, doc_ids)\n        return None\n",
            "        if doc_id is not None:\n            return [doc_id]\n        elif cond is not None:\n            return self.get(cond)\n        return None\n",
            "        try:\n            return self.get(cond, doc_id=int(doc_id))\n        except TypeError:\n            return None\n",
            "        if not cond:\n            raise ValueError(cond)\n        return self.get(cond, doc_id, doc_ids)\n",
        ] {
            assert!(!recursion("pkg.table.Table.get", &get(body)), "{body}");
        }
    }

    #[test]
    fn a_property_that_reads_itself_is_self_recursion() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            (
                "pkg/buf.py",
                "class Buf:\n    def __init__(self):\n        self.data = []\n\n    @property\n    \
                 def size(self):\n        return len(self.data)\n",
            ),
        ]);
        let g = check_in(
            &repo,
            "pkg.buf.Buf.size",
            "    @property\n    def size(self):\n        n = self.size - 1\n        return n\n",
        );
        assert_eq!(
            problems(&g),
            [(ProblemKind::SelfRecursion, "size")],
            "{g:#?}"
        );
        let g = check_in(
            &repo,
            "pkg.buf.Buf.size",
            "    @property\n    def size(self):\n        return len(self.data)\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn a_local_read_before_every_assignment_on_the_way_is_unbound() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/util.py", UTIL_PY)]);
        let unbound = |body: &str| {
            let g = check_in(
                &repo,
                "pkg.util.total",
                &format!("def total(items):\n{body}"),
            );
            problems(&g)
                .into_iter()
                .filter(|(k, _)| *k == ProblemKind::UnboundLocal)
                .map(|(_, n)| n.to_string())
                .collect::<Vec<_>>()
        };
        // Read in a loop body before the assignment that follows it; `+=` reads first; a
        // nested helper called before its `def`.
        for (body, name) in [
            ("    out = []\n    for i in items:\n        out.append(items[start:i])\n        start = i\n    return out\n", "start"),
            ("    for i in items:\n        n += i\n    n = 0\n    return n\n", "n"),
            ("    x = helper(items)\n    def helper(v):\n        return v\n    return x\n", "helper"),
            ("    with open(items) as f:\n        data = f.read(size)\n    size = 1\n    return data\n", "size"),
        ] {
            assert_eq!(unbound(body), [name], "{body}");
        }
        // Bound first (even in a branch), read only in a branch, handler, `and`/`or` or
        // conditional expression, the loop's own target, a global, a comprehension's variable.
        for body in [
            "    if items:\n        n = 1\n    else:\n        n = 2\n    return n\n",
            "    for i in items:\n        if i:\n            print(prev)\n        prev = i\n    return 0\n",
            "    try:\n        v = items[0]\n    except IndexError:\n        return w\n    w = v\n    return w\n",
            "    ok = items and cache\n    cache = 1\n    return ok\n",
            "    v = cache if items else 0\n    cache = v\n    return v\n",
            "    for i in items:\n        print(i)\n    return 0\n",
            "    global COUNT\n    COUNT += 1\n    return COUNT\n",
            "    ys = [y for y in items]\n    return ys\n",
            "    while True:\n        line = items.pop()\n        if line:\n            break\n    return line\n",
        ] {
            assert!(unbound(body).is_empty(), "{body}");
        }
    }

    #[test]
    fn an_option_the_docstring_documents_is_suggested_from_the_keyword_arguments() {
        const WALK_PY: &str = "def walk(root, visit=None, **kwargs):\n    \"\"\"Walk.\n\n    \
            Args:\n        strict (bool): raise on errors. Default True.\n    \"\"\"\n    return root\n";
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/walk.py", WALK_PY)]);
        let g = check_in(
            &repo,
            "pkg.walk.walk",
            "def walk(root, visit=None, **kwargs):\n    if strict and loose:\n        return visit\n    return root\n",
        );
        assert_eq!(
            problems(&g),
            [
                (ProblemKind::UndefinedName, "strict"),
                (ProblemKind::UndefinedName, "loose")
            ]
        );
        // Only the documented option comes from `**kwargs`.
        assert_eq!(g.problems[0].suggestions[0], "kwargs.get('strict')");
        assert!(g.problems[1]
            .suggestions
            .iter()
            .all(|s| !s.contains("kwargs")));
        let msg = repair_request(&g).unwrap();
        assert!(msg.contains("did you mean `kwargs.get('strict')`"), "{msg}");
        // Without `**kwargs` there is nothing to read it from.
        let g = check_in(
            &repo,
            "pkg.walk.walk",
            "def walk(root, visit=None):\n    return strict\n",
        );
        assert!(g.problems[0]
            .suggestions
            .iter()
            .all(|s| !s.contains("get(")));
    }

    #[test]
    fn a_nested_functions_parameters_are_not_names_of_the_function_around_it() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/util.py", UTIL_PY)]);
        // `limit` is only the helper's parameter; the helper sees `items` from around it.
        let g = check_in(
            &repo,
            "pkg.util.total",
            "def total(items, *args, start=0, **kw):\n    def clip(value, limit):\n        \
             return min(value, limit, len(items))\n    return clip(start, limit)\n",
        );
        assert_eq!(
            problems(&g),
            [(ProblemKind::UndefinedName, "limit")],
            "{g:#?}"
        );
        let g = check_in(
            &repo,
            "pkg.util.total",
            "def total(items, *args, start=0, **kw):\n    def clip(value, limit=start):\n        \
             return min(value, limit, len(items), later)\n    later = 3\n    return clip(start)\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn a_function_that_does_not_parse_is_a_syntax_problem() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/util.py", UTIL_PY)]);
        let g = check_in(
            &repo,
            "pkg.util.total",
            "def total(items, *args, start=0, **kw):\n    return (undefined_name +\n",
        );
        assert_eq!(g.problems.len(), 1, "{g:#?}");
        assert_eq!(g.problems[0].kind, ProblemKind::Syntax);
        assert!(
            g.problems[0].name.starts_with("line "),
            "{:?}",
            g.problems[0]
        );
        let msg = repair_request(&g).unwrap();
        assert!(msg.contains("not valid Python"), "{msg}");
    }

    #[test]
    fn what_the_grammar_accepts_and_the_compiler_refuses_is_a_syntax_problem() {
        let (_dir, repo) = repo_with(&[("pkg/__init__.py", ""), ("pkg/util.py", UTIL_PY)]);
        let header = "def total(items, *args, start=0, **kw):\n";
        for (body, want) in [
            (
                "    return f(days=1, hours=2, days=3)\n",
                "line 2: keyword argument `days` repeated",
            ),
            (
                "    x = 1\n    return f(a=1, items)\n",
                "line 3: positional argument `items` follows a keyword argument",
            ),
            (
                "    return f(**kw, items)\n",
                "line 2: positional argument `items` follows a keyword argument",
            ),
            (
                "    return f(**kw, *args)\n",
                "line 2: `*args` after `**` unpacking",
            ),
            (
                "    g = lambda a, b, a: a\n    return g\n",
                "line 2: parameter `a` named twice",
            ),
        ] {
            let g = check_in(&repo, "pkg.util.total", &format!("{header}{body}"));
            assert_eq!(problems(&g), [(ProblemKind::Syntax, want)], "{body}");
            let msg = repair_request(&g).unwrap();
            assert!(msg.contains(want), "{msg}");
        }
        let g = check_in(
            &repo,
            "pkg.util.total",
            "def total(items, items, **kw):\n    return 0\n",
        );
        assert_eq!(
            problems(&g),
            [(ProblemKind::Syntax, "line 1: parameter `items` named twice")]
        );
        // What CPython accepts stays accepted.
        let g = check_in(
            &repo,
            "pkg.util.total",
            "def total(items, *args, start=0, **kw):\n    \
             return max(items, *args, key=len, default=start, **kw) + sum(x for x in args)\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn wildcard_imports_bring_in_repo_names_or_open_the_scope() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            ("pkg/consts.py", "RED = 1\nfrom .more import *\n"),
            ("pkg/more.py", "BLUE = 2\n"),
            (
                "pkg/paint.py",
                "from .consts import *\n\ndef paint():\n    return 0\n",
            ),
            (
                "pkg/ext.py",
                "from numpy import *\n\ndef paint():\n    return 0\n",
            ),
        ]);
        let generated = "def paint():\n    return RED + BLUE + GREEN\n";
        let g = check_in(&repo, "pkg/paint.py::paint", generated);
        assert_eq!(
            problems(&g),
            [(ProblemKind::UndefinedName, "GREEN")],
            "{g:#?}"
        );
        let g = check_in(
            &repo,
            "pkg/ext.py::paint",
            "def paint():\n    return array([1]) + GREEN\n",
        );
        assert!(g.is_ok(), "{g:#?}");
    }

    #[test]
    fn the_repair_request_names_every_problem() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            ("pkg/shapes.py", SHAPES_PY),
            ("pkg/util.py", UTIL_PY),
        ]);
        let g = check_in(
            &repo,
            "pkg/shapes.py::Box.area",
            "    def area(self):\n        return re.sub('a', 'b', total(self.helper()))\n",
        );
        assert_eq!(
            problems(&g),
            [
                (ProblemKind::UndefinedName, "re"),
                (ProblemKind::UndefinedName, "total"),
                (ProblemKind::MissingAttribute, "helper"),
            ],
            "{g:#?}"
        );
        let msg = repair_request(&g).unwrap();
        for want in [
            "`pkg/shapes.py`",
            "`re` is not defined",
            "`import re`",
            "`total` is not defined",
            "`from pkg.util import total`",
            "`self.helper`: class `Box` has no attribute `helper`",
            "`_helper`",
            "_helper, ",
            "```python",
        ] {
            assert!(msg.contains(want), "{want:?} not in:\n{msg}");
        }
        assert!(repair_request(&Grounding::default()).is_none());
        let g = check_in(
            &repo,
            "pkg.util.total",
            "def total(items, *args, start=0, **kw):\n    return total(items, *args, start=start, **kw)\n",
        );
        assert!(repair_request(&g).unwrap().contains("recurse forever"));
    }

    #[test]
    fn functions_nested_in_functions_see_the_enclosing_names() {
        let (_dir, repo) = repo_with(&[
            ("pkg/__init__.py", ""),
            (
                "pkg/outer.py",
                "def outer(a):\n    factor = 2\n    def inner(b):\n        return b\n    return inner(a)\n",
            ),
        ]);
        let g = check_in(
            &repo,
            "pkg.outer.outer.inner",
            "    def inner(b):\n        return b * factor * a + unknown\n",
        );
        assert_eq!(
            problems(&g),
            [(ProblemKind::UndefinedName, "unknown")],
            "{g:#?}"
        );
    }

    #[test]
    fn java_unqualified_calls_must_be_methods_of_the_class_or_its_supertypes() {
        let (_dir, repo) = repo_with(&[
            (
                "src/com/x/Base.java",
                "package com.x;\npublic class Base {\n    protected int helperBase() { return 1; }\n}\n",
            ),
            (
                "src/com/x/A.java",
                "package com.x;\nimport static java.lang.Math.max;\n\
                 public class A extends Base {\n    private int n;\n\
                 \x20   int size() { return n; }\n    int f(int a) { return a; }\n}\n",
            ),
            (
                "src/com/x/B.java",
                "package com.x;\npublic class B extends java.util.ArrayList<String> {\n\
                 \x20   int f(int a) { return a; }\n}\n",
            ),
        ]);
        let generated = "    int f(int a) {\n        \
            Runnable r = new Runnable() { public void run() { foo(); } };\n        \
            return max(size(), helperBase()) + hashCode() + sise(a) + f(a - 1) + this.n;\n    }\n";
        let g = check_in(&repo, "src/com/x/A.java::A.f", generated);
        assert_eq!(
            problems(&g),
            [(ProblemKind::UndefinedName, "sise")],
            "{g:#?}"
        );
        assert!(g.problems[0].suggestions.iter().any(|s| s == "size"));
        let msg = repair_request(&g).unwrap();
        assert!(
            msg.contains("`sise(...)`") && msg.contains("```java"),
            "{msg}"
        );
        // A supertype from outside the repository may provide anything.
        let g = check_in(
            &repo,
            "src/com/x/B.java::B.f",
            "    int f(int a) {\n        return sise(a);\n    }\n",
        );
        assert!(g.is_ok(), "{g:#?}");
        let g = check_in(
            &repo,
            "src/com/x/A.java::A.f",
            "    int f(int a) {\n        return f(a);\n    }\n",
        );
        assert_eq!(problems(&g), [(ProblemKind::SelfRecursion, "f")], "{g:#?}");
        // Calls and fields through `this` are the class's too.
        let g = check_in(
            &repo,
            "src/com/x/A.java::A.f",
            "    int f(int a) {\n        this.count = this.n + this.helperBase();\n        \
             return this.sise() + count;\n    }\n",
        );
        assert_eq!(
            problems(&g),
            [
                (ProblemKind::UndefinedName, "sise"),
                (ProblemKind::MissingAttribute, "count")
            ],
            "{g:#?}"
        );
        assert!(repair_request(&g).unwrap().contains("`this.count`"));
        let g = check_in(
            &repo,
            "src/com/x/A.java::A.f",
            "    int f(int a) {\n        return (a +;\n    }\n",
        );
        assert_eq!(g.problems.len(), 1);
        assert_eq!(g.problems[0].kind, ProblemKind::Syntax);
    }
}
