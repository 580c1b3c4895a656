//! Drawing line-completion cursors from a repository the way RepoEval does: one-line
//! statements inside function and method bodies (Python and Java, not in tests), each a task whose ground truth is its
//! line. A cursor is `cross_file` when its line uses a name the file imports from the
//! repository itself, `in_file` otherwise; a set takes a chosen share of each.
//! Draws are a pure function of the seed and the code, so a set can be regenerated.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

use super::tasks::LineTask;
use crate::graph::Ccg;
use crate::repo::mask::is_test_path;
use crate::repo::{ImportTarget, Repository};

/// Statement kinds a cursor may sit on: what a developer types as one line in a body.
const KINDS: &[&str] = &[
    "expression_statement",
    "return_statement",
    "raise_statement",
    "assert_statement",
    "if_statement",
    "elif_clause",
    "for_statement",
    "while_statement",
    "with_statement",
    "delete_statement",
    // Java
    "local_variable_declaration",
    "throw_statement",
    "enhanced_for_statement",
];

/// Lines shorter than this (stripped) say too little to score (`pass`, `i += 1`).
const MIN_CHARS: usize = 8;

/// Names a file binds by importing this repository's definitions or modules.
fn in_repo_import_names(repo: &Repository, path: &str) -> HashSet<String> {
    let Some(file) = repo.file_id(path) else {
        return HashSet::new();
    };
    repo.resolver()
        .imports_of(file)
        .into_iter()
        .filter(|(_, t)| {
            matches!(
                t,
                Ok(ImportTarget::Defs { .. }) | Ok(ImportTarget::Module { .. })
            )
        })
        .filter(|(imp, _)| !imp.is_wildcard)
        .filter_map(|(imp, _)| {
            imp.alias
                .or(imp.name)
                .or_else(|| imp.module.split('.').next().map(str::to_string))
        })
        .collect()
}

/// Every cursor of `repo` (named `repo_name` in the tasks), in file and line order.
pub fn cursors(repo: &Repository, repo_name: &str) -> Vec<LineTask> {
    let mut out = Vec::new();
    for file in repo.files() {
        let (Some(lang), Some(text)) = (file.lang, file.text.as_deref()) else {
            continue;
        };
        if is_test_path(&file.path) {
            continue;
        }
        let Some(id) = repo.file_id(&file.path) else {
            continue;
        };
        let bodies: Vec<(usize, usize)> = repo
            .functions_in(id)
            .iter()
            .map(|&f| {
                let f = repo.function(f);
                // Lines after the header: a one-line `def f(): return x` has none.
                (f.signature.end_line + 1, f.span.end_line)
            })
            .collect();
        let Some(ccg) = Ccg::build(lang, text) else {
            continue;
        };
        let imported = in_repo_import_names(repo, &file.path);
        let lines: Vec<&str> = text.lines().collect();
        for s in &ccg.statements {
            let line = s.start_line;
            let inside = bodies.iter().any(|&(a, b)| a <= line && line <= b);
            let Some(truth) = lines.get(line - 1) else {
                continue;
            };
            let stripped = truth.trim();
            let docstring = stripped.starts_with(['"', '\'']);
            if !inside
                || s.end_line != line
                || !KINDS.contains(&s.kind.as_str())
                || stripped.len() < MIN_CHARS
                || docstring
            {
                continue;
            }
            let cross = super::line_metrics::identifiers(stripped, lang)
                .iter()
                .any(|n| imported.contains(n));
            out.push(LineTask {
                id: format!("{repo_name}/{}:{line}", file.path),
                repo: repo_name.to_string(),
                file: file.path.clone(),
                line,
                ground_truth: truth.to_string(),
                split: Some(if cross { "cross_file" } else { "in_file" }.to_string()),
            });
        }
    }
    out
}

fn draw_key(seed: u64, task: &LineTask) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(&Sha256::digest(format!("{seed}:{}", task.id).as_bytes()));
    out
}

/// `count` cursors of `all`, `cross_share` of them cross-file where there are enough (the
/// rest in-file, and the other way round), drawn by `seed`; returned in file and line order.
pub fn draw(all: Vec<LineTask>, count: usize, cross_share: f64, seed: u64) -> Vec<LineTask> {
    let (mut cross, mut local): (Vec<LineTask>, Vec<LineTask>) = all
        .into_iter()
        .partition(|t| t.split.as_deref() == Some("cross_file"));
    for part in [&mut cross, &mut local] {
        part.sort_by_key(|t| draw_key(seed, t));
    }
    let want_cross = ((count as f64) * cross_share.clamp(0.0, 1.0)).round() as usize;
    let n_cross = want_cross.min(cross.len());
    let n_local = (count - n_cross).min(local.len());
    let n_cross = (count - n_local).min(cross.len());
    let mut out: Vec<LineTask> = cross
        .into_iter()
        .take(n_cross)
        .chain(local.into_iter().take(n_local))
        .collect();
    out.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &str = "\
def scale(values, factor):
    return [v * factor for v in values]
";

    const MAIN: &str = "\
from lib import scale
import os


def run(paths, factor):
    \"\"\"Scales the sizes of the files.\"\"\"
    sizes = [os.path.getsize(p) for p in paths]
    scaled = scale(sizes, factor)
    pass
    return sorted(scaled, reverse=True)


TOTAL = run([], 2)
";

    #[test]
    fn cursors_are_body_lines_split_by_what_they_import() {
        let (_dir, repo) = crate::repo::temp_repository(&[
            ("lib.py", LIB),
            ("main.py", MAIN),
            (
                "tests/test_main.py",
                "def test_run():\n    assert run([], 1) == []\n",
            ),
        ]);
        let all = cursors(&repo, "demo");
        let found: Vec<(&str, usize, &str)> = all
            .iter()
            .map(|t| (t.file.as_str(), t.line, t.split.as_deref().unwrap()))
            .collect();
        // Not the docstring, not `pass`, not module level, not tests.
        assert_eq!(
            found,
            vec![
                ("lib.py", 2, "in_file"),
                ("main.py", 7, "in_file"),
                ("main.py", 8, "cross_file"),
                ("main.py", 10, "in_file"),
            ]
        );
        assert_eq!(all[2].ground_truth, "    scaled = scale(sizes, factor)");
        assert_eq!(all[2].id, "demo/main.py:8");

        let two = draw(all.clone(), 2, 0.5, 7);
        assert_eq!(two.len(), 2);
        assert_eq!(
            two.iter()
                .filter(|t| t.split.as_deref() == Some("cross_file"))
                .count(),
            1
        );
        // Only one cross-file cursor exists: the rest are in-file.
        let three = draw(all.clone(), 3, 1.0, 7);
        assert_eq!(three.len(), 3);
        assert_eq!(draw(all.clone(), 3, 1.0, 7), three, "same seed, same draw");
        assert_eq!(draw(all.clone(), 10, 0.5, 1).len(), 4);
    }
}
