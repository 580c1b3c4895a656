//! Sparse similarity retrieval: Okapi BM25 (Robertson & Zaragoza) between the target's
//! signature and docstring and every function the masked view shows — the sparse variant of the
//! similarity part in the DyCoder paper's Table 4. Documents are built per query from the view,
//! so nothing is cached and nothing hidden is ever scored.

use std::collections::HashMap;

use super::FunctionHit;
use crate::repo::mask::MaskedView;

/// Term-frequency saturation and length normalisation, the usual defaults.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// Keywords and filler that say nothing about what a function does.
const STOP_WORDS: &[&str] = &[
    "self",
    "def",
    "return",
    "if",
    "else",
    "elif",
    "for",
    "in",
    "is",
    "not",
    "and",
    "or",
    "none",
    "true",
    "false",
    "the",
    "of",
    "to",
    "a",
    "an",
    "import",
    "from",
    "class",
    "public",
    "private",
    "protected",
    "static",
    "final",
    "void",
    "new",
    "this",
    "param",
    "returns",
    "int",
    "str",
];

/// The terms of a text: identifiers and words, lowercased, with snake_case and camelCase parts
/// as terms of their own (`normPath` → `normpath`, `norm`, `path`).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
    {
        let parts = split_identifier(word);
        if parts.len() > 1 {
            out.push(word.to_lowercase());
        }
        out.extend(parts);
    }
    out.retain(|t| t.chars().count() > 1 && !STOP_WORDS.contains(&t.as_str()));
    out
}

/// `parse_HTTPResponse2` → `parse`, `http`, `response2`.
fn split_identifier(word: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let lower_to_upper = chars[i - 1].is_lowercase() && chars[i].is_uppercase();
            // The last capital of an acronym starts the next word: `HTTPResponse`.
            let acronym_end = chars[i - 1].is_uppercase()
                && chars[i].is_uppercase()
                && chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            if lower_to_upper || acronym_end {
                parts.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        parts.push(chars[start..].iter().collect::<String>().to_lowercase());
    }
    parts
}

/// The `k` visible functions scoring highest against `query`, best first; functions sharing no
/// term with the query are never returned.
pub fn top_k(view: &MaskedView, query: &str, k: usize) -> Vec<FunctionHit> {
    let docs: Vec<_> = view
        .functions()
        .filter_map(|(id, _)| {
            let code = view.function_code(id)?;
            let mut tf: HashMap<String, u32> = HashMap::new();
            let terms = terms(&code);
            let len = terms.len();
            for t in terms {
                *tf.entry(t).or_default() += 1;
            }
            Some((id, tf, len))
        })
        .collect();
    if docs.is_empty() || k == 0 {
        return Vec::new();
    }
    let mut query_terms = terms(query);
    query_terms.sort();
    query_terms.dedup();
    let n = docs.len() as f32;
    let avg_len = docs.iter().map(|d| d.2).sum::<usize>() as f32 / n;
    let idf: Vec<f32> = query_terms
        .iter()
        .map(|t| {
            let df = docs.iter().filter(|d| d.1.contains_key(t)).count() as f32;
            ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    let mut hits: Vec<FunctionHit> = docs
        .iter()
        .filter_map(|(id, tf, len)| {
            let norm = K1 * (1.0 - B + B * *len as f32 / avg_len.max(1.0));
            let score: f32 = query_terms
                .iter()
                .zip(&idf)
                .filter_map(|(t, idf)| {
                    let f = *tf.get(t)? as f32;
                    Some(idf * f * (K1 + 1.0) / (f + norm))
                })
                .sum();
            (score > 0.0).then_some(FunctionHit { id: *id, score })
        })
        .collect();
    // Ties keep view order (stable sort), so results are deterministic.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{IndexOptions, Repository};

    #[test]
    fn identifiers_split_into_lowercase_parts() {
        assert_eq!(
            terms("def normPath(self, parse_HTTPResponse2): return x"),
            [
                "normpath",
                "norm",
                "path",
                "parse_httpresponse2",
                "parse",
                "http",
                "response2"
            ]
        );
    }

    fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            std::fs::write(dir.path().join(path), text).unwrap();
        }
        let opts = IndexOptions {
            use_cache: false,
            ..IndexOptions::default()
        };
        let repo = Repository::open(dir.path(), &opts).unwrap();
        (dir, repo)
    }

    #[test]
    fn ranks_by_shared_rare_terms_and_never_serves_the_hidden_target() {
        let (_dir, repo) = repo_with(&[(
            "m.py",
            "def checksum_file(path):\n    return crc32(open(path).read())\n\n\
             def crc32(data):\n    return zlib_crc(data)\n\n\
             def greet(name):\n    return 'hello ' + name\n\n\
             def file_checksum(path):\n    return checksum_file(path)\n",
        )]);
        let target = crate::repo::resolve_target(&repo, "m.file_checksum").unwrap();
        let view = MaskedView::new(&repo, Some(target), false);
        let hits = top_k(
            &view,
            "def file_checksum(path): crc32 checksum of a file",
            10,
        );
        let names: Vec<&str> = hits
            .iter()
            .map(|h| repo.function(h.id).name.as_str())
            .collect();
        assert_eq!(names, ["checksum_file", "crc32"]);
        assert!(hits[0].score > hits[1].score);
        assert!(top_k(&view, "checksum", 0).is_empty());
    }
}
