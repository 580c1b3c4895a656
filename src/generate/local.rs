//! The target's surroundings in its own file: imports, module-level names, for a method its
//! class (header, attributes, `__init__`, sibling signatures), and the code nearest the target
//! above and below — the target itself hidden. Within a budget, in that order of priority;
//! what does not fit is shown as an elision marker and counted. Beside the file, where the
//! repository calls the target ([`super::usages`]), unless the file view already shows it.

use serde::Serialize;

use super::usages::{usages, Usage};
use super::Target;
use crate::repo::lang::outline::{outline, Stmt, StmtKind};
use crate::repo::mask::MaskedView;
use crate::repo::Lang;

/// Lines above the target shown before anything but the imports and the class header.
const NEAR_ABOVE: usize = 12;
/// Lines below the target shown at the same priority.
const NEAR_BELOW: usize = 6;
/// A module or class statement longer than this is not part of the skeleton (a big table).
const MAX_SKELETON_STMT: usize = 8;
/// `__init__` is shown whole (it says which attributes exist) up to this many lines.
const MAX_INIT_LINES: usize = 40;
/// Longer lines are cut: a minified line must not eat the budget.
const MAX_LINE_CHARS: usize = 240;

/// The target's file, ready to be rendered at any budget.
#[derive(Debug, Clone)]
pub struct LocalView {
    lang: Lang,
    /// The repository's folder name (the model's repository layout names it).
    repo: String,
    path: String,
    name: String,
    /// The masked file's lines (the target's own line range is not among them).
    lines: Vec<String>,
    /// 0-based index of the line where the target goes (a whitespace line of the masked text,
    /// or one past the end for a new function).
    anchor: usize,
    /// Column of the target's header.
    indent: usize,
    /// Line ranges (0-based, inclusive) of the skeleton, most important first: each is shown
    /// whole if it fits.
    order: Vec<(usize, usize)>,
    /// Every other line, nearest to the target first: shown until the first that doesn't fit.
    near: Vec<usize>,
    /// The enclosing class's name, for the trace.
    class: Option<String>,
    /// Where the repository calls the target.
    usages: Vec<Usage>,
}

/// The rendered local context, with what it left out.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LocalContext {
    pub path: String,
    pub class: Option<String>,
    pub text: String,
    pub lines_shown: usize,
    pub lines_total: usize,
    /// Calls of the target shown beside the file (those the file view shows are left out).
    pub usages: Vec<Usage>,
    /// Byte range of the line in `text` that marks the target's place.
    #[serde(skip)]
    pub marker: (usize, usize),
    /// The file's lines `text` shows (0-based, in order): `text` alone does not parse as the
    /// file does (a docstring's first line shown without its end turns the prose after it
    /// into code).
    #[serde(skip)]
    pub shown_rows: Vec<usize>,
}

impl LocalContext {
    /// The text before and after the target's place (its marker line left out).
    pub fn around_target(&self) -> (&str, &str) {
        let (start, end) = self.marker;
        (&self.text[..start], &self.text[end..])
    }
}

impl LocalView {
    /// The local view of `target` through `view`: its file as the masked view shows it. `None`
    /// when the file is not a parsed, visible source file.
    pub fn new(view: &MaskedView, target: &Target) -> Option<LocalView> {
        let text = view.file_text(&target.path)?;
        let lines: Vec<String> = text
            .lines()
            .map(|l| match l.char_indices().nth(MAX_LINE_CHARS) {
                Some((cut, _)) => format!("{} …", &l[..cut]),
                None => l.to_string(),
            })
            .collect();
        let file = view.file_id(&target.path)?;
        let anchor = match view.hole() {
            Some((f, span)) if f == file => text[..span.start_byte.min(text.len())]
                .matches('\n')
                .count(),
            _ => new_function_anchor(target.lang, &lines),
        };
        let stmts = outline(target.lang, text);
        let class_line = view.target().and_then(|id| {
            let repo = view.repository();
            let class = repo.function(id).class.as_deref()?;
            repo.classes_in(file)
                .iter()
                .map(|c| repo.class(*c))
                .filter(|c| c.qualname == class)
                .map(|c| c.span.start_line)
                .next()
        });
        let class = class_line.and_then(|l| {
            stmts
                .iter()
                .position(|s| s.kind == StmtKind::Class && s.start_line <= l && l <= s.header_end)
        });
        let order = priorities(&stmts, class, anchor, lines.len());
        let near = by_distance(anchor, lines.len());
        let repo = view
            .root()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(LocalView {
            lang: target.lang,
            repo,
            path: target.path.clone(),
            name: target.name.clone(),
            lines,
            anchor,
            indent: target.indent,
            order,
            near,
            class: class.and_then(|i| stmts[i].name.clone()),
            usages: view.target().map(|id| usages(view, id)).unwrap_or_default(),
        })
    }

    pub fn repo_name(&self) -> &str {
        &self.repo
    }

    /// The file shown within `budget_chars`, and beside it the calls of the target that the
    /// file view does not show. These come out of the same budget, first (they are a few
    /// lines, at most a quarter of it); when the whole budget's view shows them all, that view
    /// is the answer, unchanged, and a view that changed for them always comes with them.
    pub fn render(&self, budget_chars: usize) -> LocalContext {
        let whole = self.render_file(budget_chars);
        let missing = unshown(&whole, &self.usages);
        let cost: usize = missing.iter().map(|u| u.code.len() + 80).sum();
        if missing.is_empty() || cost * 4 > budget_chars {
            return whole;
        }
        let mut shown = self.render_file(budget_chars - cost);
        shown.usages = unshown(&shown, &self.usages);
        if shown.usages.is_empty() {
            // The smaller view happens to show the calls (it is not a subset of the larger
            // one): keep the larger view, the calls beside it.
            return LocalContext {
                usages: missing,
                ..whole
            };
        }
        shown
    }

    /// The file alone: ranges in priority order while they fit, rendered in file order with a
    /// marker for each gap and for the target's place.
    pub fn render_file(&self, budget_chars: usize) -> LocalContext {
        let mut shown = vec![false; self.lines.len()];
        let mut used = 0;
        for &(start, end) in &self.order {
            let new: Vec<usize> = (start..=end.min(self.lines.len().saturating_sub(1)))
                .filter(|&i| !shown[i])
                .collect();
            let cost: usize = new.iter().map(|&i| self.lines[i].len() + 1).sum();
            if used + cost > budget_chars {
                continue;
            }
            used += cost;
            for i in new {
                shown[i] = true;
            }
        }
        for &i in &self.near {
            if shown[i] {
                continue;
            }
            used += self.lines[i].len() + 1;
            if used > budget_chars {
                break;
            }
            shown[i] = true;
        }
        let comment = match self.lang {
            Lang::Python => "#",
            Lang::Java => "//",
        };
        let marker = format!(
            "{}{comment} >>> `{}` goes here (write it) <<<",
            " ".repeat(self.indent),
            self.name
        );
        let mut out = String::new();
        let mut gap = false;
        let mut marker_at = (0, 0);
        for (i, line) in self.lines.iter().enumerate() {
            if i == self.anchor {
                if gap {
                    out.push_str(&elision(comment, self.indent));
                    gap = false;
                }
                marker_at.0 = out.len();
                out.push_str(&marker);
                out.push('\n');
                marker_at.1 = out.len();
                continue;
            }
            if !shown[i] {
                gap = true;
                continue;
            }
            if gap {
                out.push_str(&elision(comment, indent_of(line)));
                gap = false;
            }
            out.push_str(line);
            out.push('\n');
        }
        if self.anchor >= self.lines.len() {
            if gap {
                out.push_str(&elision(comment, self.indent));
            }
            marker_at.0 = out.len();
            out.push_str(&marker);
            out.push('\n');
            marker_at.1 = out.len();
        } else if gap {
            out.push_str(&elision(comment, 0));
        }
        LocalContext {
            path: self.path.clone(),
            class: self.class.clone(),
            usages: Vec::new(),
            text: out,
            lines_shown: shown.iter().filter(|s| **s).count(),
            shown_rows: (0..shown.len()).filter(|&i| shown[i]).collect(),
            // The anchor line is the target's place, not code.
            lines_total: self.lines.len() - usize::from(self.anchor < self.lines.len()),
            marker: marker_at,
        }
    }
}

/// The calls among `usages` that `file` does not show.
fn unshown(file: &LocalContext, usages: &[Usage]) -> Vec<Usage> {
    usages
        .iter()
        .filter(|u| u.path != file.path || !file.text.lines().any(|l| l.trim() == u.call_line))
        .cloned()
        .collect()
}

fn elision(comment: &str, indent: usize) -> String {
    format!("{}{comment} ...\n", " ".repeat(indent))
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Where a new function goes: the end of a Python file, before a Java file's last `}`.
fn new_function_anchor(lang: Lang, lines: &[String]) -> usize {
    match lang {
        Lang::Python => lines.len(),
        Lang::Java => lines
            .iter()
            .rposition(|l| l.trim() == "}")
            .unwrap_or(lines.len()),
    }
}

/// The line ranges of the local view, most important first (0-based, inclusive): the imports,
/// the enclosing class's header and the lines right around the target; then the class's
/// attributes, `__init__` and sibling signatures; then module-level names and the file's other
/// signatures.
fn priorities(
    stmts: &[Stmt],
    class: Option<usize>,
    anchor: usize,
    n_lines: usize,
) -> Vec<(usize, usize)> {
    let z = |s: usize, e: usize| (s.saturating_sub(1), e.saturating_sub(1));
    let header = |s: &Stmt| {
        let doc_end = s.doc_line.map_or(s.header_end, |d| d.max(s.header_end));
        z(s.start_line, doc_end)
    };
    let mut order = Vec::new();
    for s in stmts
        .iter()
        .filter(|s| s.kind == StmtKind::Import && s.depth == 0)
    {
        order.push(z(s.start_line, s.end_line));
    }
    let members: Vec<&Stmt> = match class {
        Some(c) => {
            order.push(header(&stmts[c]));
            let depth = stmts[c].depth;
            stmts[c + 1..]
                .iter()
                .take_while(|s| s.depth > depth)
                .filter(|s| s.depth == depth + 1)
                .collect()
        }
        None => Vec::new(),
    };
    if anchor > 0 {
        order.push((anchor.saturating_sub(NEAR_ABOVE), anchor - 1));
    }
    if anchor + 1 < n_lines {
        order.push((anchor + 1, (anchor + NEAR_BELOW).min(n_lines - 1)));
    }
    for s in &members {
        let lines = s.end_line + 1 - s.start_line;
        match s.kind {
            StmtKind::Other if lines <= MAX_SKELETON_STMT => {
                order.push(z(s.start_line, s.end_line))
            }
            StmtKind::Def if s.name.as_deref() == Some("__init__") && lines <= MAX_INIT_LINES => {
                order.push(z(s.start_line, s.end_line))
            }
            StmtKind::Def | StmtKind::Class => order.push(header(s)),
            _ => {}
        }
    }
    for s in stmts.iter().filter(|s| s.depth == 0) {
        let lines = s.end_line + 1 - s.start_line;
        match s.kind {
            StmtKind::Other if lines <= MAX_SKELETON_STMT => {
                order.push(z(s.start_line, s.end_line))
            }
            StmtKind::Def | StmtKind::Class => order.push(header(s)),
            _ => {}
        }
    }
    order
}

/// Every line but the anchor, nearest first (a line above counts half the distance of one
/// below: the code before a definition tends to be what it builds on).
fn by_distance(anchor: usize, n_lines: usize) -> Vec<usize> {
    let mut lines: Vec<(usize, usize)> = (0..n_lines)
        .filter(|&i| i != anchor)
        .map(|i| {
            let d = if i < anchor {
                anchor - i
            } else {
                2 * (i - anchor)
            };
            (d, i)
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{resolve_target, Repository};

    fn open(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository) {
        crate::repo::temp_repository(files)
    }

    const SHAPES: &str = "import math\nfrom .util import clamp\n\nUNIT = 'cm'\n\n\
        class Other:\n    x = 1\n\n\
        class Shape(Base):\n    \"\"\"A shape.\"\"\"\n    sides = 0\n\n    \
        def __init__(self, w, h):\n        self.w = w\n        self.h = h\n\n    \
        def _scale(self, k):\n        \"\"\"Scaled copy.\"\"\"\n        return Shape(self.w * k, self.h * k)\n\n    \
        def area(self):\n        \"\"\"The area.\"\"\"\n        return self.w * self.h * SECRET\n\n    \
        def perimeter(self):\n        \"\"\"The perimeter.\"\"\"\n        return 2 * (self.w + self.h)\n\n\
        def far_away():\n        return 1\n";

    #[test]
    fn the_local_view_shows_the_skeleton_and_marks_the_target_without_its_code() {
        let (_dir, repo) = open(&[("pkg/shapes.py", SHAPES), ("pkg/util.py", "")]);
        let id = resolve_target(&repo, "pkg/shapes.py::Shape.area").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let local = LocalView::new(&view, &target).unwrap();
        let whole = local.render(100_000);
        assert!(!whole.text.contains("SECRET"), "{}", whole.text);
        assert!(whole
            .text
            .contains("    # >>> `area` goes here (write it) <<<\n"));
        assert_eq!(whole.class.as_deref(), Some("Shape"));
        assert_eq!(whole.lines_shown, whole.lines_total);
        // Around the target: everything but the marker line, cut there.
        let (before, after) = whole.around_target();
        assert!(
            before.ends_with("Shape(self.w * k, self.h * k)\n\n"),
            "{before}"
        );
        assert!(after.starts_with("\n    def perimeter(self):"), "{after}");
        assert_eq!(
            format!("{before}    # >>> `area` goes here (write it) <<<\n{after}"),
            whole.text
        );

        // A tight budget keeps imports, the class header, attributes and the neighbours, and
        // marks the gaps.
        let small = local.render(260);
        let t = &small.text;
        for want in [
            "import math",
            "from .util import clamp",
            "class Shape(Base):",
        ] {
            assert!(t.contains(want), "{want} missing from\n{t}");
        }
        assert!(small.lines_shown < small.lines_total);
        assert!(!t.contains("SECRET"));
        // Nearest code above comes before the far end of the file.
        assert!(t.contains("return Shape(self.w * k"), "{t}");
        assert!(!t.contains("def far_away"), "{t}");
        assert!(t.contains("# ..."), "{t}");
        // Shown lines stay in file order.
        let pos = |s: &str| t.find(s).unwrap();
        assert!(pos("import math") < pos("class Shape") && pos("class Shape") < pos(">>>"));
    }

    #[test]
    fn a_medium_budget_adds_sibling_signatures_and_init_before_far_bodies() {
        let (_dir, repo) = open(&[("pkg/shapes.py", SHAPES), ("pkg/util.py", "")]);
        let id = resolve_target(&repo, "pkg/shapes.py::Shape._scale").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let local = LocalView::new(&view, &target).unwrap();
        let t = local.render(520).text;
        for want in [
            "self.h = h",
            "def perimeter(self):",
            "UNIT = 'cm'",
            "def far_away():",
        ] {
            assert!(t.contains(want), "{want} missing from\n{t}");
        }
        assert!(!t.contains("return Shape(self.w * k"), "{t}");
    }

    #[test]
    fn calls_of_the_target_the_file_view_does_not_show_come_beside_it() {
        let shapes = format!(
            "class Shape:\n    def area(self):\n        return 1\n\n    \
             def double(self):\n        return 2 * self.area()\n\n\
             def pad(n):\n{}    return n\n\n\
             def far(shape):\n    x = 1\n    return Shape.area(shape) + x\n",
            "    n += 1\n".repeat(80)
        );
        let draw = "from pkg.shapes import Shape\n\ndef paint(s):\n    total = 0\n    \
            total += Shape.area(s)\n    return total\n";
        let (_dir, repo) = open(&[("pkg/shapes.py", &shapes), ("pkg/draw.py", draw)]);
        let id = resolve_target(&repo, "pkg/shapes.py::Shape.area").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let local = LocalView::new(&view, &target).unwrap();
        let callers = |c: &LocalContext| -> Vec<String> {
            c.usages.iter().map(|u| u.caller.clone()).collect()
        };
        // The whole file shows both of its own calls: only the other file's is added.
        let whole = local.render(100_000);
        assert!(whole.text.contains("return Shape.area(shape) + x"));
        assert_eq!(callers(&whole), ["pkg.draw.paint"]);
        // A tight budget drops the far call from the file view: it comes beside it, and the
        // file view gives up room for the calls.
        let tight = local.render(1000);
        assert!(!tight.text.contains("Shape.area(shape)"), "{}", tight.text);
        assert_eq!(callers(&tight), ["pkg.shapes.far", "pkg.draw.paint"]);
        assert!(tight.lines_shown < local.render_file(1000).lines_shown);
        // Where the file view shows every call, it is the view the whole budget gives.
        let (_dir2, repo2) = open(&[("pkg/shapes.py", &shapes)]);
        let id2 = resolve_target(&repo2, "pkg/shapes.py::Shape.area").unwrap();
        let view2 = MaskedView::new(&repo2, Some(id2), false);
        let local2 = LocalView::new(&view2, &Target::of(&repo2, id2).unwrap()).unwrap();
        let all = local2.render(100_000);
        assert!(all.usages.is_empty());
        assert_eq!(all.text, local2.render_file(100_000).text);
    }

    #[test]
    fn a_new_function_goes_at_the_end_of_its_file() {
        let (_dir, repo) = open(&[("m.py", "import os\n\ndef a():\n    return os.sep\n")]);
        let view = MaskedView::new(&repo, None, false);
        let target = Target::from_signature("m.py", "def b(x):\n    \"\"\"B.\"\"\"\n").unwrap();
        let t = LocalView::new(&view, &target).unwrap().render(10_000).text;
        assert!(
            t.ends_with("return os.sep\n# >>> `b` goes here (write it) <<<\n"),
            "{t}"
        );
    }
}
