//! Choosing among several answers to one target without running them: the answer closest to
//! all the others (minimum Bayes risk with token edit distance as the loss), and how likely the
//! model finds the target's docstring when shown the answer's code (a reviewer's view), or the
//! answer's body under the bare request for the target (a coder's view). Answers that agree
//! with the rest are more often right than an outlier, and a small model's greedy answer is
//! sometimes the outlier; code its docstring fits is more often right than code it does not.

use super::model_tests::TestScore;
use super::{postprocess, prompts, Target};
use crate::llm::{Llm, LlmError, Message, Prompt};
use crate::repo::model::Lang;
use crate::repo::pystr::{string_end, without_docstring};

/// Which of the checked candidates is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Select {
    /// The greedy answer, replaced only by one with fewer problems (the repair round, a
    /// sample, the infilled answer).
    First,
    /// Every task also gets the samples and (Python) the infilled answer; of the answers with
    /// the fewest problems, the one closest to all the others is kept.
    Central,
    /// As `central`, ranking the answers with the fewest problems by their closeness to the
    /// others plus the reviewer's log-probability of the target's docstring given their code,
    /// each standardised over those answers.
    #[default]
    Review,
    /// Of the answers with the fewest problems, the one whose body the model finds most
    /// likely per token under the bare request for the target (no repository context);
    /// where that cannot be scored (Java, an engine that cannot score), as `review`.
    Likely,
    /// As `review`, with the answers that pass the most of a few tests the model writes for
    /// the target (from its file, header and docstring) ranked first. Needs a way to run them
    /// (`eval`, or `generate --python`); Java targets and answers that cannot be tested rank
    /// as `review`.
    Tests,
}

impl Select {
    pub fn name(self) -> &'static str {
        match self {
            Select::First => "first",
            Select::Central => "central",
            Select::Review => "review",
            Select::Likely => "likely",
            Select::Tests => "tests",
        }
    }

    /// The selection when none is asked for: the default with the names check, `first`
    /// without it (the others choose among checked answers).
    pub fn or_default(choice: Option<Select>, grounding: bool) -> Select {
        choice.unwrap_or(if grounding {
            Select::default()
        } else {
            Select::First
        })
    }

    /// Whether every task draws the whole pool of answers to choose from.
    pub fn pools(self) -> bool {
        self != Select::First
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

/// Each answer's rank: its centrality and, where every eligible answer has one, its review
/// log-probability, each standardised over the `eligible` answers (equal values: zero) and
/// summed. Ineligible answers rank nowhere (`-inf`).
pub fn ranks(centrality: &[f64], reviews: &[Option<f64>], eligible: &[bool]) -> Vec<f64> {
    let mut out: Vec<f64> = eligible
        .iter()
        .map(|&e| if e { 0.0 } else { f64::NEG_INFINITY })
        .collect();
    let mut add = |values: &[f64]| {
        let picked: Vec<f64> = (0..values.len())
            .filter(|&i| eligible[i])
            .map(|i| values[i])
            .collect();
        if picked.is_empty() {
            return;
        }
        let n = picked.len() as f64;
        let mean = picked.iter().sum::<f64>() / n;
        let spread = (picked.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        // Equal values leave rounding noise in the spread, not a ranking.
        if spread <= 1e-9 * (1.0 + mean.abs()) {
            return;
        }
        for (i, &v) in values.iter().enumerate() {
            if eligible[i] {
                out[i] += (v - mean) / spread;
            }
        }
    };
    add(centrality);
    let reviewed: Option<Vec<f64>> = (0..reviews.len())
        .map(|i| if eligible[i] { reviews[i] } else { Some(0.0) })
        .collect();
    if let Some(reviewed) = reviewed {
        add(&reviewed);
    }
    out
}

/// Which answers a selection may keep: those with the fewest problems.
pub fn eligible(problems: &[usize]) -> Vec<bool> {
    let fewest = problems.iter().copied().min().unwrap_or(0);
    problems.iter().map(|&p| p == fewest).collect()
}

/// `likely`'s ranks: each eligible answer's likelihood per token, the others nowhere
/// (`-inf`); `None` when an eligible answer has none.
pub fn likely_ranks(likelihoods: &[Option<f64>], eligible: &[bool]) -> Option<Vec<f64>> {
    likelihoods
        .iter()
        .zip(eligible)
        .map(|(&l, &e)| if e { l } else { Some(f64::NEG_INFINITY) })
        .collect()
}

/// `tests`' ranks: the answers ranked by how many model-written tests they pass, then by how
/// few raise, a tie by `base` (the review's ranks); an answer that was not tested counts as
/// passing none and raising none.
pub fn tests_ranks(scores: &[Option<TestScore>], base: &[f64]) -> Vec<f64> {
    // The review's ranks are sums of two standard scores: far below the smaller step, and a
    // pool has far fewer tests than the larger step over the smaller.
    const PASSED: f64 = 1e6;
    const RAISED: f64 = 1e3;
    base.iter()
        .zip(scores)
        .map(|(&b, s)| {
            let s = s.unwrap_or_default();
            b + PASSED * s.passed as f64 - RAISED * s.raised as f64
        })
        .collect()
}

/// The ranks with the answers that pass the docstring's examples above all others (they
/// stay ordered by `base` among themselves).
pub fn examples_ranks(passed: &[Option<bool>], base: &[f64]) -> Vec<f64> {
    // Above any `tests_ranks` step: a pool has far fewer than a thousand tests.
    const PASSED: f64 = 1e9;
    base.iter()
        .zip(passed)
        .map(|(&b, &p)| if p == Some(true) { b + PASSED } else { b })
        .collect()
}

/// The index of the best score among the `eligible` answers, the first on a tie (callers put
/// the greedy answer first); `None` when nothing is eligible.
pub fn best(scores: &[f64], eligible: &[bool]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &s) in scores.iter().enumerate() {
        if eligible[i] && best.is_none_or(|b| s > scores[b]) {
            best = Some(i);
        }
    }
    best
}

/// The reviewer's request for an answer: its code, with a Python body's leading docstring left
/// out (the docstring is what the reviewer is scored on writing).
pub fn review_prompt(target: &Target, function: &str, body: &str) -> Prompt {
    let code = match target.lang {
        Lang::Python => {
            let header = postprocess::dedent(&target.signature);
            let body = without_docstring(body).trim_matches('\n');
            format!(
                "{}\n{}",
                header.trim_end(),
                postprocess::indent(body, "    ")
            )
        }
        Lang::Java => postprocess::dedent(function),
    };
    let code = if code.ends_with('\n') {
        code
    } else {
        code + "\n"
    };
    Prompt::Chat(vec![Message::user(prompts::review_request(
        target.lang,
        &code,
    ))])
}

/// The reviews of a pool of answers.
#[derive(Debug, Default)]
pub struct Reviews {
    /// Per answer, in pool order: the log-probability of the target's docstring given its
    /// code (`None`: not reviewed).
    pub scores: Vec<Option<f64>>,
    /// Prompt and docstring tokens the reviews read.
    pub tokens: usize,
    /// Why there are no reviews: the engine could not score.
    pub error: Option<String>,
}

/// Reviews the `eligible` answers (`(function, body)` in pool order): how likely the model finds
/// the target's docstring after being shown each answer's code. None without a docstring, or
/// when the engine cannot score (the error says why); an inference failure ends the run.
pub fn reviews(
    llm: &mut dyn Llm,
    target: &Target,
    answers: &[(&str, &str)],
    eligible: &[bool],
) -> Result<Reviews, LlmError> {
    let mut out = Reviews {
        scores: vec![None; answers.len()],
        ..Reviews::default()
    };
    let doc = target.docstring.as_deref().map(str::trim);
    let Some(doc) = doc.filter(|d| !d.is_empty()) else {
        return Ok(out);
    };
    for (i, (function, body)) in answers.iter().enumerate() {
        if !eligible[i] {
            continue;
        }
        let prompt = review_prompt(target, function, body);
        match llm.score(&prompt, doc) {
            Ok(scored) => {
                out.tokens += scored.prompt_tokens + scored.tokens;
                out.scores[i] = Some(scored.logprob);
            }
            Err(e @ (LlmError::InvalidRequest(_) | LlmError::PromptTooLong { .. })) => {
                out.scores = vec![None; answers.len()];
                out.error = Some(e.to_string());
                return Ok(out);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// An answer's likelihood: its body's natural-log probability under the bare request for the
/// target (its header and docstring, no repository context), summed over the body's tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Likelihood {
    pub logprob: f64,
    pub tokens: usize,
}

impl Likelihood {
    /// Per token: long and short answers compared on one scale.
    pub fn mean(self) -> f64 {
        self.logprob / self.tokens.max(1) as f64
    }
}

/// The likelihoods of a pool of answers.
#[derive(Debug, Default)]
pub struct Likelihoods {
    /// Per answer, in pool order (`None`: not scored).
    pub scores: Vec<Option<Likelihood>>,
    /// Prompt and continuation tokens the scoring passes read.
    pub tokens: usize,
}

/// The likelihoods of the `eligible` Python bodies: each scored after the header and docstring
/// the bare request shows (their own probability taken out, so only the body counts). None
/// for Java targets; an engine that cannot score gives the error.
pub fn likelihoods(
    llm: &mut dyn Llm,
    target: &Target,
    bodies: &[&str],
    eligible: &[bool],
) -> Result<Likelihoods, LlmError> {
    let mut out = Likelihoods {
        scores: vec![None; bodies.len()],
        tokens: 0,
    };
    if target.lang != Lang::Python {
        return Ok(out);
    }
    let shown = target.prompt_text();
    let request = prompts::generation_request(target.lang, &target.path, &shown, "", None, "");
    let prompt = Prompt::Chat(vec![
        Message::system(prompts::system(target.lang)),
        Message::user(request),
    ]);
    let head = format!(
        "```{}\n{}\n",
        prompts::language_name(target.lang),
        shown.trim_end()
    );
    let base = llm.score(&prompt, &head)?;
    out.tokens += base.prompt_tokens + base.tokens;
    for (i, body) in bodies.iter().enumerate() {
        if !eligible[i] {
            continue;
        }
        let code = postprocess::indent(without_docstring(body).trim_matches('\n'), "    ");
        let scored = llm.score(&prompt, &format!("{head}{}\n```", code.trim_end()))?;
        out.tokens += scored.prompt_tokens + scored.tokens;
        out.scores[i] = Some(Likelihood {
            logprob: scored.logprob - base.logprob,
            tokens: scored.tokens.saturating_sub(base.tokens).max(1),
        });
    }
    Ok(out)
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
            i = string_end(code, i).unwrap_or(bytes.len());
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
        assert_eq!(best(&scores, &[true; 4]), Some(1));
        // Only the outlier is eligible: it is kept whatever the others say.
        assert_eq!(best(&scores, &[true, false, false, false]), Some(0));
        assert_eq!(best(&scores, &[false; 4]), None);
        assert_eq!(centrality(&[a], Lang::Python), [1.0]);
    }

    #[test]
    fn ranks_add_standardised_centrality_and_review() {
        let centrality = [0.5, 0.7, 0.6, 0.9];
        let eligible = [true, true, true, false];
        // Centrality alone: the ineligible answer ranks nowhere, the rest by z-score.
        let alone = ranks(&centrality, &[None; 4], &eligible);
        assert_eq!(alone[3], f64::NEG_INFINITY);
        assert!((alone[1] - 1.224_744_871).abs() < 1e-6 && alone[2].abs() < 1e-9);
        assert_eq!(best(&alone, &eligible), Some(1));
        // Reviews that prefer answer 2 lift it over the most central one; the ineligible
        // answer needs no review.
        let reviews = [Some(-30.0), Some(-20.0), Some(-5.0), None];
        let both = ranks(&centrality, &reviews, &eligible);
        assert_eq!(best(&both, &eligible), Some(2));
        // One eligible answer without a review: the reviews are left out altogether.
        let partial = [Some(-10.0), None, Some(-29.0), None];
        assert_eq!(ranks(&centrality, &partial, &eligible), alone);
        // No spread: nothing added, the first answer kept.
        let flat = ranks(&[0.4; 3], &[Some(-2.0); 3], &[true; 3]);
        assert_eq!((best(&flat, &[true; 3]), flat), (Some(0), vec![0.0; 3]));
    }

    #[test]
    fn the_reviewer_sees_the_code_without_the_docstring() {
        let target = Target::from_signature(
            "calc.py",
            "def total(a, b):\n    \"\"\"Sum of two numbers.\"\"\"\n",
        )
        .expect("target");
        let body = "\"\"\"Sum of two numbers.\"\"\"\n\nreturn a + b\n\n";
        let Prompt::Chat(messages) = review_prompt(&target, "", body) else {
            panic!("a chat prompt");
        };
        assert_eq!(messages.len(), 1);
        let want = "```python\ndef total(a, b):\n    return a + b\n```\n\nWrite the docstring";
        assert!(
            messages[0].content.starts_with(want),
            "{:?}",
            messages[0].content
        );
    }

    #[test]
    fn edit_distance_counts_token_edits() {
        assert_eq!(edit_distance(&["a", "b", "c"], &["a", "c"]), 1);
        assert_eq!(edit_distance(&["a", "b"], &["b", "a"]), 2);
        assert_eq!(edit_distance(&[], &["a"]), 1);
        assert_eq!(similarity(&[], &[]), 1.0);
    }
}
