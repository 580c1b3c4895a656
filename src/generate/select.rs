//! Choosing among several answers to one target without running them: the answer closest to
//! all the others (minimum Bayes risk with token edit distance as the loss). Answers that agree
//! with the rest are more often right than an outlier, and a small model's greedy answer is
//! sometimes the outlier.

use crate::repo::model::Lang;

/// Which of the checked candidates is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Select {
    /// The greedy answer, replaced only by one with fewer problems (the repair round, a
    /// sample, the infilled answer).
    #[default]
    First,
    /// Every task also gets the samples and (Python) the infilled answer; of the answers with
    /// the fewest problems, the one closest to all the others is kept.
    Central,
}

impl Select {
    pub fn name(self) -> &'static str {
        match self {
            Select::First => "first",
            Select::Central => "central",
        }
    }
}

/// Each body's mean similarity to the other bodies (1: the same code tokens, 0: nothing in
/// common); a single body scores 1.
pub fn centrality(bodies: &[&str], lang: Lang) -> Vec<f64> {
    let tokens: Vec<Vec<&str>> = bodies.iter().map(|b| code_tokens(b, lang)).collect();
    let n = tokens.len();
    let mut sums = vec![0.0; n];
    for i in 0..n {
        for j in i + 1..n {
            let s = similarity(&tokens[i], &tokens[j]);
            sums[i] += s;
            sums[j] += s;
        }
    }
    if n < 2 {
        return vec![1.0; n];
    }
    sums.into_iter().map(|s| s / (n - 1) as f64).collect()
}

/// The index of the most central body among those `eligible`, the first on a tie (callers put
/// the greedy answer first); `None` when nothing is eligible.
pub fn most_central(scores: &[f64], eligible: &[bool]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &s) in scores.iter().enumerate() {
        if eligible[i] && best.is_none_or(|b| s > scores[b]) {
            best = Some(i);
        }
    }
    best
}

/// One minus the edit distance over the longer length.
fn similarity(a: &[&str], b: &[&str]) -> f64 {
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    1.0 - edit_distance(a, b) as f64 / longest as f64
}

fn edit_distance(a: &[&str], b: &[&str]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The code's tokens: identifiers and numbers, string literals whole, one per other symbol;
/// comments and a leading docstring dropped (one layout writes it, the other does not).
fn code_tokens(code: &str, lang: Lang) -> Vec<&str> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let line_comment = match lang {
            Lang::Python => c == b'#',
            Lang::Java => bytes[i..].starts_with(b"//"),
        };
        if line_comment {
            i = code[i..].find('\n').map_or(bytes.len(), |n| i + n);
            continue;
        }
        if lang == Lang::Java && bytes[i..].starts_with(b"/*") {
            i = code[i + 2..].find("*/").map_or(bytes.len(), |n| i + n + 4);
            continue;
        }
        if c == b'"' || c == b'\'' {
            i = string_end(code, i);
        } else if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] >= 0x80)
            {
                i += 1;
            }
        } else {
            i += 1;
        }
        out.push(&code[start..i]);
    }
    if out
        .first()
        .is_some_and(|t| t.starts_with('"') || t.starts_with('\''))
    {
        out.remove(0);
    }
    out
}

/// The byte after the string literal starting at `start` (triple quotes included; an
/// unterminated one runs to the end). Compares bytes: inside a literal, `i` may stop within a
/// multi-byte character.
fn string_end(code: &str, start: usize) -> usize {
    let bytes = code.as_bytes();
    let quote = bytes[start];
    let triple = [quote; 3];
    let (closing, mut i): (&[u8], usize) = if bytes[start..].starts_with(&triple) {
        (&triple, start + 3)
    } else {
        (&triple[..1], start + 1)
    };
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
        } else if bytes[i..].starts_with(closing) {
            return i + closing.len();
        } else if closing.len() == 1 && bytes[i] == b'\n' {
            return i;
        } else {
            i += 1;
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_skip_comments_and_the_docstring_and_keep_strings_whole() {
        let body = "\"\"\"Doc.\n\n'quoted'\"\"\"\n# note\nx = 'a # b' + f(\"\\\"\") # end\nreturn x // 2\n";
        assert_eq!(
            code_tokens(body, Lang::Python),
            ["x", "=", "'a # b'", "+", "f", "(", "\"\\\"\"", ")", "return", "x", "/", "/", "2"]
        );
        // Characters of several bytes inside and after literals, an escape before one.
        assert_eq!(
            code_tokens("s = 'fö\\ö' + \"\"\"ü\"\"\" # é\nnäme = s", Lang::Python),
            ["s", "=", "'fö\\ö'", "+", "\"\"\"ü\"\"\"", "näme", "=", "s"]
        );
        let java = "/* c */ int x = 1; // two\nreturn x;";
        assert_eq!(
            code_tokens(java, Lang::Java),
            ["int", "x", "=", "1", ";", "return", "x", ";"]
        );
    }

    #[test]
    fn the_answer_the_others_agree_with_is_the_most_central() {
        let a = "total = 0\nfor x in xs:\n    total += x\nreturn total\n";
        let b = "\"\"\"Sum.\"\"\"\n# loop\ntotal = 0\nfor x in xs:\n    total += x\nreturn total\n";
        let c = "return sum(xs)\n";
        let d = "total = 0\nfor item in xs:\n    total += item\nreturn total\n";
        let scores = centrality(&[c, a, b, d], Lang::Python);
        // a and b are the same code once the docstring and comment go; d differs in one name.
        assert!((scores[1] - scores[2]).abs() < 1e-12);
        assert!(scores[1] > scores[3] && scores[3] > scores[0]);
        assert_eq!(most_central(&scores, &[true; 4]), Some(1));
        // Only the outlier is eligible: it is kept whatever the others say.
        assert_eq!(most_central(&scores, &[true, false, false, false]), Some(0));
        assert_eq!(most_central(&scores, &[false; 4]), None);
        assert_eq!(centrality(&[a], Lang::Python), [1.0]);
    }

    #[test]
    fn edit_distance_counts_token_edits() {
        assert_eq!(edit_distance(&["a", "b", "c"], &["a", "c"]), 1);
        assert_eq!(edit_distance(&["a", "b"], &["b", "a"]), 2);
        assert_eq!(edit_distance(&[], &["a"]), 1);
        assert_eq!(similarity(&[], &[]), 1.0);
    }
}
