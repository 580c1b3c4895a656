//! `--select tests`: tests the model writes for the target, run against the answers a selection
//! may keep. The model sees the target's file (the view generation shows, with the calls of the
//! target) and its header and docstring, never an answer, and writes a few pytest functions;
//! an answer's score is how many of them pass with it as the body, then how few end in an
//! exception other than a failed assertion. The tests are often wrong about exact values (an
//! answer that returns a wrong-looking value may be right), but an answer that raises where
//! others return is rarely so. They only order the answers: a tie goes to the review's
//! ranking (see [`super::select::tests_ranks`]).

use serde::{Deserialize, Serialize};

use super::{grounding, prompts, LocalContext, LocalView, Target};
use crate::llm::{GenerateRequest, GenerateResponse, Llm, LlmError, Message, Prompt};
use crate::repo::mask::MaskedView;
use crate::repo::Lang;

/// Tests asked for per target.
pub const TEST_COUNT: usize = 3;
/// Room for three short tests and their imports.
const MAX_TOKENS: usize = 700;

/// The test module the model wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelTests {
    /// The answer's first code block holding a test (or its first block).
    pub code: String,
    /// Its top-level `test_*` functions, in order.
    pub names: Vec<String>,
}

/// How one model-written test ended with an answer as the target's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestOutcome {
    Passed,
    /// An assertion failed (or `pytest.raises` saw nothing raised): the answer returned.
    Failed,
    /// Any other exception, a timeout, or a test module that could not be collected.
    Raised,
}

/// An answer's tally over the model's tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestScore {
    pub passed: usize,
    pub raised: usize,
}

impl TestScore {
    pub fn of(outcomes: &[TestOutcome]) -> TestScore {
        let count = |o: TestOutcome| outcomes.iter().filter(|&&x| x == o).count();
        TestScore {
            passed: count(TestOutcome::Passed),
            raised: count(TestOutcome::Raised),
        }
    }
}

/// Runs model-written tests against an answer.
pub trait TestRunner: Sync {
    /// Per test of `tests.names`, how it ended with `body` as the target's body; an error says
    /// why the answer could not be tested at all.
    fn run(&self, body: &str, tests: &ModelTests) -> Result<Vec<TestOutcome>, String>;
    /// The output's tail of the first of `tests` that does not pass with `body`; `None` when
    /// all pass.
    fn failure(&self, body: &str, tests: &ModelTests) -> Result<Option<String>, String>;
}

/// The examples (`>>>` lines) of the target's docstring — the specification the model was
/// given — as one pytest test: they run as doctest runs them, with the target module's names
/// and the project's `doctest_optionflags`, and the test passes when every example does.
/// `None` for a docstring without examples, or a target that is not Python.
pub fn docstring_examples(view: &MaskedView, target: &Target) -> Option<ModelTests> {
    let doc = target.docstring.as_deref()?;
    if target.lang != Lang::Python || !doc.lines().any(|l| l.trim_start().starts_with(">>>")) {
        return None;
    }
    // A JSON string is a Python string literal.
    let text = serde_json::to_string(doc).ok()?;
    let name = serde_json::to_string(&target.name).ok()?;
    let module = target_module(view, target);
    let code = format!(
        "import doctest\n\
         import {module} as _target_module\n\n\n\
         def {EXAMPLES_TEST}(request):\n    \
             flags = 0\n    \
             for flag in request.config.getini('doctest_optionflags'):\n        \
                 flags |= doctest.OPTIONFLAGS_BY_NAME.get(flag, 0)\n    \
             examples = doctest.DocTestParser().get_doctest(\n        \
                 {text}, dict(vars(_target_module)), {name}, None, 0\n    )\n    \
             runner = doctest.DocTestRunner(optionflags=flags)\n    \
             report = []\n    \
             runner.run(examples, out=report.append)\n    \
             assert runner.failures == 0, ''.join(report)\n"
    );
    Some(ModelTests {
        code,
        names: vec![EXAMPLES_TEST.to_string()],
    })
}

/// The test [`docstring_examples`] writes.
const EXAMPLES_TEST: &str = "test_docstring_examples";
/// What of a failing examples report the repair round shows.
const MAX_REPORT_CHARS: usize = 1500;

/// The examples that failed, from the output of [`docstring_examples`]' test (doctest's report
/// in pytest's `E` lines), as doctest writes them: each failed example with what it expected
/// and what it got, an exception shown by its last line. `None` when the output has no report.
pub fn examples_failures(output: &str) -> Option<String> {
    let lines: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("E "))
        .collect();
    let start = lines.iter().position(|l| l.trim() == "Failed example:")?;
    let indent = |l: &str| l.len() - l.trim_start().len();
    let base = indent(lines[start]);
    let mut report = String::new();
    let mut raised: Option<&str> = None;
    let flush = |report: &mut String, raised: &mut Option<&str>| {
        if let Some(last) = raised.take().filter(|l| !l.trim().is_empty()) {
            report.push_str(&format!("    {}\n", last.trim()));
        }
    };
    for line in &lines[start..] {
        let trimmed = line.trim();
        if !trimmed.is_empty() && indent(line) < base {
            break; // pytest's own `assert` line: the report is over.
        }
        let header = indent(line) == base;
        if header {
            flush(&mut report, &mut raised);
        }
        // Between examples: doctest's rule of stars and the example's line in the copy.
        if header && (trimmed.chars().all(|c| c == '*') || trimmed.starts_with("Line ")) {
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if header && trimmed == "Exception raised:" {
            raised = Some("");
        } else if raised.is_some() {
            raised = Some(line);
            continue;
        }
        if report.len() + line.len() > MAX_REPORT_CHARS {
            report.push_str("...\n");
            return Some(report);
        }
        report.push_str(line.get(base..).unwrap_or(trimmed));
        report.push('\n');
    }
    flush(&mut report, &mut raised);
    Some(report)
}

/// The module a test imports the target from: the one the repository model gives its file
/// (`src/pkg/mod.py` → `pkg.mod` in a src layout), else the file's path read as a module.
pub fn target_module(view: &MaskedView, target: &Target) -> String {
    view.file_symbols(&target.path)
        .map(|s| s.module.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| module_name(&target.path))
}

/// The dotted module of a repository-relative Python path (`pkg/mod.py` → `pkg.mod`,
/// `pkg/__init__.py` → `pkg`).
pub fn module_name(path: &str) -> String {
    let stem = path.strip_suffix(".py").unwrap_or(path);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.replace('/', ".")
}

/// [`write_tests`] with the target's file as `view` shows it within `local_budget` tokens (the
/// view generation shows at that budget); `None` when the file is not in view.
pub fn write_in_view(
    llm: &mut dyn Llm,
    view: &MaskedView,
    target: &Target,
    local_budget: usize,
) -> Result<Option<(ModelTests, GenerateResponse)>, LlmError> {
    let Some(local) = LocalView::new(view, target) else {
        return Ok(None);
    };
    let local = local.render(local_budget * super::CHARS_PER_TOKEN);
    let (mut tests, response) = write_tests(llm, target, &target_module(view, target), &local)?;
    complete_imports(view, target, &mut tests);
    Ok(Some((tests, response)))
}

/// Puts the imports `tests` lack above its code (see [`grounding::missing_imports`]); tests
/// that lack none are left as they are.
pub fn complete_imports(view: &MaskedView, target: &Target, tests: &mut ModelTests) {
    let module = target_module(view, target);
    let imports = grounding::missing_imports(view, target, &module, &tests.code);
    if !imports.is_empty() {
        tests.code = format!("{}\n{}", imports.join("\n"), tests.code);
    }
}

/// Asks the model (greedy) for [`TEST_COUNT`] tests of `target`, imported from `module`, with
/// `local` in view.
pub fn write_tests(
    llm: &mut dyn Llm,
    target: &Target,
    module: &str,
    local: &LocalContext,
) -> Result<(ModelTests, GenerateResponse), LlmError> {
    let request = prompts::test_request(target, module, local, TEST_COUNT);
    let prompt = Prompt::Chat(vec![
        Message::system(prompts::system(target.lang)),
        Message::user(request),
    ]);
    let response = llm.generate(&GenerateRequest {
        max_new_tokens: MAX_TOKENS,
        ..GenerateRequest::new(prompt)
    })?;
    let code = tests_block(&response.text);
    let names = test_names(&code);
    Ok((ModelTests { code, names }, response))
}

/// Runs `tests` against each `eligible` body (each distinct body once): each answer's score
/// (`None`: not eligible, or not testable), and the first reason an answer could not be tested.
pub fn run_pool(
    runner: &dyn TestRunner,
    tests: &ModelTests,
    bodies: &[&str],
    eligible: &[bool],
) -> (Vec<Option<TestScore>>, Option<String>) {
    let mut passed = vec![None; bodies.len()];
    let mut error = None;
    let mut seen: Vec<(&str, Option<TestScore>)> = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        if !eligible[i] {
            continue;
        }
        if let Some((_, known)) = seen.iter().find(|(b, _)| b == body) {
            passed[i] = *known;
            continue;
        }
        let count = match runner.run(body, tests) {
            Ok(each) => Some(TestScore::of(&each)),
            Err(e) => {
                error.get_or_insert(e);
                None
            }
        };
        seen.push((body, count));
        passed[i] = count;
    }
    (passed, error)
}

/// The first code block of `answer` that holds a test, else its first block: the model
/// sometimes repeats the file before its tests.
fn tests_block(answer: &str) -> String {
    let blocks = super::postprocess::code_blocks(answer);
    blocks
        .iter()
        .find(|b| !test_names(b).is_empty())
        .or(blocks.first())
        .cloned()
        .unwrap_or_default()
}

/// The module-level `def test_*` functions of `code`, each once (pytest runs no `async` test
/// without a plugin).
pub fn test_names(code: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in code.lines() {
        let Some(rest) = line.strip_prefix("def ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or("").trim();
        let identifier = name.chars().all(|c| c.is_alphanumeric() || c == '_');
        if name.starts_with("test") && identifier && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_examples_are_read_from_pytests_report() {
        let output = "E       AssertionError: ******************************\n\
                      E         Line 3, in check\n\
                      E         Failed example:\n\
                      E             check(2)\n\
                      E         Expected:\n\
                      E             3\n\
                      E         Got:\n\
                      E             2\n\
                      E         ******************************\n\
                      E         Line 5, in check\n\
                      E         Failed example:\n\
                      E             check(-1)\n\
                      E         Exception raised:\n\
                      E             Traceback (most recent call last):\n\
                      E               File \"/tmp/x/src/pkg/m.py\", line 16, in check\n\
                      E                 raise Invalid(x)\n\
                      E             pkg.m.Invalid: -1\n\
                      E         \n\
                      E       assert 2 == 0\n\
                      E        +  where 2 = <doctest.DocTestRunner object>.failures\n\n\
                      test_repohop_model.py:15: AssertionError\n";
        assert_eq!(
            examples_failures(output).unwrap(),
            "Failed example:\n    check(2)\nExpected:\n    3\nGot:\n    2\n\
             Failed example:\n    check(-1)\nException raised:\n    pkg.m.Invalid: -1\n"
        );
        assert_eq!(examples_failures("E   assert False\n"), None);
    }

    #[test]
    fn modules_and_test_names_are_read_from_paths_and_code() {
        assert_eq!(module_name("boltons/cacheutils.py"), "boltons.cacheutils");
        assert_eq!(module_name("pkg/__init__.py"), "pkg");
        assert_eq!(module_name("top.py"), "top");
        let code = "import pytest\nfrom m import f\n\ndef helper():\n    pass\n\n\
                    def test_generated_1():\n    assert f(1) == 2\n\n\
                    async def test_async():\n    pass\n\n\
                    def test_generated_2():\n    pass\n\n\
                    class TestNested:\n    def test_inner(self):\n        pass\n\n\
                    def test_generated_1():\n    pass\n";
        assert_eq!(
            test_names(code),
            ["test_generated_1", "test_generated_2"],
            "module-level tests only, each once"
        );
        assert!(test_names("no tests here\n").is_empty());
        let answer = "```python\nclass Stack:\n    pass\n```\n\n\
                      ```python\ndef test_push():\n    pass\n```\n";
        assert_eq!(tests_block(answer), "def test_push():\n    pass\n");
        assert_eq!(tests_block("```python\nx = 1\n```"), "x = 1\n");
    }
}
