//! Every prompt template of the generation step, in one place so it can be read and tuned.

use crate::repo::Lang;

/// A function shown to the model as context.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ContextSnippet {
    pub qualname: String,
    pub path: String,
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

/// The context section: each snippet headed by its file and name.
pub fn context_block(snippets: &[ContextSnippet]) -> String {
    let mut out = String::new();
    for s in snippets {
        out.push_str(&format!(
            "# {} ({})\n{}\n",
            s.path,
            s.qualname,
            s.code.trim_end()
        ));
        out.push('\n');
    }
    out
}

/// The user turn asking for the target. `target` is its signature with the docstring.
pub fn generation_request(lang: Lang, path: &str, target: &str, context: &str) -> String {
    let lang_name = language_name(lang);
    let mut out = String::new();
    if !context.is_empty() {
        out.push_str("Relevant code from the repository:\n\n```");
        out.push_str(lang_name);
        out.push('\n');
        out.push_str(context);
        out.push_str("```\n\n");
    }
    out.push_str(&format!(
        "Implement the following function from `{path}`. Reply with the complete function \
         (its signature and body) in one ```{lang_name} code block, and nothing else.\n\n\
         ```{lang_name}\n{}\n```",
        target.trim_end()
    ));
    out
}
