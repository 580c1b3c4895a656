//! The generation step: the prompt within a token budget (the target's own file, then retrieved
//! context), the model's answer (and, when asked, a repair round or another sampled answer in the
//! same conversation), post-processing into the target function.

pub mod complete;
pub mod grounding;
pub mod line;
pub mod local;
pub mod model_tests;
pub mod pipeline;
pub mod postprocess;
pub mod prompts;
pub mod select;
pub mod session;
pub mod usages;
pub mod vectors;

pub use local::{LocalContext, LocalView};
pub use postprocess::{complete_function, BodySource, Completion, PostprocessError, TargetShape};
pub use prompts::ContextSnippet;

use crate::llm::{GenerateRequest, GenerateResponse, Llm, LlmError, Message, Prompt, Sampling};
use crate::repo::{lang, FnId, Lang, Repository};

/// What is asked for: the target's header as written in its file and its docstring.
#[derive(Debug, Clone)]
pub struct Target {
    pub lang: Lang,
    pub name: String,
    /// Repository-relative path of the file the function belongs to.
    pub path: String,
    /// Decorators/annotations and header, as in the file (with its indentation).
    pub signature: String,
    /// The specification shown to the model (docstring or Javadoc text).
    pub docstring: Option<String>,
    /// The docstring as written (a Python literal, a Javadoc comment): what `--write` keeps.
    pub docstring_literal: Option<String>,
    /// Column of the header in its file.
    pub indent: usize,
}

impl Target {
    /// The target for a function of `repo`: its header with the original indentation, and its
    /// docstring as the specification.
    pub fn of(repo: &Repository, id: FnId) -> Result<Target, GenerateError> {
        let f = repo.function(id);
        let file = repo.function_file(id);
        let symbols = repo.file_symbols(file);
        let (Some(text), Some(lang)) = (
            repo.file(file).text.as_deref(),
            symbols.and_then(|s| s.lang),
        ) else {
            return Err(GenerateError::NotSource(f.path.clone()));
        };
        let line_start = text[..f.signature.start_byte]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let indent = f.signature.start_byte - line_start;
        Ok(Target {
            lang,
            name: f.name.clone(),
            path: f.path.clone(),
            signature: format!("{}{}", " ".repeat(indent), repo.signature_text(id)),
            docstring: f.docstring.clone(),
            docstring_literal: f.docstring_literal(text).map(str::to_string),
            indent,
        })
    }

    /// A new function for the file at `path` (repository-relative), from a signature written by
    /// hand: a Python header with an optional docstring (a body is optional), or a Java method
    /// header with an optional Javadoc (it belongs in a class, so it is nested at least one level).
    pub fn from_signature(path: &str, text: &str) -> Result<Target, GenerateError> {
        let front_end =
            lang::for_path(path).ok_or_else(|| GenerateError::NotSource(path.into()))?;
        let lang = front_end.lang();
        let text = text.trim_end();
        let first_indent: String = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_whitespace())
            .collect();
        // What the front end gets: the text as is, or with the minimal body it lacks.
        let sources = match lang {
            Lang::Python => vec![
                format!(
                    "{text}
"
                ),
                format!(
                    "{text}
{first_indent}    pass
"
                ),
            ],
            Lang::Java => {
                let body = if text.ends_with('}') || text.ends_with(';') {
                    text.to_string()
                } else {
                    format!("{text} {{}}")
                };
                vec![format!("class RepohopSignature {{\n{body}\n}}\n")]
            }
        };
        for source in sources {
            let symbols = front_end.parse(path, "", &source);
            let Some(f) = symbols.functions.first() else {
                continue;
            };
            let line_start = source[..f.signature.start_byte]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            let indent = f.signature.start_byte - line_start;
            let header = &source[f.signature.start_byte..f.signature.end_byte];
            let indent = match lang {
                Lang::Java => indent.max(4),
                Lang::Python => indent,
            };
            return Ok(Target {
                lang,
                name: f.name.clone(),
                path: path.to_string(),
                signature: format!("{}{header}", " ".repeat(indent)),
                docstring: f.docstring.clone(),
                docstring_literal: f.docstring_literal(&source).map(str::to_string),
                indent,
            });
        }
        Err(GenerateError::BadSignature(path.to_string()))
    }

    /// The signature with its docstring, as the model sees it (the papers' "signature").
    pub fn prompt_text(&self) -> String {
        let header = postprocess::dedent(&self.signature);
        let header = header.trim_end();
        let Some(doc) = self.docstring.as_deref().filter(|d| !d.trim().is_empty()) else {
            return header.to_string();
        };
        match self.lang {
            Lang::Python => {
                let doc = postprocess::indent(doc.trim_end(), "    ");
                format!("{header}\n    \"\"\"\n{doc}    \"\"\"")
            }
            Lang::Java => {
                let doc: String = doc.lines().map(|l| format!(" * {l}\n")).collect();
                format!("/**\n{doc} */\n{header}")
            }
        }
    }

    pub fn shape(&self) -> TargetShape<'_> {
        TargetShape {
            lang: self.lang,
            name: &self.name,
            signature: &self.signature,
            indent: self.indent,
        }
    }
}

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most prompt tokens; context snippets that don't fit are dropped (and reported), then
    /// the local view is shrunk.
    pub prompt_budget: usize,
    /// Most tokens of the target's own file (the local view), when one is given.
    pub local_budget: usize,
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    pub format: PromptFormat,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            prompt_budget: 6144,
            local_budget: 2048,
            max_new_tokens: MAX_NEW_TOKENS,
            sampling: Sampling::Greedy,
            format: PromptFormat::default(),
        }
    }
}

/// How the generation prompt is laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PromptFormat {
    /// A chat turn (retrieved code, the target's file, the request); the model answers with
    /// the whole function.
    #[default]
    Chat,
    /// Fill-in-the-middle in the model's repository layout: retrieved code as other files,
    /// then the target's file around its header and docstring; the model writes the body.
    /// Python only (Java is asked in chat).
    Infill,
}

impl PromptFormat {
    pub fn name(self) -> &'static str {
        match self {
            PromptFormat::Chat => "chat",
            PromptFormat::Infill => "infill",
        }
    }
}

/// Most answer tokens by default: DevEval's longest reference functions run past 512.
pub const MAX_NEW_TOKENS: usize = 1024;

/// Characters per token assumed when sizing the local view (code with Qwen's tokenizer runs
/// 3–4; the whole prompt is then counted exactly).
const CHARS_PER_TOKEN: usize = 3;

/// The result of the generation step, with everything needed to inspect it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Generation {
    pub completion: Completion,
    pub prompt: String,
    pub format: PromptFormat,
    /// Context snippets left out to stay within the budget (qualified names).
    pub dropped: Vec<String>,
    /// The target's file as the prompt showed it.
    pub local: Option<LocalContext>,
    pub raw_answer: String,
    pub response: GenerateResponse,
    /// The request that produced the answer (for a repair round or another sample).
    #[serde(skip)]
    pub request: GenerateRequest,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("the target alone ({tokens} tokens) exceeds the prompt budget of {budget} tokens")]
    TargetTooLong { tokens: usize, budget: usize },
    #[error("{0} is not a parsed source file")]
    NotSource(String),
    #[error("the signature for {0} has no function definition")]
    BadSignature(String),
    #[error("a repair round needs a chat prompt")]
    NoConversation,
    #[error("{0} (raw answer: {1:?})")]
    Postprocess(PostprocessError, String),
}

/// Generates the target with its file's `local` view and `context` (most useful first). When
/// the prompt is over budget, snippets are dropped from the end, then the local view halved.
pub fn generate(
    llm: &mut dyn Llm,
    target: &Target,
    local: Option<&LocalView>,
    context: &[ContextSnippet],
    options: &GenerateOptions,
) -> Result<Generation, GenerateError> {
    let format = match (options.format, target.lang) {
        // Java's body ends at a brace, not at an indentation: it is asked for in chat.
        (PromptFormat::Infill, Lang::Python) => PromptFormat::Infill,
        _ => PromptFormat::Chat,
    };
    let target_text = target.prompt_text();
    let mut kept = context.len();
    let mut local_chars = options.local_budget * CHARS_PER_TOKEN;
    let (prompt, shown) = loop {
        // The infill layout has no place for the calls of the target: its file view keeps
        // the whole budget.
        let shown = local.filter(|_| local_chars > 0).map(|l| match format {
            PromptFormat::Chat => l.render(local_chars),
            PromptFormat::Infill => l.render_file(local_chars),
        });
        let prompt = match format {
            PromptFormat::Chat => {
                let block = prompts::context_block(target.lang, &context[..kept]);
                let usages = shown.as_ref().map_or(String::new(), |l| {
                    prompts::usages_section(target.lang, &target.name, &l.usages)
                });
                let user = prompts::generation_request(
                    target.lang,
                    &target.path,
                    &target_text,
                    &block,
                    shown.as_ref().map(|l| l.text.as_str()),
                    &usages,
                );
                Prompt::Chat(vec![
                    Message::system(prompts::system(target.lang)),
                    Message::user(user),
                ])
            }
            PromptFormat::Infill => Prompt::Text(prompts::infill(
                target,
                local.map(|l| l.repo_name()),
                &context[..kept],
                shown.as_ref(),
            )),
        };
        let tokens = llm.count_tokens(&prompt)?;
        if tokens <= options.prompt_budget {
            break (prompt, shown);
        }
        if kept > 0 {
            kept -= 1;
        } else if shown.is_some() {
            local_chars /= 2;
            if local_chars < 200 {
                local_chars = 0;
            }
        } else {
            return Err(GenerateError::TargetTooLong {
                tokens,
                budget: options.prompt_budget,
            });
        }
    };
    let dropped = context[kept..].iter().map(|s| s.qualname.clone()).collect();
    let mut request = GenerateRequest::new(prompt);
    request.max_new_tokens = options.max_new_tokens;
    request.sampling = options.sampling;
    if format == PromptFormat::Infill {
        request.until_dedent = Some(target.indent);
        request.stop = prompts::INFILL_STOPS.map(String::from).to_vec();
    }
    let response = llm.generate(&request)?;
    finish(target, format, request, dropped, shown, response)
}

/// Another answer to `first`'s prompt: a repair round (its answer, then `request`, what was
/// wrong with it: the model answers again in full; chat prompts only), or a sample drawn with
/// `sampling` (a candidate for the names check).
#[derive(Debug, Clone)]
pub enum Retry {
    Repair(String),
    Sample(Sampling),
}

/// The answers to `retries` of `first`, in order, decoded together (one pass over the weights
/// serves them all; the shared prompt is computed once).
pub fn retry(
    llm: &mut dyn Llm,
    target: &Target,
    first: &Generation,
    retries: &[Retry],
) -> Vec<Result<Generation, GenerateError>> {
    let requests: Vec<Result<GenerateRequest, GenerateError>> = retries
        .iter()
        .map(|r| {
            let mut request = first.request.clone();
            match (r, &mut request.prompt) {
                (Retry::Repair(text), Prompt::Chat(messages)) => {
                    messages.push(Message::assistant(first.raw_answer.clone()));
                    messages.push(Message::user(text));
                }
                (Retry::Repair(_), _) => return Err(GenerateError::NoConversation),
                (Retry::Sample(sampling), _) => request.sampling = *sampling,
            }
            Ok(request)
        })
        .collect();
    let valid: Vec<GenerateRequest> = requests.iter().flatten().cloned().collect();
    let mut responses = llm.generate_batch(&valid).into_iter();
    requests
        .into_iter()
        .map(|request| {
            let request = request?;
            let response = responses.next().expect("one response per request")?;
            finish(
                target,
                first.format,
                request,
                first.dropped.clone(),
                first.local.clone(),
                response,
            )
        })
        .collect()
}

/// The generation a response gives: the function cut from the answer (an infilled body goes
/// under the target's header and docstring), with the prompt it came from.
fn finish(
    target: &Target,
    format: PromptFormat,
    request: GenerateRequest,
    dropped: Vec<String>,
    local: Option<LocalContext>,
    response: GenerateResponse,
) -> Result<Generation, GenerateError> {
    let answer = match format {
        PromptFormat::Chat => response.text.clone(),
        // The header and docstring come from the prompt: without a body there is no answer.
        PromptFormat::Infill if response.text.trim().is_empty() => {
            return Err(GenerateError::Postprocess(
                PostprocessError::Empty,
                response.text,
            ))
        }
        // The body one level under the header, however deep the model started it.
        PromptFormat::Infill => postprocess::dedent(&format!(
            "{}{}",
            prompts::infill_header(target),
            postprocess::indent(
                &postprocess::dedent(&response.text),
                &" ".repeat(target.indent + 4)
            )
        )),
    };
    let completion = complete_function(&answer, &target.shape())
        .map_err(|e| GenerateError::Postprocess(e, response.text.clone()))?;
    Ok(Generation {
        completion,
        prompt: prompt_text(&request.prompt),
        format,
        dropped,
        local,
        raw_answer: response.text.clone(),
        response,
        request,
    })
}

/// A prompt as one text, for traces.
fn prompt_text(prompt: &Prompt) -> String {
    match prompt {
        Prompt::Chat(messages) => messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        Prompt::Text(t) => t.clone(),
        Prompt::Fim { prefix, suffix } => format!("{prefix}<FILL>{suffix}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_signature_file_gives_header_docstring_and_nesting() {
        let t = Target::from_signature(
            "pkg/m.py",
            "def split_all(path, sep='/'):\n    \"\"\"Split a path into parts.\"\"\"\n",
        )
        .unwrap();
        assert_eq!(
            (t.name.as_str(), t.signature.as_str(), t.indent),
            ("split_all", "def split_all(path, sep='/'):", 0)
        );
        assert_eq!(t.docstring.as_deref(), Some("Split a path into parts."));
        assert_eq!(
            t.docstring_literal.as_deref(),
            Some("\"\"\"Split a path into parts.\"\"\"")
        );
        // A bare header is completed with a body before parsing; indentation is kept.
        let t = Target::from_signature("m.py", "    def area(self) -> float:").unwrap();
        assert_eq!(
            (t.signature.as_str(), t.indent),
            ("    def area(self) -> float:", 4)
        );
        assert!(t.docstring.is_none());
    }

    #[test]
    fn a_java_signature_is_a_method_nested_in_a_class() {
        let t = Target::from_signature(
            "src/A.java",
            "/** Sum of the values. */\npublic static int sum(int... values)",
        )
        .unwrap();
        assert_eq!(t.name, "sum");
        assert_eq!(t.indent, 4);
        assert!(t
            .signature
            .trim_start()
            .starts_with("public static int sum("));
        assert_eq!(t.docstring.as_deref(), Some("Sum of the values."));
        assert_eq!(
            t.docstring_literal.as_deref(),
            Some("/** Sum of the values. */")
        );
    }

    #[test]
    fn a_signature_without_a_function_or_for_an_unknown_language_is_an_error() {
        assert!(matches!(
            Target::from_signature("m.py", "x = 1\n"),
            Err(GenerateError::BadSignature(_))
        ));
        assert!(matches!(
            Target::from_signature("notes.txt", "def f(): pass"),
            Err(GenerateError::NotSource(_))
        ));
    }
}
