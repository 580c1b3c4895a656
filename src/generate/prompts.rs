//! Every prompt template of the generation step, in one place so it can be read and tuned.

use super::usages::Usage;
use super::{postprocess, LocalContext, Target};
use crate::repo::Lang;

/// A function (or slice) shown to the model as context; `code` is dedented as a whole.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ContextSnippet {
    pub qualname: String,
    pub path: String,
    pub start_line: usize,
    pub code: String,
}

pub fn language_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "python",
        Lang::Java => "java",
    }
}

pub fn system(lang: Lang) -> String {
    format!(
        "You are an expert {} developer. You implement one function inside an existing \
         repository, using the repository's own helpers where they fit.",
        language_name(lang)
    )
}

/// The context section: each snippet headed by `path:line` and its name.
pub fn context_block(lang: Lang, snippets: &[ContextSnippet]) -> String {
    let comment = comment(lang);
    let mut out = String::new();
    for s in snippets {
        out.push_str(&headed(
            comment,
            &s.path,
            s.start_line,
            &s.qualname,
            &s.code,
        ));
        out.push('\n');
    }
    out
}

/// `code` under a comment line `path:line (label)`.
fn headed(comment: &str, path: &str, line: usize, label: &str, code: &str) -> String {
    format!("{comment} {path}:{line} ({label})\n{}\n", code.trim_end())
}

fn comment(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "#",
        Lang::Java => "//",
    }
}

/// Where the repository calls the target `name`: each excerpt headed by `path:line` and its
/// caller; empty without calls.
pub fn usages_section(lang: Lang, name: &str, usages: &[Usage]) -> String {
    if usages.is_empty() {
        return String::new();
    }
    let comment = comment(lang);
    let mut out = format!(
        "Where the repository calls `{name}` (what callers pass and expect back):\n\n```{}\n",
        language_name(lang)
    );
    for u in usages {
        let label = format!("in {}", u.caller);
        out.push_str(&headed(comment, &u.path, u.line, &label, &u.code));
    }
    out.push_str("```\n\n");
    out
}

/// The user turn asking for the target. `target` is its signature with the docstring; `local`
/// the target's own file with its place marked (see [`super::local`]); `usages` the section
/// [`usages_section`] writes.
pub fn generation_request(
    lang: Lang,
    path: &str,
    target: &str,
    context: &str,
    local: Option<&str>,
    usages: &str,
) -> String {
    let lang_name = language_name(lang);
    let mut out = String::new();
    if !context.is_empty() {
        out.push_str("Relevant code from elsewhere in the repository:\n\n```");
        out.push_str(lang_name);
        out.push('\n');
        out.push_str(context);
        out.push_str("```\n\n");
    }
    if let Some(local) = local.filter(|l| !l.trim().is_empty()) {
        out.push_str(&format!(
            "The file `{path}`, where the function goes (`{} ...` marks code left out). Use the \
             names it imports and defines:\n\n```{lang_name}\n{}```\n\n",
            comment(lang),
            local
        ));
    }
    out.push_str(usages);
    out.push_str(&format!(
        "Implement the following function from `{path}`. Reply with the complete function \
         (its signature and body) in one ```{lang_name} code block, and nothing else.\n\n\
         ```{lang_name}\n{}\n```",
        target.trim_end()
    ));
    out
}

/// The test writer's turn (`--select tests`): the target's file with its place marked, the
/// calls of it the file view does not show, the target's header and docstring, and a request
/// for `count` pytest functions `test_generated_1` … importing what they use from `module`.
pub fn test_request(target: &Target, module: &str, local: &LocalContext, count: usize) -> String {
    let names: Vec<String> = (1..=count)
        .map(|i| format!("`test_generated_{i}`"))
        .collect();
    let mut out = format!(
        "The file `{}` (module `{module}`), where the function below goes (`# ...` marks \
         code left out):\n\n```python\n{}```\n\n",
        target.path, local.text
    );
    out.push_str(&usages_section(Lang::Python, &target.name, &local.usages));
    out.push_str(&format!(
        "The function, not written yet:\n\n```python\n{}\n```\n\n\
         Write {count} short pytest test functions, {}, that check it does what its docstring \
         says. Import what you use from `{module}` at the top; build objects the way the file's \
         own code does (its constructors and arguments as shown). Each test: small concrete \
         inputs and at most three asserts of what the docstring promises; no fixtures, no \
         mocks, no files outside a temporary directory. Reply with one ```python code block.",
        target.prompt_text().trim_end(),
        names.join(", ")
    ));
    out
}

/// The repair turn after an answer failed its docstring's examples: doctest's `report` of
/// the examples that failed (see [`super::model_tests::examples_failures`]).
pub fn examples_repair(report: &str) -> String {
    format!(
        "Your function does not do what the examples in its docstring show. Running them \
         gives:\n\n```\n{}```\n\nRewrite the complete function so that every example of the \
         docstring gives the output it shows. Reply with one ```python code block.",
        report
    )
}

/// The reviewer's turn: an answer's `code` (ending with a newline), and the request whose
/// answer the target's documentation is scored as (see [`super::select::reviews`]).
pub fn review_request(lang: Lang, code: &str) -> String {
    let what = match lang {
        Lang::Python => "the docstring of this function",
        Lang::Java => "the Javadoc of this method",
    };
    format!(
        "```{}\n{code}```\n\nWrite {what}: what it does, its parameters and what it returns.",
        language_name(lang)
    )
}

/// The fill-in-the-middle prompt in Qwen2.5-Coder's repository layout: the retrieved snippets
/// as the files they come from (the most useful last, nearest the target), then the target's
/// file cut at its place, the prefix ending with the target's header and docstring. Snippets of
/// the target's own file are left out when `local` shows that file.
pub fn infill(
    target: &Target,
    repo: Option<&str>,
    context: &[ContextSnippet],
    local: Option<&LocalContext>,
) -> String {
    // Files in the order of their most useful snippet (its first), then turned around.
    let mut files: Vec<(&str, Vec<&ContextSnippet>)> = Vec::new();
    for s in context {
        if local.is_some() && s.path == target.path {
            continue;
        }
        match files.iter_mut().find(|(path, _)| *path == s.path) {
            Some((_, group)) => group.push(s),
            None => files.push((&s.path, vec![s])),
        }
    }
    files.reverse();
    let comment = comment(target.lang);
    let mut out = String::new();
    if let Some(repo) = repo {
        out.push_str(&format!("<|repo_name|>{repo}\n"));
    }
    for (path, mut group) in files {
        group.sort_by_key(|s| s.start_line);
        let code: Vec<&str> = group.iter().map(|s| s.code.trim_end()).collect();
        out.push_str(&format!(
            "<|file_sep|>{path}\n{comment} ...\n{}\n{comment} ...\n",
            code.join(&format!("\n\n{comment} ...\n\n"))
        ));
    }
    let (before, after) = local.map_or(("", ""), |l| l.around_target());
    out.push_str(&format!(
        "<|file_sep|>{}\n<|fim_prefix|>{before}{}<|fim_suffix|>{after}<|fim_middle|>",
        target.path,
        infill_header(target)
    ));
    out
}

/// The layout's markers, and its end of text: an infilled body ends at the first (a server may
/// send the non-special ones back as text; the local engine stops on them as tokens).
pub const INFILL_STOPS: [&str; 7] = [
    "<|file_sep|>",
    "<|repo_name|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|fim_pad|>",
    "<|endoftext|>",
];

/// The target's header and docstring at its place in the file, as an infilled body follows it.
pub fn infill_header(target: &Target) -> String {
    postprocess::indent(&target.prompt_text(), &" ".repeat(target.indent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snippet(path: &str, line: usize, code: &str) -> ContextSnippet {
        ContextSnippet {
            qualname: format!("{path}:{line}"),
            path: path.into(),
            start_line: line,
            code: code.into(),
        }
    }

    #[test]
    fn the_calls_of_the_target_come_after_its_file_and_before_the_request() {
        let usage = Usage {
            caller: "pkg.draw.paint".into(),
            path: "pkg/draw.py".into(),
            line: 5,
            code: "total = 0\ntotal += area(s)\n".into(),
            call_line: "total += area(s)".into(),
        };
        assert_eq!(usages_section(Lang::Python, "area", &[]), "");
        let section = usages_section(Lang::Python, "area", &[usage]);
        assert_eq!(
            section,
            "Where the repository calls `area` (what callers pass and expect back):\n\n\
             ```python\n# pkg/draw.py:5 (in pkg.draw.paint)\ntotal = 0\ntotal += area(s)\n```\n\n"
        );
        let turn = generation_request(
            Lang::Python,
            "pkg/shapes.py",
            "def area(s):",
            "",
            Some("# the file\n"),
            &section,
        );
        let pos = |s: &str| turn.find(s).unwrap();
        assert!(pos("# the file") < pos("Where the repository calls"));
        assert!(pos("Where the repository calls") < pos("Implement the following"));
    }

    #[test]
    fn an_infill_prompt_puts_the_best_file_last_and_the_target_header_before_the_hole() {
        let target = Target::from_signature(
            "pkg/shapes.py",
            "    def area(self):\n        \"\"\"The area.\"\"\"\n",
        )
        .unwrap();
        // Most useful first: b.py's snippet, then a.py's two (out of line order), then one of
        // the target's own file.
        let context = [
            snippet("pkg/b.py", 3, "def best():\n    pass\n"),
            snippet("pkg/a.py", 20, "def later():\n    pass\n"),
            snippet("pkg/shapes.py", 1, "def own():\n    pass\n"),
            snippet("pkg/a.py", 5, "def earlier():\n    pass\n"),
        ];
        let text = "class Shape:\n    # >>> `area` goes here (write it) <<<\n    def p(self):\n";
        let local = LocalContext {
            text: text.into(),
            marker: (13, 55),
            ..LocalContext::default()
        };
        let prompt = infill(&target, Some("proj"), &context, Some(&local));
        assert_eq!(
            prompt,
            "<|repo_name|>proj\n\
             <|file_sep|>pkg/a.py\n# ...\ndef earlier():\n    pass\n\n# ...\n\ndef later():\n    pass\n# ...\n\
             <|file_sep|>pkg/b.py\n# ...\ndef best():\n    pass\n# ...\n\
             <|file_sep|>pkg/shapes.py\n<|fim_prefix|>class Shape:\n    def area(self):\n        \
             \"\"\"\n        The area.\n        \"\"\"\n<|fim_suffix|>    def p(self):\n<|fim_middle|>"
        );
        // Without the file, its own snippets stay and the hole has nothing around it.
        let bare = infill(&target, None, &context[2..3], None);
        assert!(
            bare.starts_with("<|file_sep|>pkg/shapes.py\n# ...\ndef own():"),
            "{bare}"
        );
        assert!(bare.ends_with("<|fim_prefix|>    def area(self):\n        \"\"\"\n        The area.\n        \"\"\"\n<|fim_suffix|><|fim_middle|>"), "{bare}");
    }
}
