//! Stores CPython refuses: instances of a class whose `__slots__` (with those of every base)
//! leave out `__dict__` hold only the slots, so `self.x = …` raises an AttributeError unless
//! some slot is `x`. Checked only when the whole family is known: the class, its bases and its
//! subclasses are all in the repository (or `object`), each declares `__slots__` as literal
//! strings, and no class body binds `x` itself (a property with a setter may take the store).

use super::typed::subclasses;
use super::{
    class_bases, close_names, is_identifier, literal_strings, named_children, text, with_class_def,
    Binder, Problem, ProblemKind, ScopeUses,
};
use crate::repo::{ClassId, MaskedView};
use tree_sitter::Node;

/// The stores to `self` attributes that no slot of `class`'s family can take.
pub(super) fn slot_stores(
    view: &MaskedView,
    class: Option<ClassId>,
    self_name: Option<&str>,
    scopes: &ScopeUses,
) -> Vec<Problem> {
    let (Some(class), Some(_)) = (class, self_name) else {
        return Vec::new();
    };
    if scopes.self_assigned.is_empty() || scopes.dynamic_attrs {
        return Vec::new();
    }
    let Some(allowed) = family_slots(view, class) else {
        return Vec::new();
    };
    let mut stored: Vec<&String> = scopes
        .self_assigned
        .iter()
        .filter(|a| {
            let dunder = a.starts_with("__") && a.ends_with("__");
            !dunder && !allowed.names.contains(a)
        })
        .collect();
    stored.sort();
    stored
        .into_iter()
        .map(|attr| Problem {
            kind: ProblemKind::SlotStore,
            name: attr.clone(),
            suggestions: close_names(attr, allowed.slots.iter().map(String::as_str).collect()),
        })
        .collect()
}

/// What instances of a slotted family can store: the slots, and (for suggestions apart) every
/// name bound in a class body.
struct Allowed {
    slots: Vec<String>,
    names: Vec<String>,
}

/// The slots and class-body names of `class`, its bases and its subclasses; `None` when one of
/// them has no literal `__slots__`, lists `__dict__`, or has a base outside the repository.
fn family_slots(view: &MaskedView, class: ClassId) -> Option<Allowed> {
    let mut allowed = Allowed {
        slots: Vec::new(),
        names: Vec::new(),
    };
    let mut family = vec![class];
    family.extend(subclasses(view, class));
    let mut seen = Vec::new();
    while let Some(c) = family.pop() {
        if seen.contains(&c) {
            continue;
        }
        if seen.len() > 64 {
            return None;
        }
        seen.push(c);
        add_class(view, c, &mut allowed)?;
        for (base, classes) in class_bases(view, c) {
            match classes.as_slice() {
                [] if base == "object" => {}
                [b] => family.push(*b),
                _ => return None,
            }
        }
    }
    allowed.names.extend(allowed.slots.iter().cloned());
    Some(allowed)
}

/// Adds one class's slots and body names; `None` when its slots are not known or include
/// `__dict__`.
fn add_class(view: &MaskedView, class: ClassId, allowed: &mut Allowed) -> Option<()> {
    let repo = view.repository();
    let c = view.class(class).unwrap_or_else(|| repo.class(class));
    let (slots, names) = with_class_def(view, &c.path, &c.qualname, |src, def| {
        let body = def.child_by_field_name("body")?;
        let mut binder = Binder::new(src, None, true);
        binder.walk(body);
        Some((declared_slots(src, body)?, binder.bound))
    })?;
    if slots.iter().any(|s| s == "__dict__") {
        return None;
    }
    allowed.slots.extend(slots);
    allowed
        .names
        .extend(names.into_iter().filter(|n| n != "__slots__"));
    Some(())
}

/// The names a class body's `__slots__ = …` lists, when it is one assignment of a string or a
/// list or tuple of strings.
fn declared_slots(src: &str, body: Node) -> Option<Vec<String>> {
    let mut found = None;
    for stmt in named_children(body) {
        for a in named_children(stmt)
            .into_iter()
            .filter(|n| stmt.kind() == "expression_statement" && n.kind() == "assignment")
        {
            if a.child_by_field_name("left").map(|l| text(src, l)) != Some("__slots__") {
                continue;
            }
            if found.is_some() {
                return None;
            }
            found = Some(slot_names(src, a.child_by_field_name("right")?)?);
        }
    }
    found
}

fn slot_names(src: &str, value: Node) -> Option<Vec<String>> {
    let names = literal_strings(src, value)?;
    names
        .into_iter()
        .map(|n| is_identifier(n).then(|| n.to_string()))
        .collect()
}
