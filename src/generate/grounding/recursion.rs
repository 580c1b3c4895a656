//! Self-recursion: a call of the target itself that the call it makes reaches again, with
//! nothing changed that could take it elsewhere, so that it recurses forever.
//!
//! Two shapes. A top-level statement of the body calls the target (by its name; a method
//! through its instance parameter, `cls` or its class) or, for a property, reads it through the
//! instance, before any statement that may return or raise: every call gets there, whatever
//! the arguments. Or the call is reached only past tests that no call can change — `p is None`,
//! `p is not None`, `isinstance(p, T)`, `callable(p)`, joined by `and`/`or`/`not` — of
//! parameters it passes on unchanged, or inside a `try` (whose handlers might stop the
//! recursion: only a call passing every parameter on counts there): then the inner call takes
//! the same way (`if doc_id is not None: return self.get(doc_id=doc_id)`; a guard `if a is
//! None and b is None: raise …` before `return self.remove(a, b)`). A test of anything else
//! (a truth value, a length, an attribute, a global) may change between the calls, so calls
//! past it don't count; neither do calls under a conditional expression, `and`/`or`, a
//! comprehension or a lambda. Generators and coroutines are left alone: calling one runs none
//! of its body.

use super::{
    contains_kind, decorators_of, is_docstring, named_children, text, Binder, Problem, ProblemKind,
};
use crate::generate::Target;
use std::collections::HashSet;
use tree_sitter::Node;

pub(super) fn self_recursion(
    src: &str,
    def: Node,
    target: &Target,
    params: &[String],
    self_name: Option<&str>,
    class_name: Option<&str>,
) -> Option<Problem> {
    let body = def.child_by_field_name("body")?;
    let is_async = text(src, def).trim_start().starts_with("async");
    if is_async || contains_kind(body, &["yield"]) {
        return None;
    }
    let property = decorators_of(def)
        .iter()
        .any(|d| text(src, *d).trim_start_matches('@').trim() == "property")
        || target.signature.lines().any(|l| l.trim() == "@property");
    // Who `x.name(...)` must be called on to be this function.
    let mut receivers: Vec<&str> = Vec::new();
    let mut bound_receivers: Vec<&str> = Vec::new();
    if let Some(class) = class_name {
        receivers.push(class);
        receivers.extend(self_name);
        bound_receivers.extend(self_name);
        if params.first().is_some_and(|p| p == "cls") {
            receivers.push("cls");
            bound_receivers.push("cls");
        }
    }
    // Parameters the body assigns are not passed on unchanged, wherever the assignment is.
    let mut binder = Binder::new(src, None, false);
    binder.walk(body);
    let own = Own {
        src,
        name: &target.name,
        plain: class_name.is_none(),
        receivers: &receivers,
        bound_receivers: &bound_receivers,
        property_of: self_name.filter(|_| property),
        params,
        assigned: &binder.bound,
    };
    matches!(own.block(body, &Way::default()), Flow::Found).then(|| Problem {
        kind: ProblemKind::SelfRecursion,
        name: target.name.clone(),
        suggestions: Vec::new(),
    })
}

/// What a call of the function being checked looks like.
struct Own<'a> {
    src: &'a str,
    name: &'a str,
    /// A plain function: called by its bare name.
    plain: bool,
    /// A method: called as `r.name(...)` for one of these.
    receivers: &'a [&'a str],
    /// The receivers that take the first parameter's place (`self.name(a)` passes `a` as the
    /// second).
    bound_receivers: &'a [&'a str],
    /// A property: read as `me.name`.
    property_of: Option<&'a str>,
    /// The function's parameters (`*args` and `**kw` with their stars).
    params: &'a [String],
    /// Names the body binds.
    assigned: &'a HashSet<String>,
}

/// What is known on the way to a statement.
#[derive(Clone, Default)]
struct Way<'s> {
    /// Parameters read by the tests passed on the way (each a test no call can change).
    tested: Vec<&'s str>,
    /// Some test was passed.
    conditional: bool,
    /// Inside a `try`.
    guarded: bool,
}

/// How a block ends for the walk.
enum Flow {
    /// A call of the function that gets there again.
    Found,
    /// It falls through to the statement after it.
    Falls,
    /// It returns or raises on every way, or the walk cannot follow it further.
    Stops,
}

impl<'s> Own<'s> {
    fn block(&self, block: Node<'s>, way: &Way<'s>) -> Flow {
        let mut way = way.clone();
        for (i, stmt) in named_children(block).into_iter().enumerate() {
            if stmt.kind() == "comment" || (i == 0 && is_docstring(stmt)) {
                continue;
            }
            match stmt.kind() {
                "expression_statement"
                | "return_statement"
                | "assignment"
                | "augmented_assignment"
                | "raise_statement"
                | "assert_statement"
                | "delete_statement"
                | "pass_statement" => {
                    let mut reached = Vec::new();
                    self.reached(stmt, &mut reached);
                    if reached.into_iter().any(|n| self.again(n, &way)) {
                        return Flow::Found;
                    }
                    if matches!(stmt.kind(), "return_statement" | "raise_statement") {
                        return Flow::Stops;
                    }
                }
                "if_statement" => match self.if_statement(stmt, &mut way) {
                    Flow::Falls => {}
                    flow => return flow,
                },
                "try_statement" => {
                    let guarded = Way {
                        guarded: true,
                        ..way.clone()
                    };
                    let body = stmt.child_by_field_name("body");
                    if let Some(Flow::Found) = body.map(|b| self.block(b, &guarded)) {
                        return Flow::Found;
                    }
                    if exits(stmt) {
                        return Flow::Stops;
                    }
                }
                _ if exits(stmt) => return Flow::Stops,
                _ => {}
            }
        }
        Flow::Falls
    }

    /// Walks the branches of `stmt` whose tests no call can change; after a guard (one branch
    /// that ends by returning or raising), the way on is past its test's negation.
    fn if_statement(&self, stmt: Node<'s>, way: &mut Way<'s>) -> Flow {
        let alternatives: Vec<Node> = {
            let mut cursor = stmt.walk();
            stmt.children_by_field_name("alternative", &mut cursor)
                .collect()
        };
        // The parameters the tests so far read, `None` once one is not a fixed test.
        let mut earlier: Option<Vec<&str>> = Some(Vec::new());
        let branches = std::iter::once((stmt.child_by_field_name("condition"), stmt)).chain(
            alternatives.iter().map(|a| {
                let test = (a.kind() == "elif_clause")
                    .then(|| a.child_by_field_name("condition"))
                    .flatten();
                (test, *a)
            }),
        );
        for (test, clause) in branches {
            let reads = match test {
                Some(t) => earlier.as_ref().zip(self.fixed_test(t)).map(|(e, r)| {
                    let mut all = e.clone();
                    all.extend(r);
                    all
                }),
                None => earlier.clone(),
            };
            let body = if clause.kind() == "else_clause" {
                clause.child_by_field_name("body")
            } else {
                clause.child_by_field_name("consequence")
            };
            if let (Some(reads), Some(body)) = (&reads, body) {
                let mut inner = way.clone();
                inner.tested.extend(reads.iter().copied());
                inner.conditional = true;
                if let Flow::Found = self.block(body, &inner) {
                    return Flow::Found;
                }
            }
            earlier = reads;
        }
        let consequence = stmt.child_by_field_name("consequence");
        let guard = alternatives.is_empty() && consequence.is_some_and(ends_by_leaving);
        if guard {
            return match stmt
                .child_by_field_name("condition")
                .and_then(|t| self.fixed_test(t))
            {
                Some(reads) => {
                    way.tested.extend(reads);
                    way.conditional = true;
                    Flow::Falls
                }
                None => Flow::Stops,
            };
        }
        if exits(stmt) {
            Flow::Stops
        } else {
            Flow::Falls
        }
    }

    /// The parameters `test` reads when it is one no call can change (its value depends only
    /// on which objects the parameters are, not on their contents); `None` otherwise.
    fn fixed_test(&self, test: Node<'s>) -> Option<Vec<&'s str>> {
        match test.kind() {
            "parenthesized_expression" | "not_operator" => {
                let inner = named_children(test);
                if inner.len() != 1 {
                    return None;
                }
                self.fixed_test(inner[0])
            }
            "boolean_operator" => {
                let mut reads = self.fixed_test(test.child_by_field_name("left")?)?;
                reads.extend(self.fixed_test(test.child_by_field_name("right")?)?);
                Some(reads)
            }
            "comparison_operator" => {
                let mut cursor = test.walk();
                let operators_fixed = test
                    .children(&mut cursor)
                    .filter(|c| !c.is_named())
                    .all(|c| matches!(c.kind(), "is" | "is not" | "not"));
                if !operators_fixed {
                    return None;
                }
                let mut reads = Vec::new();
                for operand in named_children(test) {
                    match operand.kind() {
                        "none" | "true" | "false" => {}
                        "identifier" => reads.push(self.param(operand)?),
                        _ => return None,
                    }
                }
                Some(reads)
            }
            "call" => {
                let f = test.child_by_field_name("function")?;
                let name = text(self.src, f);
                let args = named_children(test.child_by_field_name("arguments")?);
                let fixed = match (name, args.as_slice()) {
                    ("callable", [a]) => a.kind() == "identifier",
                    ("isinstance" | "issubclass", [a, types]) => {
                        a.kind() == "identifier" && is_type_expression(*types)
                    }
                    _ => false,
                };
                if !fixed || self.assigned.contains(name) {
                    return None;
                }
                Some(vec![self.param(args[0])?])
            }
            _ => None,
        }
    }

    /// The parameter `name` is, when it is one the body never assigns.
    fn param(&self, name: Node<'s>) -> Option<&'s str> {
        let name = text(self.src, name);
        (self.params.iter().any(|p| p == name) && !self.assigned.contains(name)).then_some(name)
    }

    /// Whether `reached` (a call of the function, or a property's read) gets to itself again
    /// on `way`: anywhere when no test or `try` was passed, else when it passes on every
    /// parameter the tests read (every parameter inside a `try`) unchanged.
    fn again(&self, reached: Node, way: &Way) -> bool {
        if !way.conditional && !way.guarded {
            return true;
        }
        if reached.kind() != "call" {
            return false;
        }
        let needed: Vec<&str> = if way.guarded {
            let offset = usize::from(self.bound(reached));
            self.params
                .iter()
                .skip(offset)
                .map(|p| p.trim_start_matches('*'))
                .collect()
        } else {
            way.tested.clone()
        };
        let passed = self.passed_on(reached);
        needed
            .iter()
            .all(|p| passed.contains(p) && !self.assigned.contains(*p))
    }

    /// Whether `call` is made on a receiver that takes the first parameter's place.
    fn bound(&self, call: Node) -> bool {
        call.child_by_field_name("function")
            .filter(|f| f.kind() == "attribute")
            .and_then(|f| f.child_by_field_name("object"))
            .is_some_and(|o| self.bound_receivers.contains(&text(self.src, o)))
    }

    /// The parameters `call` passes on in their own places: `p` at `p`'s position, `p=p`,
    /// `*args`, `**kw`.
    fn passed_on(&self, call: Node) -> Vec<&str> {
        let Some(args) = call.child_by_field_name("arguments") else {
            return Vec::new();
        };
        let offset = usize::from(self.bound(call));
        let mut out = Vec::new();
        let mut position = Some(offset);
        for arg in named_children(args) {
            let value = text(self.src, arg);
            match arg.kind() {
                "identifier" => {
                    let slot = position.and_then(|i| self.params.get(i));
                    out.extend(slot.filter(|p| *p == value).map(String::as_str));
                    position = position.map(|i| i + 1);
                }
                "keyword_argument" => {
                    let name = arg.child_by_field_name("name").map(|n| text(self.src, n));
                    let val = arg.child_by_field_name("value");
                    if let (Some(name), Some(val)) = (name, val) {
                        let own = self.params.iter().find(|p| *p == name);
                        if val.kind() == "identifier" && text(self.src, val) == name {
                            out.extend(own.map(String::as_str));
                        }
                    }
                }
                "list_splat" | "dictionary_splat" => {
                    if let Some(p) = self.params.iter().find(|p| *p == value) {
                        out.push(p.trim_start_matches('*'));
                    }
                    // Positions after `*x` are unknown.
                    position = None;
                }
                _ => position = position.map(|i| i + 1),
            }
        }
        out
    }

    /// Collects the calls of the function (and a property's reads) that evaluating `node`
    /// always makes: outside the parts that may not run.
    fn reached(&self, node: Node<'s>, out: &mut Vec<Node<'s>>) {
        match node.kind() {
            "lambda"
            | "conditional_expression"
            | "list_comprehension"
            | "set_comprehension"
            | "dictionary_comprehension"
            | "generator_expression"
            | "function_definition"
            | "class_definition" => return,
            // Only the left operand always runs.
            "boolean_operator" => {
                if let Some(l) = node.child_by_field_name("left") {
                    self.reached(l, out);
                }
                return;
            }
            "call" => {
                if let Some(f) = node.child_by_field_name("function") {
                    if self.is_own(f) {
                        out.push(node);
                    }
                }
            }
            "attribute" => {
                let object = node.child_by_field_name("object");
                let attr = node.child_by_field_name("attribute");
                if let (Some(me), Some(o), Some(a)) = (self.property_of, object, attr) {
                    if o.kind() == "identifier"
                        && text(self.src, o) == me
                        && text(self.src, a) == self.name
                    {
                        out.push(node);
                    }
                }
            }
            _ => {}
        }
        for c in named_children(node) {
            self.reached(c, out);
        }
    }

    /// Whether `callee` names the function being checked.
    fn is_own(&self, callee: Node) -> bool {
        match callee.kind() {
            "identifier" => self.plain && text(self.src, callee) == self.name,
            "attribute" => {
                let object = callee.child_by_field_name("object");
                let attr = callee.child_by_field_name("attribute");
                match (object, attr) {
                    (Some(o), Some(a)) => {
                        o.kind() == "identifier"
                            && self.receivers.contains(&text(self.src, o))
                            && text(self.src, a) == self.name
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

/// Whether `stmt` holds a `return` or `raise` (outside nested functions and classes).
fn exits(stmt: Node) -> bool {
    matches!(stmt.kind(), "return_statement" | "raise_statement")
        || contains_kind(stmt, &["return_statement", "raise_statement"])
}

/// Whether the last statement of `block` returns or raises.
fn ends_by_leaving(block: Node) -> bool {
    named_children(block)
        .into_iter()
        .rfind(|s| s.kind() != "comment")
        .is_some_and(|s| matches!(s.kind(), "return_statement" | "raise_statement"))
}

/// A type, or a tuple of types, as `isinstance` takes it: names and dotted names.
fn is_type_expression(node: Node) -> bool {
    match node.kind() {
        "identifier" | "attribute" => true,
        "tuple" | "parenthesized_expression" => {
            named_children(node).into_iter().all(is_type_expression)
        }
        _ => false,
    }
}
