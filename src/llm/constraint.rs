//! Constrained decoding: a small automaton over output bytes, advanced token by token.
//!
//! The engine applies it lazily: it takes the model's preferred token and keeps it if the
//! automaton accepts the token's bytes; only otherwise does it scan the vocabulary for the best
//! accepted token. Every accepted path can still reach a final state, so the answer always
//! completes (and at the token limit is closed with [`Matcher::shortest_completion`]).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use super::LlmError;

/// The shape an answer must take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constraint {
    /// Exactly one of these strings, verbatim. Duplicates are dropped; with a single choice the
    /// engine answers it without running the model.
    OneOf(Vec<String>),
    /// A JSON array (`["a", "b"]`, optional space after commas) of 1..=`max_items` distinct
    /// members of `items`, each JSON-escaped.
    Subset {
        items: Vec<String>,
        max_items: usize,
    },
    /// A JSON array of 0..=`max_items` strings matching `pattern` (e.g. callee names).
    IdentArray {
        pattern: IdentPattern,
        max_items: usize,
    },
}

/// An identifier pattern of the form `[first-class][rest-class]*` over ASCII, with a length
/// bound, e.g. `[A-Za-z_][A-Za-z0-9_.]*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentPattern {
    first: Vec<bool>,
    rest: Vec<bool>,
    max_len: usize,
}

impl Default for IdentPattern {
    /// `[A-Za-z_][A-Za-z0-9_.]*`, at most 64 characters.
    fn default() -> Self {
        Self::parse("[A-Za-z_][A-Za-z0-9_.]*", 64).expect("built-in pattern parses")
    }
}

fn parse_class(body: &str, pattern: &str) -> Result<Vec<bool>, LlmError> {
    let bad =
        |why: &str| LlmError::InvalidRequest(format!("identifier pattern {pattern:?}: {why}"));
    let chars: Vec<char> = body.chars().collect();
    let mut set = vec![false; 256];
    let mut i = 0;
    while i < chars.len() {
        let lo = chars[i];
        let hi = if i + 2 < chars.len() && chars[i + 1] == '-' {
            i += 2;
            chars[i]
        } else {
            lo
        };
        if !lo.is_ascii_graphic() || !hi.is_ascii_graphic() || lo > hi {
            return Err(bad(
                "classes may hold printable ASCII characters and ranges only",
            ));
        }
        for c in lo..=hi {
            if c == '"' || c == '\\' {
                return Err(bad("quotes and backslashes are not allowed in identifiers"));
            }
            set[c as usize] = true;
        }
        i += 1;
    }
    Ok(set)
}

impl IdentPattern {
    /// Parses `[first][rest]*`; `max_len` bounds the identifier length.
    pub fn parse(pattern: &str, max_len: usize) -> Result<Self, LlmError> {
        let bad = || {
            LlmError::InvalidRequest(format!(
                "identifier pattern {pattern:?} must look like [A-Za-z_][A-Za-z0-9_.]*"
            ))
        };
        let rest_of = pattern.strip_prefix('[').ok_or_else(bad)?;
        let (first, tail) = rest_of.split_once(']').ok_or_else(bad)?;
        let tail = tail.strip_prefix('[').ok_or_else(bad)?;
        let rest = tail.strip_suffix("]*").ok_or_else(bad)?;
        if max_len == 0 {
            return Err(LlmError::InvalidRequest(
                "identifier max length must be ≥ 1".into(),
            ));
        }
        Ok(Self {
            first: parse_class(first, pattern)?,
            rest: parse_class(rest, pattern)?,
            max_len,
        })
    }

    /// The pattern as an anchored regular expression (JSON Schema / Python / Rust syntax), for
    /// servers that take the constraint as a schema.
    pub fn regex(&self) -> String {
        format!(
            "^{}{}{{0,{}}}$",
            class_regex(&self.first),
            class_regex(&self.rest),
            self.max_len - 1
        )
    }

    /// Bytes an identifier may have.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
}

/// `[...]` holding the set's characters as ranges, the ones special inside a class escaped.
fn class_regex(set: &[bool]) -> String {
    let escaped = |c: u8| match c {
        b']' | b'[' | b'\\' | b'^' | b'-' => format!("\\{}", c as char),
        _ => (c as char).to_string(),
    };
    let mut out = String::from("[");
    let mut c = 0;
    while c < set.len() {
        if !set[c] {
            c += 1;
            continue;
        }
        let start = c;
        while c + 1 < set.len() && set[c + 1] {
            c += 1;
        }
        out.push_str(&escaped(start as u8));
        if c > start {
            if c > start + 1 {
                out.push('-');
            }
            out.push_str(&escaped(c as u8));
        }
        c += 1;
    }
    out.push(']');
    out
}

#[derive(Default)]
struct Node {
    children: Vec<(u8, u32)>,
    /// Members whose bytes pass through this node.
    members: Vec<u32>,
    /// The member ending here.
    terminal: Option<u32>,
}

enum Kind {
    OneOf,
    Subset {
        max_items: usize,
    },
    Ident {
        pattern: IdentPattern,
        max_items: usize,
    },
}

struct Automaton {
    kind: Kind,
    nodes: Vec<Node>,
    members: Vec<String>,
}

impl Automaton {
    fn insert(&mut self, bytes: &[u8], member: u32) {
        let mut n = 0usize;
        self.nodes[0].members.push(member);
        for &b in bytes {
            let next = match self.nodes[n].children.iter().find(|(c, _)| *c == b) {
                Some(&(_, next)) => next as usize,
                None => {
                    self.nodes.push(Node::default());
                    let id = self.nodes.len() - 1;
                    self.nodes[n].children.push((b, id as u32));
                    id
                }
            };
            n = next;
            self.nodes[n].members.push(member);
        }
        self.nodes[n].terminal = Some(member);
    }

    fn child(&self, n: u32, b: u8) -> Option<u32> {
        self.nodes[n as usize]
            .children
            .iter()
            .find(|(c, _)| *c == b)
            .map(|&(_, c)| c)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum St {
    /// In the trie (one-of: the whole answer; subset: one quoted member).
    Node(u32),
    /// Before `[`.
    Open,
    /// After `[`.
    First,
    /// Inside an identifier string, after this many characters.
    Ident(usize),
    /// After a complete member.
    AfterItem,
    /// After a comma; `true` once the optional space is seen.
    Comma(bool),
    Done,
}

/// The state of one constrained answer.
#[derive(Clone)]
pub struct Matcher {
    auto: Arc<Automaton>,
    st: St,
    count: usize,
    chosen: Vec<u32>,
}

fn dedupe(items: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    items
        .iter()
        .filter(|s| seen.insert(s.as_str()))
        .cloned()
        .collect()
}

impl Matcher {
    /// Validates the constraint (non-empty lists, limits ≥ 1) and builds its automaton.
    pub fn new(constraint: &Constraint) -> Result<Self, LlmError> {
        let invalid = |m: &str| Err(LlmError::InvalidRequest(m.to_string()));
        let (kind, members) = match constraint {
            Constraint::OneOf(items) => {
                if items.is_empty() {
                    return invalid("one-of constraint: the choice list is empty");
                }
                if items.iter().any(String::is_empty) {
                    return invalid("one-of constraint: a choice is the empty string");
                }
                (Kind::OneOf, dedupe(items))
            }
            Constraint::Subset { items, max_items } => {
                if items.is_empty() {
                    return invalid("subset constraint: the item list is empty");
                }
                if *max_items == 0 {
                    return invalid("subset constraint: max_items must be ≥ 1");
                }
                let max_items = *max_items;
                (Kind::Subset { max_items }, dedupe(items))
            }
            Constraint::IdentArray { pattern, max_items } => {
                if *max_items == 0 {
                    return invalid("identifier-array constraint: max_items must be ≥ 1");
                }
                let kind = Kind::Ident {
                    pattern: pattern.clone(),
                    max_items: *max_items,
                };
                (kind, Vec::new())
            }
        };
        let mut auto = Automaton {
            kind,
            nodes: vec![Node::default()],
            members: Vec::new(),
        };
        for (i, m) in members.iter().enumerate() {
            let bytes = match auto.kind {
                Kind::Subset { .. } => serde_json::to_string(m)
                    .map_err(|e| LlmError::InvalidRequest(e.to_string()))?
                    .into_bytes(),
                _ => m.clone().into_bytes(),
            };
            auto.insert(&bytes, i as u32);
        }
        auto.members = members;
        let st = match auto.kind {
            Kind::OneOf => St::Node(0),
            _ => St::Open,
        };
        Ok(Self {
            auto: Arc::new(auto),
            st,
            count: 0,
            chosen: Vec::new(),
        })
    }

    /// For a one-of with a single choice: that choice (no need to ask the model).
    pub fn single_answer(&self) -> Option<&str> {
        match (&self.auto.kind, self.auto.members.as_slice()) {
            (Kind::OneOf, [only]) => Some(only.as_str()),
            _ => None,
        }
    }

    fn alive(&self, node: u32, extra: &[u32]) -> bool {
        self.auto.nodes[node as usize]
            .members
            .iter()
            .any(|m| !self.chosen.contains(m) && !extra.contains(m))
    }

    /// Steps one byte on copies of the state; `extra` collects members completed on the way.
    fn advance(&self, st: &mut St, count: &mut usize, extra: &mut Vec<u32>, b: u8) -> bool {
        let auto = &*self.auto;
        let enter_item = |st: &mut St, count: &mut usize, extra: &mut Vec<u32>| -> bool {
            match &auto.kind {
                Kind::Ident { .. } => {
                    *st = St::Ident(0);
                    true
                }
                _ => self.trie_step(0, b'"', st, count, extra),
            }
        };
        match *st {
            St::Node(n) => self.trie_step(n, b, st, count, extra),
            St::Open => {
                if b == b'[' {
                    *st = St::First;
                }
                b == b'['
            }
            St::First => match (&auto.kind, b) {
                (_, b'"') => enter_item(st, count, extra),
                (Kind::Ident { .. }, b']') => {
                    *st = St::Done;
                    true
                }
                _ => false,
            },
            St::Ident(len) => {
                let Kind::Ident { pattern, .. } = &auto.kind else {
                    return false;
                };
                if b == b'"' && len > 0 {
                    *count += 1;
                    *st = St::AfterItem;
                    true
                } else if (len == 0 && pattern.first[b as usize])
                    || (len > 0 && len < pattern.max_len && pattern.rest[b as usize])
                {
                    *st = St::Ident(len + 1);
                    true
                } else {
                    false
                }
            }
            St::AfterItem => match b {
                b']' => {
                    *st = St::Done;
                    true
                }
                b',' => {
                    let more = match &auto.kind {
                        Kind::Subset { max_items } => *count < *max_items && self.alive(0, extra),
                        Kind::Ident { max_items, .. } => *count < *max_items,
                        Kind::OneOf => false,
                    };
                    if more {
                        *st = St::Comma(false);
                    }
                    more
                }
                _ => false,
            },
            St::Comma(space) => match b {
                b' ' if !space => {
                    *st = St::Comma(true);
                    true
                }
                b'"' => enter_item(st, count, extra),
                _ => false,
            },
            St::Done => false,
        }
    }

    fn trie_step(
        &self,
        n: u32,
        b: u8,
        st: &mut St,
        count: &mut usize,
        extra: &mut Vec<u32>,
    ) -> bool {
        let Some(c) = self.auto.child(n, b) else {
            return false;
        };
        if !self.alive(c, extra) {
            return false;
        }
        match (&self.auto.kind, self.auto.nodes[c as usize].terminal) {
            (Kind::Subset { .. }, Some(m)) => {
                extra.push(m);
                *count += 1;
                *st = St::AfterItem;
            }
            _ => *st = St::Node(c),
        }
        true
    }

    /// Whether the automaton accepts all of `bytes` from the current state (non-empty only).
    pub fn accepts(&self, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return false;
        }
        let (mut st, mut count, mut extra) = (self.st, self.count, Vec::new());
        bytes
            .iter()
            .all(|&b| self.advance(&mut st, &mut count, &mut extra, b))
    }

    /// Consumes `bytes`; returns false (and leaves the state unchanged) if they are rejected.
    pub fn consume(&mut self, bytes: &[u8]) -> bool {
        let (mut st, mut count, mut extra) = (self.st, self.count, Vec::new());
        if !bytes
            .iter()
            .all(|&b| self.advance(&mut st, &mut count, &mut extra, b))
        {
            return false;
        }
        self.st = st;
        self.count = count;
        self.chosen.extend(extra);
        true
    }

    /// The bytes consumed so far form a complete answer.
    pub fn is_final(&self) -> bool {
        match self.st {
            St::Node(n) => {
                matches!(self.auto.kind, Kind::OneOf)
                    && self.auto.nodes[n as usize].terminal.is_some()
            }
            St::Done => true,
            _ => false,
        }
    }

    /// More bytes could still be accepted.
    pub fn can_continue(&self) -> bool {
        match self.st {
            St::Node(n) => !self.auto.nodes[n as usize].children.is_empty(),
            St::Done => false,
            _ => true,
        }
    }

    /// The shortest bytes that make the answer complete (empty if it is).
    pub fn shortest_completion(&self) -> Vec<u8> {
        if self.is_final() {
            return Vec::new();
        }
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([(self.clone(), Vec::new())]);
        while let Some((m, path)) = queue.pop_front() {
            for b in 0u8..=255 {
                let mut next = m.clone();
                if !next.consume(&[b]) || !seen.insert((next.st, next.count)) {
                    continue;
                }
                let mut p = path.clone();
                p.push(b);
                if next.is_final() {
                    return p;
                }
                queue.push_back((next, p));
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(m: &mut Matcher, s: &str) -> bool {
        m.consume(s.as_bytes())
    }

    #[test]
    fn an_identifier_pattern_as_a_regex_accepts_what_the_automaton_accepts() {
        let p = IdentPattern::parse("[A-Za-z_][A-Za-z0-9_.-]*", 5).unwrap();
        assert_eq!(p.regex(), "^[A-Z_a-z][\\-.0-9A-Z_a-z]{0,4}$");
        let re = regex::Regex::new(&p.regex()).unwrap();
        let c = Constraint::IdentArray {
            pattern: p,
            max_items: 1,
        };
        for name in ["a", "_x.y", "a-b", "abcde", "abcdef", "9a", "a b", "", "a]"] {
            let mut m = Matcher::new(&c).unwrap();
            let whole = m.consume(format!("[\"{name}\"]").as_bytes()) && m.is_final();
            assert_eq!(re.is_match(name), whole, "{name:?}");
        }
    }

    #[test]
    fn one_of_handles_prefix_choices_and_rejects_others() {
        let mut m = Matcher::new(&Constraint::OneOf(vec![
            "foo".into(),
            "foobar".into(),
            "foo".into(),
        ]))
        .unwrap();
        assert!(!m.accepts(b"fox"));
        assert!(feed(&mut m, "foo"));
        assert!(m.is_final() && m.can_continue());
        assert!(feed(&mut m, "bar"));
        assert!(m.is_final() && !m.can_continue());
        assert!(!m.accepts(b"x"));
    }

    #[test]
    fn subset_is_distinct_escaped_and_bounded() {
        let items = vec!["a\"b".to_string(), "c\\d".to_string(), "é".to_string()];
        let mut m = Matcher::new(&Constraint::Subset {
            items,
            max_items: 2,
        })
        .unwrap();
        assert!(!m.accepts(b"[]"), "at least one member");
        assert!(feed(&mut m, r#"["a\"b", "#));
        assert!(!m.accepts(br#""a\"b""#), "no repeats");
        assert!(feed(&mut m, "\"é\""));
        assert!(!m.accepts(b","), "max_items reached");
        assert!(feed(&mut m, "]"));
        assert!(m.is_final() && !m.can_continue());
    }

    #[test]
    fn ident_array_follows_pattern() {
        let c = Constraint::IdentArray {
            pattern: IdentPattern::default(),
            max_items: 3,
        };
        let mut m = Matcher::new(&c).unwrap();
        assert!(m.accepts(b"[]"));
        assert!(!m.accepts(b"[\"1a"));
        assert!(!m.accepts(b"[\"\""));
        assert!(feed(&mut m, "[\"os.path.join\",\"x_1\""));
        assert_eq!(m.shortest_completion(), b"]");
    }

    #[test]
    fn shortest_completion_closes_a_partial_member() {
        let items = vec!["alpha".to_string(), "beta".to_string()];
        let mut m = Matcher::new(&Constraint::Subset {
            items,
            max_items: 2,
        })
        .unwrap();
        assert!(feed(&mut m, "[\"al"));
        assert_eq!(m.shortest_completion(), b"pha\"]");
    }

    #[test]
    fn bad_constraints_are_errors() {
        assert!(Matcher::new(&Constraint::OneOf(vec![])).is_err());
        assert!(Matcher::new(&Constraint::Subset {
            items: vec!["a".into()],
            max_items: 0
        })
        .is_err());
        assert!(IdentPattern::parse("[a-z", 8).is_err());
        assert!(IdentPattern::parse("[a-z][\"]*", 8).is_err());
    }
}
