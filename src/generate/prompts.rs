//! Every prompt template of the generation step, in one place so it can be read and tuned.

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
        out.push_str(&format!(
            "{comment} {}:{} ({})\n{}\n\n",
            s.path,
            s.start_line,
            s.qualname,
            s.code.trim_end()
        ));
    }
    out
}

fn comment(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "#",
        Lang::Java => "//",
    }
}

/// The user turn asking for the target. `target` is its signature with the docstring; `local`
/// the target's own file with its place marked (see [`super::local`]).
pub fn generation_request(
    lang: Lang,
    path: &str,
    target: &str,
    context: &str,
    local: Option<&str>,
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
    out.push_str(&format!(
        "Implement the following function from `{path}`. Reply with the complete function \
         (its signature and body) in one ```{lang_name} code block, and nothing else.\n\n\
         ```{lang_name}\n{}\n```",
        target.trim_end()
    ));
    out
}
