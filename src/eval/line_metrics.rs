//! Line-completion metrics in the two definitions papers use. All scores are in [0, 1].
//!
//! **CrossCodeEval**: the prediction is cut after its first complete statement, comments are
//! stripped from prediction and ground truth (lines left blank are dropped); EM compares the
//! stripped non-blank lines; ES is the Indel similarity `1 − indel / (|p| + |t|)` of the stripped
//! texts (fuzzywuzzy's `ratio` without the rounding).
//!
//! **GraphCoder** (RepoCoder's scorer): empty and comment-only lines are dropped, the prediction
//! is truncated to the ground truth's line count, lines are stripped and joined with `\n`; EM is
//! equality, ES is `1 − Levenshtein / max(|p|, |t|)` (1 when both are empty).
//!
//! Identifiers, in both: string literals and comments removed, `\w+` tokens that do not start
//! with a digit and are not keywords. ID-EM compares the ordered lists; ID-F1 compares sets
//! (1 when both are empty, 0 when only one is).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::tasks::LineTask;
use crate::repo::lang::lexical::{classify, first_statement, Class};
use crate::repo::Lang;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LineScores {
    pub em: f64,
    pub es: f64,
    pub id_em: f64,
    pub id_f1: f64,
}

impl LineScores {
    /// Mean of each score; zeros for no samples.
    pub fn mean(scores: &[LineScores]) -> LineScores {
        if scores.is_empty() {
            return LineScores::default();
        }
        let n = scores.len() as f64;
        let sum = |f: fn(&LineScores) -> f64| scores.iter().map(f).sum::<f64>() / n;
        LineScores {
            em: sum(|s| s.em),
            es: sum(|s| s.es),
            id_em: sum(|s| s.id_em),
            id_f1: sum(|s| s.id_f1),
        }
    }
}

/// Mean line metrics of a set of predictions, in both definitions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LineSummary {
    pub total: usize,
    /// Tasks without a prediction; scored as an empty prediction.
    pub missing: usize,
    pub cceval: LineScores,
    pub graphcoder: LineScores,
}

/// Scores `predictions` (task id → predicted text) against line tasks.
pub fn score_lines(tasks: &[LineTask], predictions: &HashMap<String, String>) -> LineSummary {
    let mut cce = Vec::with_capacity(tasks.len());
    let mut gc = Vec::with_capacity(tasks.len());
    let mut missing = 0;
    for t in tasks {
        let pred = predictions
            .get(&t.id)
            .map(String::as_str)
            .unwrap_or_else(|| {
                missing += 1;
                ""
            });
        let lang = lang_of(&t.file);
        cce.push(cceval(pred, &t.ground_truth, lang));
        gc.push(graphcoder(pred, &t.ground_truth, lang));
    }
    LineSummary {
        total: tasks.len(),
        missing,
        cceval: LineScores::mean(&cce),
        graphcoder: LineScores::mean(&gc),
    }
}

/// Language of a file path for these metrics: `.java` is Java, anything else Python.
pub fn lang_of(path: &str) -> Lang {
    if path.ends_with(".java") {
        Lang::Java
    } else {
        Lang::Python
    }
}

/// The CrossCodeEval definition.
pub fn cceval(prediction: &str, truth: &str, lang: Lang) -> LineScores {
    let pred = strip_comments(first_statement(prediction, lang), lang);
    let truth = strip_comments(truth, lang);
    let em = nonblank_lines(&pred) == nonblank_lines(&truth);
    let (p, t) = (pred.trim(), truth.trim());
    let (pi, ti) = (identifiers(p, lang), identifiers(t, lang));
    LineScores {
        em: em as u8 as f64,
        es: indel_similarity(p, t),
        id_em: (pi == ti) as u8 as f64,
        id_f1: set_f1(&pi, &ti),
    }
}

/// The GraphCoder (RepoCoder scorer) definition.
pub fn graphcoder(prediction: &str, truth: &str, lang: Lang) -> LineScores {
    let t_lines = code_lines(truth, lang);
    let mut p_lines = code_lines(prediction, lang);
    p_lines.truncate(t_lines.len());
    let (p, t) = (p_lines.join("\n"), t_lines.join("\n"));
    let (pi, ti) = (identifiers(&p, lang), identifiers(&t, lang));
    let longest = p.chars().count().max(t.chars().count());
    let es = if longest == 0 {
        1.0
    } else {
        1.0 - levenshtein(&p, &t) as f64 / longest as f64
    };
    LineScores {
        em: (p_lines == t_lines) as u8 as f64,
        es,
        id_em: (pi == ti) as u8 as f64,
        id_f1: set_f1(&pi, &ti),
    }
}

fn nonblank_lines(s: &str) -> Vec<&str> {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect()
}

/// Stripped lines that are neither empty nor comment-only.
fn code_lines(s: &str, lang: Lang) -> Vec<&str> {
    let comment: &[&str] = match lang {
        Lang::Python => &["#"],
        Lang::Java => &["//", "/*", "*"],
    };
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !comment.iter().any(|c| l.starts_with(c)))
        .collect()
}

/// Comments removed; lines that held only a comment are dropped.
pub fn strip_comments(s: &str, lang: Lang) -> String {
    let mut out = String::with_capacity(s.len());
    for (_, c, class) in classify(s, lang) {
        if class != Class::Comment {
            out.push(c);
        }
    }
    let had_comment_only: Vec<bool> = s
        .lines()
        .map(|l| {
            let t = l.trim_start();
            !t.is_empty() && strip_line_is_blank(t, lang)
        })
        .collect();
    let kept: Vec<&str> = out
        .split('\n')
        .enumerate()
        .filter(|(i, l)| {
            !(had_comment_only.get(*i).copied().unwrap_or(false) && l.trim().is_empty())
        })
        .map(|(_, l)| l.trim_end())
        .collect();
    kept.join("\n")
}

fn strip_line_is_blank(line: &str, lang: Lang) -> bool {
    match lang {
        Lang::Python => line.starts_with('#'),
        Lang::Java => line.starts_with("//") || line.starts_with("/*") || line.starts_with('*'),
    }
}

/// Identifiers in code order: strings and comments removed, `\w+` tokens not starting with a
/// digit, keywords dropped.
pub fn identifiers(s: &str, lang: Lang) -> Vec<String> {
    let keywords: &[&str] = match lang {
        Lang::Python => PY_KEYWORDS,
        Lang::Java => JAVA_KEYWORDS,
    };
    let mut ids = Vec::new();
    let mut cur = String::new();
    let mut flush = |cur: &mut String| {
        if !cur.is_empty()
            && !cur.starts_with(|c: char| c.is_ascii_digit())
            && !keywords.contains(&cur.as_str())
        {
            ids.push(std::mem::take(cur));
        }
        cur.clear();
    };
    for (_, c, class) in classify(s, lang) {
        if class == Class::Code && (c.is_alphanumeric() || c == '_') {
            cur.push(c);
        } else {
            flush(&mut cur);
        }
    }
    flush(&mut cur);
    ids
}

/// Where a ground truth's identifiers (distinct, as [`identifiers`] reads them) occur in the
/// prompt that was to produce it: in the unfinished code it shows, in the retrieved part
/// before it (snippets and imported entities, which are comments), in either. Any word of the
/// text counts, commented or not: the model reads both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptRecall {
    pub identifiers: usize,
    pub in_context: usize,
    pub in_retrieved: usize,
    pub in_prompt: usize,
}

impl PromptRecall {
    /// `truth` against `prompt`, whose unfinished code starts at byte `context_offset`.
    pub fn of(truth: &str, prompt: &str, context_offset: usize, lang: Lang) -> Self {
        let words = |s: &str| -> HashSet<String> {
            s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect()
        };
        let mut cut = context_offset.min(prompt.len());
        while !prompt.is_char_boundary(cut) {
            cut -= 1;
        }
        let (retrieved, context) = (words(&prompt[..cut]), words(&prompt[cut..]));
        let ids: HashSet<String> = identifiers(truth, lang).into_iter().collect();
        let count = |f: &dyn Fn(&String) -> bool| ids.iter().filter(|i| f(i)).count();
        PromptRecall {
            identifiers: ids.len(),
            in_context: count(&|i| context.contains(i)),
            in_retrieved: count(&|i| retrieved.contains(i)),
            in_prompt: count(&|i| context.contains(i) || retrieved.contains(i)),
        }
    }
}

/// Shares of a group's ground-truth identifiers found in their prompts (all identifiers of the
/// group counted together); `added` is what only the retrieved part holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RecallShares {
    pub identifiers: usize,
    pub context: f64,
    pub retrieved: f64,
    pub prompt: f64,
    pub added: f64,
}

impl RecallShares {
    pub fn of<'a>(recalls: impl Iterator<Item = &'a PromptRecall>) -> Option<RecallShares> {
        let mut sum = PromptRecall::default();
        let mut any = false;
        for r in recalls {
            any = true;
            sum.identifiers += r.identifiers;
            sum.in_context += r.in_context;
            sum.in_retrieved += r.in_retrieved;
            sum.in_prompt += r.in_prompt;
        }
        if !any {
            return None;
        }
        let share = |n: usize| n as f64 / sum.identifiers.max(1) as f64;
        Some(RecallShares {
            identifiers: sum.identifiers,
            context: share(sum.in_context),
            retrieved: share(sum.in_retrieved),
            prompt: share(sum.in_prompt),
            added: share(sum.in_prompt - sum.in_context),
        })
    }
}

fn set_f1(pred: &[String], truth: &[String]) -> f64 {
    let p: HashSet<&String> = pred.iter().collect();
    let t: HashSet<&String> = truth.iter().collect();
    if p.is_empty() && t.is_empty() {
        return 1.0;
    }
    let tp = p.intersection(&t).count() as f64;
    if tp == 0.0 {
        return 0.0;
    }
    let (precision, recall) = (tp / p.len() as f64, tp / t.len() as f64);
    2.0 * precision * recall / (precision + recall)
}

/// `1 − (|a| + |b| − 2·LCS) / (|a| + |b|)` over chars; 1 for two empty strings.
pub fn indel_similarity(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    let mut row = vec![0usize; b.len() + 1];
    for &x in &a {
        let mut diag = 0;
        for (j, &y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
            diag = up;
        }
    }
    let lcs = row[b.len()];
    1.0 - (total - 2 * lcs) as f64 / total as f64
}

/// Levenshtein distance over chars (unit insert, delete, substitute).
pub fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = (diag + (x != y) as usize).min(up + 1).min(row[j] + 1);
            diag = up;
        }
    }
    row[b.len()]
}

const PY_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

const JAVA_KEYWORDS: &[&str] = &[
    "abstract",
    "assert",
    "boolean",
    "break",
    "byte",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extends",
    "final",
    "finally",
    "float",
    "for",
    "goto",
    "if",
    "implements",
    "import",
    "instanceof",
    "int",
    "interface",
    "long",
    "native",
    "new",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "short",
    "static",
    "strictfp",
    "super",
    "switch",
    "synchronized",
    "this",
    "throw",
    "throws",
    "transient",
    "try",
    "void",
    "volatile",
    "while",
    "true",
    "false",
    "null",
    "var",
];

#[cfg(test)]
mod tests {
    use super::*;
    use Lang::{Java, Python};

    #[test]
    fn prompt_recall_tells_the_unfinished_code_from_the_retrieved_part() {
        let prompt = "# class Node:\n#     def from_page_data(cls, data): ...\nnode = None\n";
        let offset = prompt.find("node = None").unwrap();
        // Identifiers of the truth: node, Node, from_page_data, data (a string is not one).
        let truth = "node = Node.from_page_data(data, 'page')";
        let r = PromptRecall::of(truth, prompt, offset, Python);
        let want = PromptRecall {
            identifiers: 4,
            in_context: 1,
            in_retrieved: 3,
            in_prompt: 4,
        };
        assert_eq!(r, want);
        let none = PromptRecall::of("x = y", prompt, offset, Python);
        let s = RecallShares::of([r, none].iter()).unwrap();
        assert_eq!(s.identifiers, 6);
        assert!(close(s.context, 1.0 / 6.0) && close(s.prompt, 4.0 / 6.0));
        assert!(close(s.added, 3.0 / 6.0) && close(s.retrieved, 3.0 / 6.0));
        assert_eq!(RecallShares::of([].iter()), None);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn check(got: LineScores, em: f64, es: f64, id_em: f64, id_f1: f64) {
        assert!(
            close(got.em, em)
                && close(got.es, es)
                && close(got.id_em, id_em)
                && close(got.id_f1, id_f1),
            "got {got:?}, want em {em} es {es} id_em {id_em} id_f1 {id_f1}"
        );
    }

    #[test]
    fn distances_by_hand() {
        // kitten/sitting: LCS "ittn" = 4 → indel 5 of 13; Levenshtein 3 of max 7.
        assert!(close(indel_similarity("kitten", "sitting"), 8.0 / 13.0));
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert!(close(indel_similarity("", ""), 1.0));
    }

    #[test]
    fn cceval_by_hand() {
        // Cut after the first statement; the comment goes. Both 18 chars, LCS 17 → 1 − 2/36.
        // ids [result foo a c] vs [result foo a b]: sets tp 3, fp 1, fn 1 → F1 0.75.
        let s = cceval(
            "result = foo(a, c)\nreturn result",
            "result = foo(a, b)  # sum",
            Python,
        );
        check(s, 0.0, 34.0 / 36.0, 0.0, 0.75);
        // Truth "x = 1\ny = x + 2" (15 chars, comment line dropped) vs cut "x = 1" (5):
        // LCS 5 → 1 − 10/20; ids {x} vs {x, y}: P 1, R 1/2 → F1 2/3.
        let s = cceval(
            "x = 1\ny = x + 2\nz = 3",
            "x = 1\n# note\ny = x + 2\n",
            Python,
        );
        check(s, 0.0, 0.5, 0.0, 2.0 / 3.0);
        // String contents are not identifiers.
        let s = cceval("print(\"hello world\", x)", "print('bye', x)", Python);
        assert_eq!(s.id_em, 1.0);
        assert_eq!(s.em, 0.0);
        // Java: cut at the first `;` outside brackets; `int` is a keyword.
        let s = cceval(
            "int n = list.size(); return n;",
            "int n = list.size();",
            Java,
        );
        check(s, 1.0, 1.0, 1.0, 1.0);
        assert_eq!(
            identifiers("int n = list.size();", Java),
            ["n", "list", "size"]
        );
    }

    #[test]
    fn graphcoder_by_hand() {
        // Inline comments stay in GraphCoder; prediction truncated to 1 line:
        // "result = foo(a, c)" vs "result = foo(a, b)  # sum" (25 chars): 1 substitution and
        // 7 deletions → ES 1 − 8/25. Identifiers ignore the comment: F1 0.75 as above.
        let s = graphcoder(
            "result = foo(a, c)\nreturn result",
            "result = foo(a, b)  # sum",
            Python,
        );
        check(s, 0.0, 1.0 - 8.0 / 25.0, 0.0, 0.75);
        // Comment and empty lines dropped, truncated to the truth's 2 lines → exact.
        let s = graphcoder(
            "x = 1\n\n  y = x + 2\nz = 3",
            "x = 1\n# note\n\ny = x + 2\n",
            Python,
        );
        check(s, 1.0, 1.0, 1.0, 1.0);
        // Shorter prediction: "a = 1" vs "a = 1\nb = 2" → Levenshtein 6 of 11; ids [a] vs [a b].
        let s = graphcoder("a = 1", "a = 1\nb = 2", Python);
        check(s, 0.0, 1.0 - 6.0 / 11.0, 0.0, 2.0 / 3.0);
        let s = graphcoder("// c\nreturn x;", "return x;", Java);
        check(s, 1.0, 1.0, 1.0, 1.0);
    }

    #[test]
    fn scores_line_tasks() {
        let task = |id: &str, truth: &str| LineTask {
            id: id.into(),
            repo: "r".into(),
            file: "m.py".into(),
            line: 1,
            ground_truth: truth.into(),
            split: None,
        };
        let tasks = [task("a", "x = 1"), task("b", "y = 2")];
        let preds = HashMap::from([("a".to_string(), "x = 1\nz = 0".to_string())]);
        let s = score_lines(&tasks, &preds);
        assert_eq!((s.total, s.missing), (2, 1));
        // a: exact in both (cut / truncated to one line); b: empty prediction scores 0.
        check(s.cceval, 0.5, 0.5, 0.5, 0.5);
        check(s.graphcoder, 0.5, 0.5, 0.5, 0.5);
    }

    #[test]
    fn mean_of_scores() {
        let a = LineScores {
            em: 1.0,
            es: 1.0,
            id_em: 1.0,
            id_f1: 1.0,
        };
        let b = LineScores {
            em: 0.0,
            es: 0.5,
            id_em: 0.0,
            id_f1: 0.5,
        };
        let m = LineScores::mean(&[a, b]);
        assert_eq!((m.em, m.es, m.id_em, m.id_f1), (0.5, 0.75, 0.5, 0.75));
    }
}
