//! Python string literals read from source text without parsing: where one ends, and the
//! docstring a function body opens with.

/// The byte after the string literal whose opening quote is at `start` (triple quotes
/// included; a single-quoted one also ends at a newline); `None` when it never closes.
/// Java's strings, characters and text blocks end the same way. Compares bytes: inside a
/// literal, `i` may stop within a multi-byte character.
pub fn string_end(code: &str, start: usize) -> Option<usize> {
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
            return Some(i + closing.len());
        } else if closing.len() == 1 && bytes[i] == b'\n' {
            return Some(i);
        } else {
            i += 1;
        }
    }
    None
}

/// The byte after the string literal that `body` opens with (after blank space, with at most
/// two prefix letters such as `r` or `rb`); `None` when it opens with anything else or the
/// literal never closes.
pub fn leading_string_end(body: &str) -> Option<usize> {
    let start = body.len() - body.trim_start().len();
    let bytes = body.as_bytes();
    let prefix = bytes[start..]
        .iter()
        .take(3)
        .take_while(|c| matches!(c.to_ascii_lowercase(), b'r' | b'u' | b'b' | b'f'))
        .count();
    let open = start + prefix;
    if prefix > 2 || !matches!(bytes.get(open), Some(b'"' | b'\'')) {
        return None;
    }
    string_end(body, open)
}

/// Whether `body` is a docstring and nothing else (blank lines, comments, a `;`).
pub fn only_docstring(body: &str) -> bool {
    leading_string_end(body).is_some_and(|end| {
        body[end..].lines().all(|l| {
            let l = l.trim().trim_start_matches(';').trim();
            l.is_empty() || l.starts_with('#')
        })
    })
}

/// The docstring literal `body` opens with, prefix and quotes included.
pub fn leading_docstring(body: &str) -> Option<&str> {
    leading_string_end(body).map(|end| body[..end].trim_start())
}

/// `body` without the docstring it opens with (and the rest of that line); `body` itself
/// when it opens with none.
pub fn without_docstring(body: &str) -> &str {
    let Some(end) = leading_string_end(body) else {
        return body;
    };
    match body[end..].find('\n') {
        Some(n) => &body[end + n + 1..],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_opens_with_a_docstring() {
        assert!(only_docstring("\"\"\"Doc.\"\"\""));
        assert!(only_docstring("r'''Doc \\''' still'''\n    # todo\n"));
        assert!(only_docstring("\"one line\";"));
        assert!(!only_docstring("\"\"\"Doc.\"\"\"\n    return 1"));
        assert!(!only_docstring("return 1"));
        assert!(!only_docstring("\"unterminated"));
        assert!(!only_docstring("x = 'a'"));
        let body = "\"\"\"Sum.\n\nMore.\"\"\"\n# keep\nreturn a + b\n";
        assert_eq!(without_docstring(body), "# keep\nreturn a + b\n");
        assert_eq!(without_docstring("  r'''Raw.''' \nreturn 1"), "return 1");
        assert_eq!(without_docstring("return 'x'\n"), "return 'x'\n");
        assert_eq!(without_docstring("\"\"\"Only a docstring.\"\"\""), "");
        assert_eq!(string_end("'a\\'b' + c", 0), Some(6));
        assert_eq!(string_end("'''a\n'b'''", 0), Some(10));
        assert_eq!(string_end("'''never", 0), None);
    }
}
