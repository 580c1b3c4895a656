//! The generation step: prompt budgeting with a scripted model, and the direct method end to
//! end with the real default model on the fixture repository.

use repohop::generate::{
    self, BodySource, ContextSnippet, GenerateOptions, LocalView, PromptFormat, Target,
};
use repohop::llm::{
    CandleLlm, FinishReason, GenerateRequest, GenerateResponse, Llm, LlmError, LlmOptions, Prompt,
};
use repohop::models::DEFAULT_GENERATOR;
use repohop::repo::lang;
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, IndexOptions, Repository};
use std::path::Path;

/// Answers with a fixed text and counts one token per 4 bytes of the rendered prompt.
struct Scripted {
    answer: String,
    prompts: Vec<String>,
}

fn render(prompt: &Prompt) -> String {
    match prompt {
        Prompt::Chat(messages) => messages.iter().map(|m| m.content.clone()).collect(),
        Prompt::Text(t) => t.clone(),
        Prompt::Fim { prefix, suffix } => format!("{prefix}{suffix}"),
    }
}

impl Llm for Scripted {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        self.prompts.push(render(&request.prompt));
        Ok(GenerateResponse {
            prompt_tokens: self.count_tokens(&request.prompt)?,
            generated_tokens: self.answer.len() / 4,
            ..GenerateResponse::new(self.answer.clone(), FinishReason::Stop)
        })
    }
    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
        Ok(render(prompt).len() / 4)
    }
    fn context_window(&self) -> usize {
        32_768
    }
    fn name(&self) -> &str {
        "scripted"
    }
}

fn fixture() -> Repository {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pyproj");
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    Repository::open(&root, &opts).expect("fixture repository opens")
}

fn iterate_path_target(repo: &Repository) -> Target {
    let id = resolve_target(repo, "walkway.pathops.iterate_path").expect("target resolves");
    Target::of(repo, id).expect("target is a Python function")
}

fn snippet(name: &str, lines: usize) -> ContextSnippet {
    ContextSnippet {
        qualname: format!("pkg.{name}"),
        path: "pkg.py".into(),
        start_line: 1,
        code: format!("def {name}():\n{}", "    x = 1\n".repeat(lines)),
    }
}

#[test]
fn context_that_does_not_fit_is_dropped_from_the_end_and_reported() {
    let repo = fixture();
    let target = iterate_path_target(&repo);
    let mut llm = Scripted {
        answer: "```python\ndef iterate_path(path):\n    return path.split('/')\n```".into(),
        prompts: Vec::new(),
    };
    let context = [
        snippet("first", 5),
        snippet("second", 200),
        snippet("third", 5),
    ];
    let options = GenerateOptions {
        prompt_budget: 400,
        max_new_tokens: 64,
        ..GenerateOptions::default()
    };
    let out = generate::generate(&mut llm, &target, None, &context, &options).unwrap();
    assert_eq!(out.dropped, vec!["pkg.second", "pkg.third"]);
    let prompt = &llm.prompts[0];
    assert!(prompt.contains("def first()") && !prompt.contains("def second()"));
    assert!(prompt.contains("def iterate_path(path):"));
    assert!(prompt.contains("Iterate over the components of a path."));
    assert_eq!(out.completion.body, "return path.split('/')\n");
    assert_eq!(
        out.completion.function,
        "def iterate_path(path):\n    return path.split('/')\n"
    );

    let tight = GenerateOptions {
        prompt_budget: 20,
        max_new_tokens: 64,
        ..GenerateOptions::default()
    };
    let err = generate::generate(&mut llm, &target, None, &context, &tight).unwrap_err();
    assert!(
        err.to_string().contains("exceeds the prompt budget"),
        "{err}"
    );
}

#[test]
fn the_local_file_comes_last_before_the_target_and_shrinks_after_the_snippets_are_gone() {
    let repo = fixture();
    let id = resolve_target(&repo, "walkway.pathops.iterate_path").unwrap();
    let target = Target::of(&repo, id).unwrap();
    let view = MaskedView::new(&repo, Some(id), false);
    let local = LocalView::new(&view, &target).unwrap();
    let mut llm = Scripted {
        answer: "```python\ndef iterate_path(path):\n    return path.split('/')\n```".into(),
        prompts: Vec::new(),
    };
    let context = [snippet("first", 5)];
    // Room for everything: the file with its imports and the target's place marked, after the
    // retrieved snippet and before the request.
    let out = generate::generate(
        &mut llm,
        &target,
        Some(&local),
        &context,
        &GenerateOptions::default(),
    )
    .unwrap();
    let prompt = &llm.prompts[0];
    let at = |s: &str| {
        prompt
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not in {prompt}"))
    };
    assert!(at("def first()") < at("import re") && at("import re") < at("Implement the following"));
    assert!(prompt.contains("# >>> `iterate_path` goes here (write it) <<<"));
    let shown = out.local.as_ref().unwrap();
    assert_eq!(shown.lines_shown, shown.lines_total);
    assert!(out.dropped.is_empty());

    // A budget that can't hold both: the snippet goes first, then the file view shrinks, the
    // imports and the marker staying.
    let whole = llm
        .count_tokens(&repohop::llm::Prompt::Text(prompt.clone()))
        .unwrap();
    let options = GenerateOptions {
        prompt_budget: whole - 60,
        ..GenerateOptions::default()
    };
    let out = generate::generate(&mut llm, &target, Some(&local), &context, &options).unwrap();
    assert_eq!(out.dropped, vec!["pkg.first"]);
    let shown = out.local.as_ref().unwrap();
    assert!(shown.lines_shown < shown.lines_total, "{}", shown.text);
    assert!(shown.text.contains("import re") && shown.text.contains(">>> `iterate_path`"));
}

#[test]
fn an_answer_without_code_is_an_error_naming_the_answer() {
    let repo = fixture();
    let target = iterate_path_target(&repo);
    let mut llm = Scripted {
        answer: "   ".into(),
        prompts: Vec::new(),
    };
    let err =
        generate::generate(&mut llm, &target, None, &[], &GenerateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("no code"), "{err}");
}

#[test]
fn direct_generation_with_the_default_model_writes_a_valid_target() {
    let repo = fixture();
    let target = iterate_path_target(&repo);
    let mut llm = CandleLlm::load(DEFAULT_GENERATOR, &LlmOptions::default()).unwrap_or_else(|e| {
        panic!("the default model is needed ({e}); run `repohop models fetch`")
    });
    let options = GenerateOptions {
        prompt_budget: 2048,
        max_new_tokens: 160,
        ..GenerateOptions::default()
    };
    let out = generate::generate(&mut llm, &target, None, &[], &options).unwrap();
    let c = &out.completion;
    assert_eq!(c.source, BodySource::Definition, "{}", out.raw_answer);
    assert!(
        c.function.starts_with("def iterate_path(path):\n"),
        "{}",
        c.function
    );
    assert!(c.body.contains("return"), "{}", c.body);
    // The assembled function parses cleanly and defines exactly the target.
    let parsed = lang::for_path("x.py")
        .unwrap()
        .parse("x.py", "x", &c.function);
    assert_eq!(parsed.parse_errors, 0, "{}", c.function);
    let top: Vec<_> = parsed
        .functions
        .iter()
        .filter(|f| f.class.is_none() && f.qualname == "x.iterate_path")
        .collect();
    assert_eq!(top.len(), 1, "{}", c.function);
    assert!(out.response.generated_tokens > 0 && out.response.generated_tokens <= 160);
}

/// The target with its file's view (the target hidden).
fn iterate_path_in_its_file(repo: &Repository) -> (Target, LocalView) {
    let id = resolve_target(repo, "walkway.pathops.iterate_path").unwrap();
    let target = iterate_path_target(repo);
    let local = LocalView::new(&MaskedView::new(repo, Some(id), false), &target).unwrap();
    (target, local)
}

fn infill_options(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        prompt_budget: 2048,
        max_new_tokens,
        format: PromptFormat::Infill,
        ..GenerateOptions::default()
    }
}

#[test]
fn an_infilled_body_goes_under_the_targets_header_and_an_empty_one_is_an_error() {
    let repo = fixture();
    let (target, local) = iterate_path_in_its_file(&repo);
    let mut llm = Scripted {
        answer: "    return [path]\n".into(),
        prompts: Vec::new(),
    };
    let out =
        generate::generate(&mut llm, &target, Some(&local), &[], &infill_options(64)).unwrap();
    assert_eq!(out.format, PromptFormat::Infill);
    let prompt = &llm.prompts[0];
    assert!(
        prompt.starts_with("<|repo_name|>pyproj\n<|file_sep|>walkway/pathops.py\n<|fim_prefix|>"),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|fim_middle|>"), "{prompt}");
    assert!(prompt.contains("def iterate_path(path):\n"), "{prompt}");
    // The body ends at the layout's next marker (a server may send it back as text).
    assert!(out.request.stop.iter().any(|s| s == "<|file_sep|>"));
    assert!(out
        .completion
        .function
        .starts_with("def iterate_path(path):\n"));
    assert!(
        out.completion
            .function
            .trim_end()
            .ends_with("return [path]"),
        "{}",
        out.completion.function
    );
    // A body started deeper than one level goes one level under the header all the same.
    llm.answer =
        "            if not path:\n                return []\n            return [path]\n".into();
    let out =
        generate::generate(&mut llm, &target, Some(&local), &[], &infill_options(64)).unwrap();
    assert!(
        out.completion
            .function
            .ends_with("\"\"\"\n    if not path:\n        return []\n    return [path]\n"),
        "{}",
        out.completion.function
    );
    llm.answer = "\n  \n".into();
    let err =
        generate::generate(&mut llm, &target, Some(&local), &[], &infill_options(64)).unwrap_err();
    assert!(err.to_string().contains("no code"), "{err}");
}

#[test]
fn infilled_generation_with_the_default_model_writes_a_body_that_ends_with_the_function() {
    let repo = fixture();
    let (target, local) = iterate_path_in_its_file(&repo);
    let mut llm = CandleLlm::load(DEFAULT_GENERATOR, &LlmOptions::default()).unwrap_or_else(|e| {
        panic!("the default model is needed ({e}); run `repohop models fetch`")
    });
    let out =
        generate::generate(&mut llm, &target, Some(&local), &[], &infill_options(200)).unwrap();
    // The answer is the body alone: it stops where code at the header's column would resume.
    assert!(
        !out.raw_answer.trim_start().starts_with("def "),
        "{}",
        out.raw_answer
    );
    assert!(
        out.raw_answer
            .lines()
            .all(|l| l.trim().is_empty() || l.starts_with("    ")),
        "{}",
        out.raw_answer
    );
    let c = &out.completion;
    assert!(
        c.function.starts_with("def iterate_path(path):\n"),
        "{}",
        c.function
    );
    let parsed = lang::for_path("x.py")
        .unwrap()
        .parse("x.py", "x", &c.function);
    assert_eq!(parsed.parse_errors, 0, "{}", c.function);
    assert!(out.response.generated_tokens > 0 && out.response.generated_tokens <= 200);
}
