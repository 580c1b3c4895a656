//! Attributes read on values whose repository type is known without running anything: `v.y`
//! raises an AttributeError when `v`'s class (with its in-repo bases, and any in-repo subclass
//! it may really be) has no `y`. A value's type is known here in three cases only:
//! - `self.x`, when every assignment of `self.x` in the class and its in-repo bases stores a
//!   parameter annotated with one repository type, or a call of that type, or the class body
//!   annotates `x` with it;
//! - a parameter of the generated function annotated with a repository type and never rebound;
//! - a name inside the block of `if` / `elif` / `while isinstance(name, C):`, up to the first
//!   statement that rebinds it.
//!
//! A `namedtuple` has its fields and the tuple's methods as attributes. Any doubt (a base or
//! subclass from outside the repository, dynamic attributes, `Optional[...]`, two types)
//! leaves the read unchecked.

use super::{
    class_bases, class_info, close_names, function_of, literal_strings, named_children,
    param_names, parse_python, text, with_class_def, Binder, Problem, ProblemKind, ScopeUses,
    MAX_DEPTH,
};
use crate::repo::{ClassId, Def, FileId, MaskedView};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use tree_sitter::Node;

/// What a `namedtuple` class has besides its fields.
const TUPLE_ATTRS: &[&str] = &[
    "_asdict",
    "_replace",
    "_fields",
    "_field_defaults",
    "_make",
    "count",
    "index",
];

/// Most attributes of a type listed in the repair message.
const MAX_LISTED: usize = 30;

/// A repository type and every attribute its instances can have.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    name: String,
    attrs: Vec<String>,
}

/// Problems with attribute reads on values of known repository types in `def`, the generated
/// function parsed from `src`; `self_name` and `class` as for the other checks. `target` is the
/// generated function's name: the masked view hides it, yet instances of its class have it.
#[allow(clippy::too_many_arguments)]
pub(super) fn typed_attribute_reads(
    view: &MaskedView,
    path: &str,
    src: &str,
    def: Node,
    self_name: Option<&str>,
    class: Option<ClassId>,
    target: &str,
    scopes: &ScopeUses,
) -> Vec<Problem> {
    let Some(file) = view.file_id(path) else {
        return Vec::new();
    };
    let Some(body) = def.child_by_field_name("body") else {
        return Vec::new();
    };
    let types = Types {
        view,
        file,
        method: class.map(|c| (c, target)),
        known: RefCell::new(HashMap::new()),
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut report = |node: Node, value: &str, attr: &str, shape: &Shape, why: &str| {
        if (attr.starts_with("__") && attr.ends_with("__")) || shape.attrs.iter().any(|a| a == attr)
        {
            return;
        }
        if !seen.insert(format!("{value}.{attr}")) {
            return;
        }
        let listed: Vec<&str> = shape
            .attrs
            .iter()
            .filter(|a| !(a.starts_with("__") && a.ends_with("__")))
            .take(MAX_LISTED)
            .map(String::as_str)
            .collect();
        out.push((
            node.start_byte(),
            Problem {
                kind: ProblemKind::TypedAttribute,
                name: format!(
                "line {}: `{value}.{attr}`: `{value}` is a `{}` ({why}), which has no attribute \
                 `{attr}`; it has: {}",
                node.start_position().row + 1,
                shape.name,
                listed.join(", ")
            ),
                suggestions: close_names(attr, shape.attrs.iter().map(String::as_str).collect()),
            },
        ));
    };

    // What the function binds, and which attribute nodes it stores to.
    let mut walked = Binder::new(src, self_name.map(str::to_string), false);
    walked.walk(body);
    let stores = &walked.stores;

    // `self.x.y`
    if let (Some(me), Some(class)) = (self_name, class) {
        let reads = attr_reads(src, body, stores, |o| self_attr(src, o, me));
        // The class family's sources are read only when there is something to look up.
        let fields = if reads.is_empty() {
            HashMap::new()
        } else {
            self_attr_types(view, class)
        };
        for (read, x, attr) in reads {
            if scopes.self_assigned.contains(&x) {
                continue;
            }
            if let Some(Some(ty)) = fields.get(&x) {
                if let Some(shape) = types.shape(ty) {
                    report(
                        read,
                        &format!("{me}.{x}"),
                        &attr,
                        &shape,
                        "as the class assigns it",
                    );
                }
            }
        }
    }

    // Annotated parameters that the function never rebinds.
    if let Some(params) = def.child_by_field_name("parameters") {
        for p in named_children(params) {
            if !matches!(p.kind(), "typed_parameter" | "typed_default_parameter") {
                continue;
            }
            let Some((name, ty)) = typed_param(src, p) else {
                continue;
            };
            if Some(name.as_str()) == self_name || walked.bound.contains(&name) {
                continue;
            }
            let Some(shape) = types.shape(&ty) else {
                continue;
            };
            for (read, v, attr) in attr_reads(src, body, stores, |o| plain(src, o, &name)) {
                report(read, &v, &attr, &shape, "its annotation");
            }
        }
    }

    // `isinstance` blocks.
    let mut stack = vec![body];
    while let Some(node) = stack.pop() {
        for stmt in named_children(node) {
            if matches!(stmt.kind(), "function_definition" | "class_definition") {
                continue;
            }
            if let Some((name, ty, block)) = isinstance_block(src, stmt) {
                if let Some(shape) = types.shape(&ty) {
                    for s in named_children(block) {
                        let mut b = Binder::new(src, None, false);
                        b.walk(s);
                        let rebinds = b.bound.contains(&name);
                        // An assignment reads its right side before it binds.
                        if rebinds && s.kind() != "expression_statement" {
                            break;
                        }
                        for (read, v, attr) in attr_reads(src, s, stores, |o| plain(src, o, &name))
                        {
                            report(read, &v, &attr, &shape, "`isinstance` says so here");
                        }
                        if rebinds {
                            break;
                        }
                    }
                }
            }
            stack.push(stmt);
        }
    }
    // In the order the function reads them.
    out.sort_by_key(|(at, _)| *at);
    out.into_iter().map(|(_, p)| p).collect()
}

/// The name and annotated type of a `typed_parameter` / `typed_default_parameter` whose
/// annotation is one plain name.
fn typed_param(src: &str, p: Node) -> Option<(String, String)> {
    let name = match p.kind() {
        "typed_parameter" => p.named_child(0).filter(|n| n.kind() == "identifier")?,
        "typed_default_parameter" => p.child_by_field_name("name")?,
        _ => return None,
    };
    let ty = type_name(src, p.child_by_field_name("type")?)?;
    Some((text(src, name).to_string(), ty))
}

/// `object` when it is the name `name`.
fn plain(src: &str, object: Node, name: &str) -> Option<String> {
    (object.kind() == "identifier" && text(src, object) == name).then(|| name.to_string())
}

/// `x` when `object` is `me.x`.
fn self_attr(src: &str, object: Node, me: &str) -> Option<String> {
    if object.kind() != "attribute" {
        return None;
    }
    let o = object.child_by_field_name("object")?;
    let attr = object.child_by_field_name("attribute")?;
    (o.kind() == "identifier" && text(src, o) == me).then(|| text(src, attr).to_string())
}

/// Attribute reads `o.attr` under `node` whose object `which` accepts (giving its key), not in
/// store position; nested functions, lambdas, classes and comprehensions are not entered
/// (scopes of their own, which may bind the same name to something else).
fn attr_reads<'t>(
    src: &str,
    node: Node<'t>,
    stores: &HashSet<usize>,
    which: impl Fn(Node) -> Option<String>,
) -> Vec<(Node<'t>, String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if n.id() != node.id()
            && matches!(
                n.kind(),
                "function_definition"
                    | "lambda"
                    | "class_definition"
                    | "list_comprehension"
                    | "set_comprehension"
                    | "dictionary_comprehension"
                    | "generator_expression"
            )
        {
            continue;
        }
        if n.kind() == "attribute" && !stores.contains(&n.id()) {
            let object = n.child_by_field_name("object");
            let attr = n.child_by_field_name("attribute");
            if let (Some(o), Some(a)) = (object, attr) {
                if let Some(key) = which(o) {
                    out.push((n, key, text(src, a).to_string()));
                }
            }
        }
        stack.extend(named_children(n).into_iter().rev());
    }
    out.sort_by_key(|(n, _, _)| n.start_byte());
    out
}

/// `(name, type, block)` for `if` / `elif` / `while isinstance(name, Type):`.
fn isinstance_block<'t>(src: &str, stmt: Node<'t>) -> Option<(String, String, Node<'t>)> {
    if !matches!(
        stmt.kind(),
        "if_statement" | "while_statement" | "elif_clause"
    ) {
        return None;
    }
    let cond = stmt.child_by_field_name("condition")?;
    let block = stmt
        .child_by_field_name("consequence")
        .or_else(|| stmt.child_by_field_name("body"))?;
    if cond.kind() != "call" {
        return None;
    }
    let f = cond.child_by_field_name("function")?;
    if f.kind() != "identifier" || text(src, f) != "isinstance" {
        return None;
    }
    let args = named_children(cond.child_by_field_name("arguments")?);
    match args.as_slice() {
        [v, t] if v.kind() == "identifier" && t.kind() == "identifier" => {
            Some((text(src, *v).to_string(), text(src, *t).to_string(), block))
        }
        _ => None,
    }
}

/// The type an annotation names, when it is one plain name (`C` or `'C'`).
fn type_name(src: &str, ann: Node) -> Option<String> {
    let t = text(src, ann)
        .trim()
        .trim_matches(|c| c == '\'' || c == '"');
    super::is_identifier(t).then(|| t.to_string())
}

/// The repository types of `self.x` in `class`: `Some(type)` when every assignment in the
/// class, its in-repo bases and subclasses agrees on one, `None` when one is unknown or two
/// disagree.
fn self_attr_types(view: &MaskedView, class: ClassId) -> HashMap<String, Option<String>> {
    let mut out: HashMap<String, Option<String>> = HashMap::new();
    let mut todo = vec![(class, 0)];
    todo.extend(
        subclasses(view, class)
            .into_iter()
            .map(|sub| (sub, MAX_DEPTH)),
    );
    let mut seen = HashSet::new();
    while let Some((c, depth)) = todo.pop() {
        if depth > MAX_DEPTH || !seen.insert(c) {
            continue;
        }
        let repo = view.repository();
        let k = view.class(c).unwrap_or_else(|| repo.class(c));
        with_class_def(view, &k.path, &k.qualname, |src, def| {
            class_attr_types(src, def, &mut out);
            Some(())
        });
        todo.extend(in_repo_bases(view, c).into_iter().map(|b| (b, depth + 1)));
    }
    out
}

/// Adds what `def` (a class definition) says about its attributes' types to `out`.
fn class_attr_types(src: &str, def: Node, out: &mut HashMap<String, Option<String>>) {
    let (Some(body), Some(class_name)) = (
        def.child_by_field_name("body"),
        def.child_by_field_name("name").map(|n| text(src, n)),
    ) else {
        return;
    };
    for stmt in named_children(body) {
        if stmt.kind() == "expression_statement" {
            for a in named_children(stmt)
                .into_iter()
                .filter(|a| a.kind() == "assignment")
            {
                let Some(left) = a.child_by_field_name("left") else {
                    continue;
                };
                if left.kind() == "identifier" {
                    let ty = match a.child_by_field_name("right") {
                        None => a
                            .child_by_field_name("type")
                            .and_then(|t| type_name(src, t)),
                        Some(_) => None,
                    };
                    note_type(out, text(src, left), ty);
                }
            }
        }
        let Some(method) = function_of(stmt) else {
            continue;
        };
        let (Some(params), Some(mbody)) = (
            method.child_by_field_name("parameters"),
            method.child_by_field_name("body"),
        ) else {
            continue;
        };
        let Some(me) = param_names(src, params).into_iter().next() else {
            continue;
        };
        let annotated: HashMap<String, String> = named_children(params)
            .into_iter()
            .filter_map(|p| typed_param(src, p))
            .collect();
        // A plain `me.x = ...` says what it stores; any other store (a tuple target, `+=`,
        // `for`, `with`) makes the type unknown.
        let mut b = Binder::new(src, Some(me.clone()), false);
        b.walk(mbody);
        let mut plain_stores = HashSet::new();
        let mut stack = vec![mbody];
        while let Some(n) = stack.pop() {
            if n.kind() == "assignment" {
                let left = n.child_by_field_name("left");
                let attr = left.and_then(|l| self_attr(src, l, &me).map(|a| (l, a)));
                if let (Some((l, attr)), Some(right)) = (attr, n.child_by_field_name("right")) {
                    let ty = match right.kind() {
                        "identifier" => annotated.get(text(src, right)).cloned(),
                        "call" => right.child_by_field_name("function").and_then(|f| {
                            match (f.kind(), text(src, f)) {
                                ("identifier", name) => Some(name.to_string()),
                                // `self.__class__(...)`, `type(self)(...)`: the class itself
                                // (a subclass's instance has the subclass's attributes, which
                                // its shape includes).
                                (_, t)
                                    if t == format!("{me}.__class__")
                                        || t == format!("type({me})") =>
                                {
                                    Some(class_name.to_string())
                                }
                                _ => None,
                            }
                        }),
                        _ => None,
                    };
                    plain_stores.insert(l.id());
                    note_type(out, &attr, ty);
                }
            }
            stack.extend(named_children(n));
        }
        let mut stack = vec![mbody];
        while let Some(n) = stack.pop() {
            if b.stores.contains(&n.id()) && !plain_stores.contains(&n.id()) {
                if let Some(attr) = self_attr(src, n, &me) {
                    note_type(out, &attr, None);
                }
            }
            stack.extend(named_children(n));
        }
    }
}

/// Records one assignment's type for `attr`: two different ones (or one unknown) make it unknown.
fn note_type(out: &mut HashMap<String, Option<String>>, attr: &str, ty: Option<String>) {
    let e = out.entry(attr.to_string()).or_insert_with(|| ty.clone());
    if *e != ty {
        *e = None;
    }
}

/// The in-repo classes `class` names as bases.
fn in_repo_bases(view: &MaskedView, class: ClassId) -> Vec<ClassId> {
    class_bases(view, class)
        .into_iter()
        .flat_map(|(_, classes)| classes)
        .collect()
}

/// Type names as written in one file, resolved to shapes.
/// Each name is resolved once per check (a class's shape walks every class of the repository).
struct Types<'a> {
    view: &'a MaskedView<'a>,
    file: FileId,
    /// The generated method's class and name.
    method: Option<(ClassId, &'a str)>,
    known: RefCell<HashMap<String, Option<Shape>>>,
}

impl Types<'_> {
    fn shape(&self, name: &str) -> Option<Shape> {
        if let Some(known) = self.known.borrow().get(name) {
            return known.clone();
        }
        let resolver = self.view.resolver();
        let shape = match resolver.resolve_in_file(self.file, name) {
            Ok(defs) => match defs.as_slice() {
                [Def::Class(id)] => class_shape(self.view, *id, self.method),
                _ => None,
            },
            Err(_) => namedtuple_shape(self.view, self.file, name, 0),
        };
        self.known
            .borrow_mut()
            .insert(name.to_string(), shape.clone());
        shape
    }
}

/// Every attribute an instance of `class` or of an in-repo subclass can have; `None` when
/// that is not knowable. The generated `method` counts when its class is one of them.
fn class_shape(
    view: &MaskedView,
    class: ClassId,
    method: Option<(ClassId, &str)>,
) -> Option<Shape> {
    let info = class_info(view, class);
    let mut attrs = info.attrs?;
    let family = subclasses(view, class);
    for &sub in &family {
        for a in class_info(view, sub).attrs? {
            if !attrs.contains(&a) {
                attrs.push(a);
            }
        }
    }
    if let Some((owner, name)) = method {
        if (owner == class || family.contains(&owner)) && !attrs.iter().any(|a| a == name) {
            attrs.push(name.to_string());
        }
    }
    Some(Shape {
        name: info.name,
        attrs,
    })
}

/// The repository's classes that derive from `class` through in-repo bases.
pub(super) fn subclasses(view: &MaskedView, class: ClassId) -> Vec<ClassId> {
    view.classes()
        .map(|(id, _)| id)
        .filter(|&id| id != class && derives_from(view, id, class, 0))
        .collect()
}

fn derives_from(view: &MaskedView, class: ClassId, base: ClassId, depth: usize) -> bool {
    depth <= MAX_DEPTH
        && in_repo_bases(view, class)
            .into_iter()
            .any(|b| b == base || derives_from(view, b, base, depth + 1))
}

/// `Name = namedtuple('Name', fields)` at the top level of `file`, or of the repository module
/// `file` imports `name` from.
fn namedtuple_shape(view: &MaskedView, file: FileId, name: &str, depth: usize) -> Option<Shape> {
    if depth > MAX_DEPTH {
        return None;
    }
    let path = view.file_path(file);
    let src = view.file_text(path)?;
    let tree = parse_python(src)?;
    for stmt in named_children(tree.root_node()) {
        if stmt.kind() != "expression_statement" {
            continue;
        }
        for a in named_children(stmt)
            .into_iter()
            .filter(|a| a.kind() == "assignment")
        {
            let left = a.child_by_field_name("left");
            if left.map(|l| text(src, l)) != Some(name) {
                continue;
            }
            return namedtuple_fields(src, a.child_by_field_name("right")?).map(|fields| {
                let mut attrs = fields;
                attrs.extend(TUPLE_ATTRS.iter().map(|a| a.to_string()));
                Shape {
                    name: name.to_string(),
                    attrs,
                }
            });
        }
    }
    // Imported from a module of the repository.
    let symbols = view.file_symbols(path)?;
    let resolver = view.resolver();
    for imp in view.imports_of(path) {
        if imp.scope.is_some() || imp.alias.as_deref().or(imp.name.as_deref()) != Some(name) {
            continue;
        }
        let Some(original) = imp.name.as_deref() else {
            continue;
        };
        let module = symbols.import_module(imp)?;
        let whole = crate::repo::Import {
            module,
            name: None,
            level: 0,
            alias: None,
            ..imp.clone()
        };
        if let Ok(crate::repo::ImportTarget::Module { files }) =
            resolver.resolve_import(file, &whole)
        {
            if let [f] = files.as_slice() {
                return namedtuple_shape(view, *f, original, depth + 1);
            }
        }
        return None;
    }
    None
}

/// The fields of a `namedtuple(...)` call given as literal strings.
fn namedtuple_fields(src: &str, call: Node) -> Option<Vec<String>> {
    if call.kind() != "call" {
        return None;
    }
    let f = text(src, call.child_by_field_name("function")?);
    if f != "namedtuple" && f != "collections.namedtuple" {
        return None;
    }
    let args = named_children(call.child_by_field_name("arguments")?);
    let (keywords, positional): (Vec<Node>, Vec<Node>) = args
        .into_iter()
        .partition(|a| a.kind() == "keyword_argument");
    // `rename=True` replaces invalid field names.
    if positional.len() != 2 || keywords.iter().any(|k| text(src, *k).starts_with("rename")) {
        return None;
    }
    let mut out = Vec::new();
    for lit in literal_strings(src, positional[1])? {
        out.extend(
            lit.split([',', ' ', '\t', '\n'])
                .filter(|p| !p.is_empty())
                .map(str::to_string),
        );
    }
    out.iter().all(|f| super::is_identifier(f)).then_some(out)
}
