//! What a lexer sees in a piece of code (strings, comments, code) without parsing it: enough to
//! cut a model's continuation after its first complete statement and to strip comments and
//! literals when scoring it.

use crate::repo::model::Lang;

/// What a lexer sees at each byte: code, inside a string, inside a comment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Code,
    Str,
    Comment,
}

/// Classifies each char of `s` (Python: `#` comments, '/" and triple-quoted strings with
/// escapes; Java: `//` and `/* */` comments, "..." and '...' literals).
pub fn classify(s: &str, lang: Lang) -> Vec<(usize, char, Class)> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut out = Vec::with_capacity(chars.len());
    let at = |i: usize, pat: &str| {
        pat.chars()
            .enumerate()
            .all(|(k, c)| chars.get(i + k).is_some_and(|&(_, x)| x == c))
    };
    let mut i = 0;
    while i < chars.len() {
        let (b, c) = chars[i];
        let push_run = |out: &mut Vec<_>, from: usize, to: usize, class| {
            for &(b, c) in &chars[from..to.min(chars.len())] {
                out.push((b, c, class));
            }
        };
        let line_comment = match lang {
            Lang::Python => c == '#',
            Lang::Java => at(i, "//"),
        };
        if line_comment {
            let end = (i..chars.len())
                .find(|&j| chars[j].1 == '\n')
                .unwrap_or(chars.len());
            push_run(&mut out, i, end, Class::Comment);
            i = end;
        } else if lang == Lang::Java && at(i, "/*") {
            let end = (i + 2..chars.len())
                .find(|&j| at(j, "*/"))
                .map_or(chars.len(), |j| j + 2);
            push_run(&mut out, i, end, Class::Comment);
            i = end;
        } else if c == '"' || c == '\'' {
            let triple = lang == Lang::Python && (at(i, "\"\"\"") || at(i, "'''"));
            let quote: String = if triple {
                c.to_string().repeat(3)
            } else {
                c.to_string()
            };
            let mut j = i + quote.len();
            while j < chars.len() {
                if chars[j].1 == '\\' {
                    j += 2;
                } else if at(j, &quote) {
                    j += quote.len();
                    break;
                } else if !triple && chars[j].1 == '\n' {
                    break;
                } else {
                    j += 1;
                }
            }
            push_run(&mut out, i, j, Class::Str);
            i = j;
        } else {
            out.push((b, c, Class::Code));
            i += 1;
        }
    }
    out
}

/// Whether `text`, the start of an answer, opens with a comment or a Markdown fence rather than
/// code: its first non-blank byte is a backtick, `#` (Python) or `/` (Java, which no statement
/// starts with). `false` while `text` is blank.
pub fn opens_aside(text: &[u8], lang: Lang) -> bool {
    match text.trim_ascii_start().first() {
        Some(b'`') => true,
        Some(b'#') => lang == Lang::Python,
        Some(b'/') => lang == Lang::Java,
        _ => false,
    }
}

/// The prediction up to the end of its first complete statement (Python: a logical line with
/// balanced brackets; Java: through the first `;`, `{` or `}` outside brackets).
pub fn first_statement(s: &str, lang: Lang) -> &str {
    let mut depth = 0i32;
    let mut seen_code = false;
    let mut prev_code = ' ';
    for (b, c, class) in classify(s, lang) {
        if class == Class::Comment {
            continue;
        }
        if class == Class::Str {
            seen_code = true;
            continue;
        }
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        match lang {
            Lang::Python => {
                if c == '\n' && depth <= 0 && seen_code && prev_code != '\\' {
                    return &s[..b];
                }
            }
            Lang::Java => {
                // `) {`, `else {`, `class X {` open a block; `= {1, 2}` is an initializer.
                let opens_block = c == '{'
                    && depth == 1
                    && (prev_code == ')' || prev_code.is_alphanumeric() || prev_code == '_');
                // A `}` below depth 0 closes the enclosing block: nothing of the statement is left.
                if (c == ';' && depth <= 0) || opens_block || (c == '}' && depth < 0) {
                    return &s[..b + 1];
                }
            }
        }
        if !c.is_whitespace() {
            seen_code = true;
        }
        if c != ' ' && c != '\t' {
            prev_code = c;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use Lang::*;

    #[test]
    fn asides_are_comments_and_fences_after_blanks() {
        assert!(opens_aside(b"\n    # the below fragment", Python));
        assert!(opens_aside(b"```", Python));
        assert!(opens_aside(b"  //", Java));
        assert!(opens_aside(b"/", Java));
        assert!(!opens_aside(b"    return x  # done", Python));
        assert!(!opens_aside(b"/ 2", Python));
        assert!(!opens_aside(b"#", Java));
        assert!(!opens_aside(b" \n\t", Python));
    }

    #[test]
    fn first_statement_respects_brackets_strings_and_comments() {
        assert_eq!(
            first_statement("foo(a,\n    b)\nbar()", Python),
            "foo(a,\n    b)"
        );
        assert_eq!(
            first_statement("\n# c\nx = '(\\n'\ny", Python),
            "\n# c\nx = '(\\n'"
        );
        assert_eq!(
            first_statement("x = 1 + \\\n  2\ny", Python),
            "x = 1 + \\\n  2"
        );
        assert_eq!(
            first_statement("s = \"\"\"a\nb\"\"\"\nz", Python),
            "s = \"\"\"a\nb\"\"\""
        );
        assert_eq!(
            first_statement("for (int i = 0; i < n; i++) {\n x();\n}", Java),
            "for (int i = 0; i < n; i++) {"
        );
        assert_eq!(first_statement("only", Python), "only");
        assert_eq!(
            first_statement("int[] a = {1, 2}; f();", Java),
            "int[] a = {1, 2};"
        );
        assert_eq!(first_statement("} else {\n y();", Java), "}");
    }
}
