//! Where a target's body lives in its file, and replacing it the way DevEval does.

use super::tasks::FunctionTask;
use super::EvalError;

/// The body of a target in the current file text: 1-based inclusive lines and indentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodySpan {
    pub start_line: usize,
    pub end_line: usize,
    pub indent: usize,
}

/// Locates the body by the task's recorded line ranges, checking that they still describe the
/// target (the signature lines hold `def <name>`) so shifted files are caught, not corrupted.
pub fn locate(task: &FunctionTask, file_text: &str) -> Result<BodySpan, EvalError> {
    let (Some([s0, s1]), Some([b0, b1])) = (task.signature_position, task.body_position) else {
        return Err(EvalError::task(
            &task.namespace,
            format!("no recorded line positions in {}", task.completion_path),
        ));
    };
    let lines: Vec<&str> = file_text.lines().collect();
    let mismatch = |why: String| {
        EvalError::task(
            &task.namespace,
            format!(
                "positions don't match {}: {why} (the file differs from the one the task was recorded on; check out the recorded commit)",
                task.completion_path
            ),
        )
    };
    if s1 > lines.len() || b1 > lines.len() {
        return Err(mismatch(format!(
            "the file has {} lines, the task names lines up to {}",
            lines.len(),
            s1.max(b1)
        )));
    }
    if b0 <= s1 {
        return Err(mismatch(format!(
            "body [{b0}, {b1}] starts inside the signature [{s0}, {s1}]"
        )));
    }
    let def = format!("def {}", task.name());
    let holds_def = lines[s0 - 1..s1].iter().any(|l| {
        l.find(&def).is_some_and(|at| {
            let after = l[at + def.len()..].chars().next();
            matches!(after, Some('(') | Some(' ') | Some('['))
        })
    });
    if !holds_def {
        return Err(mismatch(format!(
            "lines [{s0}, {s1}] do not define `{def}`"
        )));
    }
    let indent = task
        .indent
        .unwrap_or_else(|| leading_spaces(lines[b0 - 1..b1].iter().copied()));
    Ok(BodySpan {
        start_line: b0,
        end_line: b1,
        indent,
    })
}

/// The body as it stands in the file: the DevEval reference completion.
pub fn body_text(file_text: &str, span: BodySpan) -> String {
    let mut out = String::new();
    for l in file_text
        .lines()
        .skip(span.start_line - 1)
        .take(span.end_line + 1 - span.start_line)
    {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// A body that does nothing (empty, comments, or only `pass`) fails without running tests.
pub fn is_trivial(completion: &str) -> bool {
    completion
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .all(|l| l == "pass")
}

/// DevEval's splice: the completion dedented then indented to `span.indent` spaces replaces the
/// body lines, with a blank line before and after.
pub fn splice(file_text: &str, span: BodySpan, completion: &str) -> String {
    let mut out = String::with_capacity(file_text.len() + completion.len());
    let mut lines = file_text.split_inclusive('\n');
    for l in lines.by_ref().take(span.start_line - 1) {
        out.push_str(l);
    }
    out.push('\n');
    out.push_str(&reindent(completion, span.indent));
    out.push('\n');
    for l in lines.skip(span.end_line + 1 - span.start_line) {
        out.push_str(l);
    }
    out
}

/// `textwrap.indent(textwrap.dedent(code), ' ' * indent)`, ending with a newline.
pub fn reindent(code: &str, indent: usize) -> String {
    let margin = common_margin(code);
    let pad = " ".repeat(indent);
    let mut out = String::with_capacity(code.len() + indent * 8);
    for l in code.lines() {
        if l.trim().is_empty() {
            out.push('\n');
            continue;
        }
        out.push_str(&pad);
        out.push_str(&l[margin.len()..]);
        out.push('\n');
    }
    out
}

/// The longest prefix of spaces and tabs shared by all non-blank lines (tabs and spaces
/// distinct), as `textwrap.dedent` counts it: other whitespace is text. (Being ASCII, the
/// margin can be cut at any byte.)
fn common_margin(code: &str) -> &str {
    let mut margin: Option<&str> = None;
    for l in code.lines().filter(|l| !l.trim().is_empty()) {
        let ws = &l[..l.len() - l.trim_start_matches([' ', '\t']).len()];
        margin = Some(match margin {
            None => ws,
            Some(m) => {
                let n = m
                    .bytes()
                    .zip(ws.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                &m[..n]
            }
        });
    }
    margin.unwrap_or("")
}

fn leading_spaces<'a>(lines: impl Iterator<Item = &'a str>) -> usize {
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "import os\n\ndef f(x):\n    \"\"\"Doc.\"\"\"\n    y = x + 1\n    return y\n\ndef g():\n    return 2\n";

    fn task(sig: [usize; 2], body: [usize; 2], ns: &str) -> FunctionTask {
        FunctionTask {
            namespace: ns.into(),
            kind: None,
            project_path: "p".into(),
            completion_path: "p/m.py".into(),
            signature_position: Some(sig),
            body_position: Some(body),
            dependency: Default::default(),
            requirement: None,
            tests: vec!["t".into()],
            indent: Some(4),
        }
    }

    #[test]
    fn locates_checks_and_splices() {
        let span = locate(&task([3, 3], [5, 6], "m.f"), FILE).unwrap();
        assert_eq!(body_text(FILE, span), "    y = x + 1\n    return y\n");
        let out = splice(FILE, span, "if x:\n    return 0\nreturn 1");
        assert_eq!(
            out,
            "import os\n\ndef f(x):\n    \"\"\"Doc.\"\"\"\n\n    if x:\n        return 0\n    return 1\n\n\ndef g():\n    return 2\n"
        );
        // Shifted positions and wrong names are refused, not spliced.
        let e = locate(&task([2, 2], [5, 6], "m.f"), FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("positions don't match p/m.py"), "{e}");
        let e = locate(&task([3, 3], [5, 6], "m.ff"), FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not define `def ff`"), "{e}");
        let e = locate(&task([3, 3], [5, 60], "m.f"), FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the file has 9 lines"), "{e}");
    }

    #[test]
    fn reindent_is_textwrap_dedent_then_indent() {
        assert_eq!(
            reindent("        a\n\n          b\n", 4),
            "    a\n\n      b\n"
        );
        assert_eq!(reindent("\ta\n\tb", 8), "        a\n        b\n");
        assert_eq!(reindent("  a\n\tb", 2), "    a\n  \tb\n");
    }

    #[test]
    fn trivial_bodies() {
        assert!(is_trivial("    pass\n"));
        assert!(is_trivial("\n  # todo\n  pass\n"));
        assert!(is_trivial(""));
        assert!(!is_trivial("    return None\n"));
        assert!(!is_trivial("pass\nreturn 1"));
    }
}
