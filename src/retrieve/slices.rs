//! Sliding-window code slices and their dense retrieval: the SimpleRAG baseline of the DyCoder
//! paper (cosine between the target's signature and fixed-size slices of every source file,
//! windows as in RepoCoder).
//!
//! The slices of every parsed file are embedded once and cached like the function vectors;
//! masks apply at query time: slices of hidden files are skipped, and so is every slice of the
//! target's file that overlaps the target's lines, so no slice shows any of its definition.

use std::collections::HashSet;

use serde::Serialize;

use super::dense::DenseError;
use crate::embed::{text, Embedder, TextKind};
use crate::index::vectors::{Item, Row, VectorIndex};
use crate::repo::mask::MaskedView;
use crate::repo::Repository;

/// Lines per slice and lines between slice starts (RepoCoder's window and slide sizes).
pub const WINDOW_LINES: usize = 20;
pub const STRIDE_LINES: usize = 10;

/// A slice of a file: its lines (1-based, inclusive) and text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slice {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    #[serde(skip)]
    pub code: String,
    pub score: f32,
}

impl Slice {
    /// How a slice is named in traces and prompts: `path:start-end`.
    pub fn name(&self) -> String {
        format!("{}:{}-{}", self.path, self.start_line, self.end_line)
    }
}

/// The windows of a text: `(first line, last line)`, 1-based and inclusive. The last window
/// ends at the last line; a text shorter than a window is one slice.
pub fn windows(line_count: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 1;
    while start <= line_count {
        let end = (start + WINDOW_LINES - 1).min(line_count);
        out.push((start, end));
        if end == line_count {
            break;
        }
        start += STRIDE_LINES;
    }
    out
}

fn lines_of(text: &str, start: usize, end: usize) -> String {
    let mut out: String = text
        .lines()
        .skip(start - 1)
        .take(end + 1 - start)
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    out
}

fn key(path: &str, start: usize, end: usize) -> String {
    format!("{path}#{start}-{end}")
}

/// Every slice of every parsed file (test files included: masks apply at query time), except
/// blank ones.
pub fn slice_items(repo: &Repository) -> Vec<Item> {
    let mut items = Vec::new();
    for f in repo.files() {
        let (Some(text), Some(_)) = (&f.text, f.lang) else {
            continue;
        };
        for (start, end) in windows(text.lines().count()) {
            let code = lines_of(text, start, end);
            if code.trim().is_empty() {
                continue;
            }
            items.push(Item {
                key: key(&f.path, start, end),
                qualname: format!("{}:{start}-{end}", f.path),
                path: f.path.clone(),
                start_line: start as u32,
                text: text::function_text(&code),
            });
        }
    }
    items
}

/// The `k` slices the view may show that are most similar to `query`, best first.
pub fn top_k(
    view: &MaskedView,
    embedder: &dyn Embedder,
    index: &VectorIndex,
    query: &str,
    k: usize,
) -> Result<Vec<Slice>, DenseError> {
    let repo = view.repository();
    let hole = view.target().map(|t| {
        let f = repo.function(t);
        (f.path.as_str(), f.span.start_line, f.span.end_line)
    });
    let visible_files: HashSet<&str> = view.files().map(|f| f.path).collect();
    let shows = |r: &Row| {
        let Some((start, end)) = parse_lines(r) else {
            return false;
        };
        let overlaps_target =
            hole.is_some_and(|(path, first, last)| path == r.path && start <= last && end >= first);
        visible_files.contains(r.path.as_str()) && !overlaps_target
    };
    let q = embedder.embed(&[query], TextKind::Query)?;
    let hits = index.search(q.row(0), k, &shows)?;
    Ok(hits
        .iter()
        .filter_map(|h| {
            let (start, end) = parse_lines(h.row)?;
            // Outside the target's lines the file's text is what the view shows.
            let text = repo.file(repo.file_id(&h.row.path)?).text.as_deref()?;
            Some(Slice {
                path: h.row.path.clone(),
                start_line: start,
                end_line: end,
                code: lines_of(text, start, end),
                score: h.score,
            })
        })
        .collect())
}

/// The lines of a row from its key (`path#start-end`).
fn parse_lines(r: &Row) -> Option<(usize, usize)> {
    let (_, lines) = r.key.rsplit_once('#')?;
    let (start, end) = lines.split_once('-')?;
    Some((start.parse().ok()?, end.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_overlap_by_the_stride_and_cover_every_line() {
        assert_eq!(windows(0), []);
        assert_eq!(windows(5), [(1, 5)]);
        assert_eq!(windows(20), [(1, 20)]);
        assert_eq!(windows(25), [(1, 20), (11, 25)]);
        assert_eq!(windows(31), [(1, 20), (11, 30), (21, 31)]);
    }

    #[test]
    fn slices_carry_their_lines() {
        let text: String = (1..=25).map(|i| format!("x{i} = {i}\n")).collect();
        assert_eq!(lines_of(&text, 11, 12), "x11 = 11\nx12 = 12\n");
    }
}
