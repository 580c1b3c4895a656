//! From an LLM answer to the target function: find the code, keep the one definition of the
//! target, and re-indent it to where the target sits in its file.

use crate::repo::lang;
use crate::repo::Lang;

/// Where the generated function goes: its language, name, the signature as written in the file
/// (decorators and, for Python, the trailing `:` included) and the column of its header.
#[derive(Debug, Clone)]
pub struct TargetShape<'a> {
    pub lang: Lang,
    pub name: &'a str,
    pub signature: &'a str,
    pub indent: usize,
}

/// The generated function, indented for its place in the file, and its body alone (dedented).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Completion {
    pub function: String,
    pub body: String,
    /// How the body was found, for the trace.
    pub source: BodySource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BodySource {
    /// The answer defined the target; its body was kept and its header replaced by the target's.
    Definition,
    /// The answer held no definition of the target and was taken as the body itself.
    BareBody,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PostprocessError {
    #[error("the model's answer holds no code")]
    Empty,
}

/// Builds the target function from `answer`. A definition of the target (at any depth, e.g.
/// wrapped in a class) wins; otherwise the first code block is taken as the body.
pub fn complete_function(
    answer: &str,
    target: &TargetShape,
) -> Result<Completion, PostprocessError> {
    let blocks = code_blocks(answer);
    let found = blocks
        .iter()
        .find_map(|block| body_of_definition(block, target));
    let (body, source) = match found {
        Some(body) => (body, BodySource::Definition),
        None => {
            let block = blocks
                .iter()
                .find(|b| !b.trim().is_empty())
                .ok_or(PostprocessError::Empty)?;
            let body = match target.lang {
                Lang::Python => dedent(block),
                Lang::Java => java_bare_body(block),
            };
            (body, BodySource::BareBody)
        }
    };
    if body.trim().is_empty() {
        return Err(PostprocessError::Empty);
    }
    let function = assemble(target, &body);
    Ok(Completion {
        function,
        body,
        source,
    })
}

impl Completion {
    /// The same completion with `body` in place of its body.
    pub fn with_body(&self, target: &TargetShape, body: String) -> Completion {
        Completion {
            function: assemble(target, &body),
            body,
            source: self.source,
        }
    }
}

/// The fenced code blocks of an answer (an unterminated fence runs to the end), or the whole
/// answer when it has none. A block closes as in CommonMark: a line of at least as many
/// backticks and nothing else, indented at most three columns past the opening fence. A fence
/// inside the code (a docstring's ```` ```pycon ```` example, indented with its docstring) is
/// code.
pub fn code_blocks(answer: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    // The open block: its fence's indentation and backtick count, and its lines so far.
    let mut current: Option<(usize, usize, Vec<&str>)> = None;
    for line in answer.lines() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        let ticks = text.len() - text.trim_start_matches('`').len();
        match &mut current {
            None if ticks >= 3 => current = Some((indent, ticks, Vec::new())),
            None => {}
            Some((open_indent, open_ticks, lines)) => {
                if ticks >= *open_ticks
                    && indent <= *open_indent + 3
                    && text[ticks..].trim().is_empty()
                {
                    blocks.push(join_lines(lines));
                    current = None;
                } else {
                    lines.push(line);
                }
            }
        }
    }
    if let Some((_, _, lines)) = current {
        blocks.push(join_lines(&lines));
    }
    if blocks.is_empty() {
        blocks.push(answer.to_string());
    }
    blocks
}

fn join_lines(lines: &[&str]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// The body of the shallowest definition named like the target, dedented.
fn body_of_definition(block: &str, target: &TargetShape) -> Option<String> {
    let path = match target.lang {
        Lang::Python => "answer.py",
        Lang::Java => "Answer.java",
    };
    let front_end = lang::for_path(path)?;
    let symbols = front_end.parse(path, "answer", block);
    let def = symbols
        .functions
        .iter()
        .filter(|f| f.name == target.name)
        .min_by_key(|f| f.qualname.matches('.').count())?;
    let body = &def.body;
    match target.lang {
        Lang::Python => {
            // Whole lines from the body's first line keep the statements' relative indentation;
            // a one-line `def f(): return x` has its body on the header line.
            let line_start = block[..body.start_byte].rfind('\n').map_or(0, |i| i + 1);
            let start = if body.start_line == def.signature.end_line {
                body.start_byte
            } else {
                line_start
            };
            Some(dedent(block.get(start..body.end_byte)?))
        }
        Lang::Java => {
            let inner = block.get(body.start_byte..body.end_byte)?;
            let inner = inner.strip_prefix('{')?.strip_suffix('}')?;
            Some(dedent(inner.trim_start_matches('\n').trim_end()))
        }
    }
}

/// A Java answer without the method header: statements, possibly wrapped in braces.
fn java_bare_body(block: &str) -> String {
    let trimmed = block.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(trimmed);
    dedent(inner.trim_start_matches('\n').trim_end())
}

/// The target's header followed by the body, indented for the target's position.
fn assemble(target: &TargetShape, body: &str) -> String {
    let header = dedent(target.signature);
    let header = header.trim_end();
    let body_indent = " ".repeat(4);
    let mut out = String::new();
    out.push_str(header);
    match target.lang {
        Lang::Python => {
            out.push('\n');
            out.push_str(&indent(body, &body_indent));
        }
        Lang::Java => {
            let header = header.trim_end_matches('{').trim_end();
            out.clear();
            out.push_str(header);
            out.push_str(" {\n");
            out.push_str(&indent(body, &body_indent));
            out.push_str("}\n");
        }
    }
    indent(&out, &" ".repeat(target.indent))
}

/// Removes the indentation common to all non-blank lines; blank lines become empty.
pub fn dedent(text: &str) -> String {
    let common = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            out.push('\n');
        } else {
            out.push_str(line.get(common..).unwrap_or(line.trim_start()));
            out.push('\n');
        }
    }
    out
}

/// Prefixes every non-blank line with `prefix`.
pub fn indent(text: &str, prefix: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if !line.trim().is_empty() {
            out.push_str(prefix);
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py<'a>(signature: &'a str, indent: usize) -> TargetShape<'a> {
        TargetShape {
            lang: Lang::Python,
            name: "iteratepath",
            signature,
            indent,
        }
    }

    #[test]
    fn keeps_the_body_of_the_target_definition_and_the_target_header() {
        let answer = "Here you go:\n```python\nimport os\n\ndef helper():\n    return 1\n\ndef iteratepath(p):\n    \"\"\"Doc.\"\"\"\n    parts = normpath(p).split('/')\n    if parts:\n        return [x for x in parts if x]\n    return []\n```\nThat's it.";
        let c = complete_function(answer, &py("def iteratepath(path):", 0)).unwrap();
        assert_eq!(c.source, BodySource::Definition);
        assert_eq!(
            c.body,
            "\"\"\"Doc.\"\"\"\nparts = normpath(p).split('/')\nif parts:\n    return [x for x in parts if x]\nreturn []\n"
        );
        assert!(c
            .function
            .starts_with("def iteratepath(path):\n    \"\"\"Doc.\"\"\"\n"));
    }

    #[test]
    fn method_is_reindented_to_its_class() {
        let answer =
            "```python\nclass A:\n    def size(self):\n        return len(self.items)\n```";
        let target = TargetShape {
            lang: Lang::Python,
            name: "size",
            signature: "    @property\n    def size(self) -> int:",
            indent: 4,
        };
        let c = complete_function(answer, &target).unwrap();
        assert_eq!(c.body, "return len(self.items)\n");
        assert_eq!(
            c.function,
            "    @property\n    def size(self) -> int:\n        return len(self.items)\n"
        );
    }

    #[test]
    fn one_line_definition_and_bare_body() {
        let c = complete_function(
            "def iteratepath(p): return [p]",
            &py("def iteratepath(p):", 0),
        )
        .unwrap();
        assert_eq!(c.body, "return [p]\n");
        let bare =
            complete_function("```\n    x = 1\n    return x\n```", &py("def f():", 0)).unwrap();
        assert_eq!(bare.source, BodySource::BareBody);
        assert_eq!(bare.body, "x = 1\nreturn x\n");
    }

    /// humanize's docstrings hold ```` ```pycon ```` examples: the answer repeating one is still
    /// one function (it was "no code").
    #[test]
    fn a_docstring_with_a_fenced_example_keeps_the_function_whole() {
        let answer =
            "```python\ndef apnumber(value):\n    \"\"\"AP style.\n\n    Examples:\n      \
                      ```pycon\n      >>> apnumber(0)\n      'zero'\n\n      ```\n    \"\"\"\n    \
                      if value == 0:\n        return \"zero\"\n    return str(value)\n```";
        let target = TargetShape {
            name: "apnumber",
            ..py("def apnumber(value):", 0)
        };
        let c = complete_function(answer, &target).unwrap();
        assert_eq!(c.source, BodySource::Definition);
        assert_eq!(
            c.body,
            "\"\"\"AP style.\n\nExamples:\n  ```pycon\n  >>> apnumber(0)\n  'zero'\n\n  ```\n\"\"\"\n\
             if value == 0:\n    return \"zero\"\nreturn str(value)\n"
        );
    }

    #[test]
    fn empty_answers_are_errors() {
        assert_eq!(
            complete_function("  \n", &py("def f():", 0)),
            Err(PostprocessError::Empty)
        );
        assert_eq!(
            complete_function("```python\n```", &py("def f():", 0)),
            Err(PostprocessError::Empty)
        );
    }

    #[test]
    fn java_method_body_inside_braces() {
        let answer = "```java\nclass X {\n    int add(int a, int b) {\n        int s = a + b;\n        return s;\n    }\n}\n```";
        let target = TargetShape {
            lang: Lang::Java,
            name: "add",
            signature: "    public int add(int a, int b)",
            indent: 4,
        };
        let c = complete_function(answer, &target).unwrap();
        assert_eq!(c.body, "int s = a + b;\nreturn s;\n");
        assert_eq!(
            c.function,
            "    public int add(int a, int b) {\n        int s = a + b;\n        return s;\n    }\n"
        );
    }

    #[test]
    fn unterminated_fence_runs_to_the_end() {
        assert_eq!(code_blocks("x\n```py\na\nb"), vec!["a\nb\n".to_string()]);
        // A docstring's own fenced example stays in the code; a fence with an info string or
        // indented past the opening one does not close the block.
        let doc = "```python\ndef f():\n    \"\"\"Doc.\n\n    ```pycon\n    >>> f()\n    1\n    ```\n    \"\"\"\n    return 1\n```\ntext\n```\nsecond\n   ```\n";
        assert_eq!(
            code_blocks(doc),
            vec![
                "def f():\n    \"\"\"Doc.\n\n    ```pycon\n    >>> f()\n    1\n    ```\n    \"\"\"\n    return 1\n".to_string(),
                "second\n".to_string()
            ]
        );
        assert_eq!(
            code_blocks("````\na\n```\n````"),
            vec!["a\n```\n".to_string()]
        );
        assert_eq!(code_blocks("plain"), vec!["plain".to_string()]);
    }
}
