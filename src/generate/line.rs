//! The line-completion prompt (SaraCoder 3.4): `similar snippets ⊕ external symbols ⊕
//! unfinished code`. Retrieved text goes in as comments of the file's language, GraphCoder
//! style, so that the model's natural continuation is the next line of the unfinished code.
//! Snippets come in ascending relevance (the most relevant nearest the cursor), each headed by
//! its path. Within the token budget the unfinished code takes at most half (its last lines);
//! the external symbols come next, within a quarter of the budget (the last imports' entities
//! go first), then as many snippets as fit, the most relevant first.

use serde::Serialize;

use crate::repo::model::Lang;
use crate::retrieve::saracoder::eaid::Eaid;
use crate::retrieve::saracoder::Pick;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinePrompt {
    pub text: String,
    pub snippets_shown: usize,
    pub snippets_dropped: usize,
    /// Lines of the unfinished code shown, of how many.
    pub context_lines: usize,
    pub context_total_lines: usize,
    /// Byte offset in `text` where the unfinished code begins: what comes before it was
    /// retrieved.
    pub context_offset: usize,
    pub external_shown: bool,
    /// Imported entities and external names left out to keep them within their share.
    pub external_dropped: usize,
}

fn comment_marker(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "#",
        Lang::Java => "//",
    }
}

/// `text` with every line commented out.
fn commented(text: &str, lang: Lang) -> String {
    let mark = comment_marker(lang);
    text.lines()
        .map(|l| {
            if l.is_empty() {
                format!("{mark}\n")
            } else {
                format!("{mark} {l}\n")
            }
        })
        .collect()
}

fn snippet_block(p: &Pick, lang: Lang) -> String {
    let mark = comment_marker(lang);
    let rule = format!("{mark} {}\n", "-".repeat(50));
    format!(
        "{rule}{mark} the below code fragment can be found in:\n{mark} {}\n{rule}{}",
        p.path,
        commented(&p.text, lang)
    )
}

/// Builds the prompt from `picks` (most relevant first), the external symbols and the
/// unfinished code, counting tokens with `count`.
pub fn line_prompt(
    picks: &[Pick],
    external: &Eaid,
    unfinished: &str,
    lang: Lang,
    budget: usize,
    count: &dyn Fn(&str) -> usize,
) -> LinePrompt {
    // The unfinished code: its last lines within half the budget.
    let lines: Vec<&str> = unfinished.split_inclusive('\n').collect();
    let mut start = lines.len();
    let mut used = 0;
    while start > 0 {
        let n = count(lines[start - 1]);
        if used + n > budget / 2 {
            break;
        }
        used += n;
        start -= 1;
    }
    let context: String = lines[start..].concat();

    let mut left = budget.saturating_sub(used);
    // The external symbols within their share: entities of the last imports go first, then
    // names of the table.
    let share = left.min(budget / 4);
    let mut shown_external = external.clone();
    let mut external_dropped = 0;
    let eaid = loop {
        let text = commented(&shown_external.render(), lang);
        if text.is_empty() || count(&text) <= share {
            break text;
        }
        if shown_external.entities.pop().is_none() && shown_external.external.pop().is_none() {
            break String::new();
        }
        external_dropped += 1;
    };
    let external_shown = !eaid.is_empty();
    if external_shown {
        left -= count(&eaid);
    }
    let mut shown: Vec<String> = Vec::new();
    for p in picks {
        let block = snippet_block(p, lang);
        let n = count(&block);
        if n > left {
            break;
        }
        left -= n;
        shown.push(block);
    }
    let mut text = String::new();
    if !shown.is_empty() {
        text.push_str(&format!(
            "{} Here are some relevant code fragments from other files of the repo:\n",
            comment_marker(lang)
        ));
    }
    for block in shown.iter().rev() {
        text.push_str(block);
    }
    if external_shown {
        text.push_str(&eaid);
    }
    let context_offset = text.len();
    text.push_str(&context);
    LinePrompt {
        text,
        context_offset,
        snippets_shown: shown.len(),
        snippets_dropped: picks.len() - shown.len(),
        context_lines: lines.len() - start,
        context_total_lines: lines.len(),
        external_shown,
        external_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieve::saracoder::eaid::{Entity, External};

    fn pick(path: &str, text: &str, score: f64) -> Pick {
        Pick {
            path: path.into(),
            start_line: 1,
            end_line: 2,
            text: text.into(),
            jaccard: score,
            cosine: None,
            dsed: None,
            score,
        }
    }

    /// One token per whitespace-separated word: enough to check the budget arithmetic.
    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    #[test]
    fn snippets_ascend_to_the_cursor_and_the_budget_cuts_the_least_relevant() {
        let picks = [
            pick("a.py", "best = 1", 0.9),
            pick("b.py", "second = 2", 0.5),
        ];
        let eaid = Eaid {
            entities: Vec::new(),
            external: vec![External {
                canonical: "numpy".into(),
                alias: "np".into(),
            }],
        };
        let unfinished = "import numpy as np\nx = np.";
        let p = line_prompt(&picks, &eaid, unfinished, Lang::Python, 200, &words);
        assert_eq!(p.snippets_shown, 2);
        assert!(p.external_shown);
        let second = p.text.find("# second = 2").unwrap();
        let best = p.text.find("# best = 1").unwrap();
        let ext = p.text.find("# #   np -> numpy").unwrap();
        assert!(second < best && best < ext, "{}", p.text);
        assert!(p.text.ends_with(unfinished));
        assert_eq!(&p.text[p.context_offset..], unfinished);
        assert!(p
            .text
            .contains("# the below code fragment can be found in:\n# a.py\n"));

        // Room for the code, the external names and one snippet: the more relevant one stays.
        let one = words(&snippet_block(&picks[0], Lang::Python));
        let ext_words = words(&commented(&eaid.render(), Lang::Python));
        let budget = 2 * words(unfinished) + ext_words + one;
        let p = line_prompt(&picks, &eaid, unfinished, Lang::Python, budget, &words);
        assert_eq!((p.snippets_shown, p.snippets_dropped), (1, 1));
        assert!(p.text.contains("best = 1") && !p.text.contains("second = 2"));
        assert!(words(&p.text) <= budget + 10, "header line only");
    }

    #[test]
    fn the_external_symbols_keep_to_a_quarter_of_the_budget() {
        let entity = |name: &str| Entity {
            qualname: name.into(),
            kind: "function",
            path: "lib.py".into(),
            text: format!("def {name}(a, b, c):\n    return a + b + c"),
        };
        let eaid = Eaid {
            entities: vec![entity("first"), entity("second"), entity("third")],
            external: Vec::new(),
        };
        let all = words(&commented(&eaid.render(), Lang::Python));
        let p = line_prompt(&[], &eaid, "x = ", Lang::Python, 4 * all, &words);
        assert_eq!((p.external_shown, p.external_dropped), (true, 0));
        // A quarter of the budget holds two of the three: the last import's entity goes.
        let p = line_prompt(&[], &eaid, "x = ", Lang::Python, 4 * (all - 1), &words);
        assert_eq!((p.external_shown, p.external_dropped), (true, 1));
        assert!(p.text.contains("def second") && !p.text.contains("def third"));
        let p = line_prompt(&[], &eaid, "x = ", Lang::Python, 8, &words);
        assert_eq!((p.external_shown, p.external_dropped), (false, 3));
        assert_eq!(p.text, "x = ");
        assert_eq!(p.context_offset, 0);
    }

    #[test]
    fn the_unfinished_code_keeps_its_last_lines_within_half_the_budget() {
        let unfinished = "a = 1\nb = 2\nc = 3\nd = ";
        let p = line_prompt(&[], &Eaid::default(), unfinished, Lang::Java, 8, &words);
        // 3 + 3 + 3 + 2 words: half the budget (4) holds only the last line.
        assert_eq!((p.context_lines, p.context_total_lines), (1, 4));
        assert_eq!(p.text, "d = ");
        let p = line_prompt(&[], &Eaid::default(), unfinished, Lang::Java, 100, &words);
        assert_eq!(p.text, unfinished);
        assert!(!p.external_shown);
        assert_eq!(commented("x\n\ny", Lang::Java), "// x\n//\n// y\n");
    }
}
