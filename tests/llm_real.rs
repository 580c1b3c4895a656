//! The default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) end to end. It is read through
//! `repohop::models` (set REPOHOP_MODELS; `repohop models fetch` provides it). One binary, one
//! shared model, few short prompts: these run on a 2-core CI machine.

use std::sync::{Mutex, OnceLock};

use repohop::llm::{
    CandleLlm, Constraint, FinishReason, GenerateRequest, GenerateResponse, Llm, LlmOptions,
    Message, Prompt, Speculation,
};
use repohop::models::DEFAULT_GENERATOR;

/// A small module the prompts below ask about (~200 tokens).
const FILE: &str = "```python\nimport json\nfrom pathlib import Path\n\n\
        DEFAULTS = {\"retries\": 3, \"timeout\": 10.0, \"verbose\": False}\n\n\
        def load(path):\n    \"\"\"Read the settings file, falling back to the defaults.\"\"\"\n    \
        p = Path(path)\n    if not p.exists():\n        return dict(DEFAULTS)\n    \
        with p.open() as f:\n        data = json.load(f)\n    \
        return {**DEFAULTS, **data}\n\n\
        def save(path, settings):\n    with open(path, \"w\") as f:\n        \
        json.dump(settings, f, indent=2, sort_keys=True)\n```";

fn llm() -> &'static Mutex<CandleLlm> {
    static LLM: OnceLock<Mutex<CandleLlm>> = OnceLock::new();
    LLM.get_or_init(|| {
        let llm = CandleLlm::load(DEFAULT_GENERATOR, &LlmOptions::default()).unwrap_or_else(|e| {
            panic!("the default model is needed for these tests ({e}); run `repohop models fetch`")
        });
        Mutex::new(llm)
    })
}

/// Each request answered alone from a cold cache, without speculation.
fn one_at_a_time(llm: &mut CandleLlm, reqs: &[GenerateRequest]) -> Vec<GenerateResponse> {
    let speculation = llm.speculation();
    llm.set_speculation(None);
    let alone = reqs
        .iter()
        .map(|r| {
            llm.clear_cache();
            llm.generate(r).unwrap()
        })
        .collect();
    llm.set_speculation(speculation);
    alone
}

/// Whether the model's several-row passes give each row its one-row bits, which only our
/// kernels (AVX-512 VNNI or AVX2) do; where they do not, says what was not compared (and
/// fails when REPOHOP_REQUIRE_QUANT_KERNELS is set).
fn rows_exact_or_say(llm: &CandleLlm, uncompared: &str) -> bool {
    if llm.rows_exact() {
        return true;
    }
    assert!(
        std::env::var_os("REPOHOP_REQUIRE_QUANT_KERNELS").is_none(),
        "REPOHOP_REQUIRE_QUANT_KERNELS is set but the model's several-row pass is not exact"
    );
    eprintln!("no exact several-row pass here: {uncompared} were not compared");
    false
}

#[test]
fn greedy_code_answer_is_correct_and_deterministic() {
    let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user(
        "Write a Python function add(a, b) that returns the sum of a and b. Only code.",
    )]));
    req.max_new_tokens = 24;
    let mut llm = llm().lock().unwrap();
    llm.clear_cache();
    let a = llm.generate(&req).unwrap();
    llm.clear_cache();
    let b = llm.generate(&req).unwrap();
    assert_eq!(a.text, b.text);
    assert_eq!(a.tokens, b.tokens);
    let code: String = a.text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(code.contains("def add(a, b): return a + b"), "{:?}", a.text);
    // A third call reuses the whole prompt but its last token.
    let c = llm.generate(&req).unwrap();
    assert_eq!(c.cached_prompt_tokens, c.prompt_tokens - 1);
    assert_eq!(c.text, a.text);
}

#[test]
fn constrained_choice_picks_the_obvious_option() {
    let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user(
        "Which of these functions reads a JSON configuration file from disk? \
         Answer with the function name only.\n- render_html\n- load_config\n- send_email",
    )]));
    req.max_new_tokens = 16;
    req.constraint = Some(Constraint::OneOf(vec![
        "render_html".into(),
        "load_config".into(),
        "send_email".into(),
    ]));
    let resp = llm().lock().unwrap().generate(&req).unwrap();
    assert_eq!(resp.text, "load_config");
    assert_eq!(resp.finish_reason, FinishReason::Constraint);
}

#[test]
fn code_first_keeps_a_comment_from_opening_the_line() {
    // Every function so far opens with a comment: the model's first choice is another one.
    let code = "\
def area(r):
    # the circle's area
    return 3.14159 * r * r


def perimeter(r):
    # the circle's perimeter
    return 2 * 3.14159 * r


def diameter(r):
";
    let mut req = GenerateRequest::new(Prompt::Text(code.into()));
    req.max_new_tokens = 24;
    req.until_statement = Some(repohop::repo::model::Lang::Python);
    let mut llm = llm().lock().unwrap();
    let free = llm.generate(&req).unwrap();
    assert!(free.text.trim_start().starts_with('#'), "{:?}", free.text);
    req.code_first = true;
    let first = llm.generate(&req).unwrap();
    assert!(
        first.text.trim_start().starts_with("return"),
        "{:?}",
        first.text
    );
}

#[test]
fn speculative_decoding_gives_the_plain_answer() {
    // Code that repeats its prompt: the case where drafts from the prompt are accepted.
    let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user(
        "Rename the parameter `items` to `values` in this function and change nothing else. \
         Only code.\n\n```python\ndef total_weight(items, scale=1.0):\n    \
         \"\"\"Sum of the weights of items, scaled.\"\"\"\n    result = 0.0\n    \
         for item in items:\n        result += item.weight * scale\n    return result\n```",
    )]));
    req.max_new_tokens = 80;
    let mut llm = llm().lock().unwrap();
    llm.set_speculation(None);
    llm.clear_cache();
    let plain = llm.generate(&req).unwrap();
    llm.set_speculation(Some(Speculation::default()));
    llm.clear_cache();
    let fast = llm.generate(&req).unwrap();
    assert_eq!(plain.drafted_tokens, 0);
    assert_eq!(fast.tokens, plain.tokens);
    assert_eq!(fast.text, plain.text);
    assert!(
        plain.text.contains("def total_weight(values"),
        "{}",
        plain.text
    );
    if llm.speculation().is_none() {
        // Only our kernels (AVX-512 VNNI or AVX2) verify several rows exactly; elsewhere nothing
        // is drafted.
        assert!(
            std::env::var_os("REPOHOP_REQUIRE_QUANT_KERNELS").is_none(),
            "REPOHOP_REQUIRE_QUANT_KERNELS is set but the model runs without speculative decoding"
        );
        eprintln!("no exact several-row pass here: speculative decoding is off");
        return;
    }
    // The drafts saved decode steps (this machine's kernels verify several rows exactly).
    assert!(
        fast.accepted_tokens * 2 > fast.generated_tokens,
        "{} of {} tokens accepted ({} drafted)",
        fast.accepted_tokens,
        fast.generated_tokens,
        fast.drafted_tokens
    );
    // Answers decoded together draft and verify inside the shared passes too.
    llm.clear_cache();
    for b in llm.generate_batch(&[req.clone(), req.clone()]) {
        let b = b.unwrap();
        assert_eq!(b.tokens, plain.tokens);
        assert!(b.accepted_tokens * 2 > b.generated_tokens, "{b:?}");
    }
    eprintln!(
        "decode {:.0} ms plain, {:.0} ms speculative; {} of {} drafted tokens accepted",
        plain.decode_ms, fast.decode_ms, fast.accepted_tokens, fast.drafted_tokens
    );
}

#[test]
fn a_batch_decodes_the_answers_one_call_at_a_time_gives() {
    let asks = [
        "Write a Python function is_even(n). Only code.",
        "Write a Python function that reverses a list in place. Only code.",
        "Write a Java method max(int a, int b). Only code.",
    ];
    let reqs: Vec<GenerateRequest> = asks
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut r = GenerateRequest::new(Prompt::Chat(vec![Message::user(*a)]));
            r.max_new_tokens = 24 + 8 * i;
            r
        })
        .collect();
    let mut llm = llm().lock().unwrap();
    let alone = one_at_a_time(&mut llm, &reqs);
    llm.clear_cache();
    let batch = llm.generate_batch(&reqs);
    let exact = rows_exact_or_say(&llm, "batched answers");
    for (i, (b, a)) in batch.iter().zip(&alone).enumerate() {
        let b = b.as_ref().unwrap();
        assert!(b.generated_tokens > 0);
        if exact {
            assert_eq!(b.tokens, a.tokens, "answer {i}");
            assert_eq!(b.text, a.text);
        }
    }
}

#[test]
fn a_prompt_continued_from_a_reused_prefix_gives_the_bits_computed_whole() {
    // Two asks about one file: the second reuses the first's computed prefix (template and
    // file) and computes only its own question, in a pass whose rows fall into other blocks
    // than when the whole prompt is computed at once.
    let ask = |q: &str| Prompt::Chat(vec![Message::user(format!("{FILE}\n\n{q}"))]);
    let first = ask("What does `load` return when the file is missing? One sentence.");
    let second = ask(
        "Write a function `merge(path, changes)` that loads the settings at `path`, updates \
         them with the dictionary `changes`, saves them back and returns them. Only code.",
    );
    let answer = " ```python\ndef merge(path, changes):\n    settings = load(path)";
    let mut req = GenerateRequest::new(second.clone());
    req.max_new_tokens = 48;
    let mut llm = llm().lock().unwrap();
    llm.clear_cache();
    let whole = llm.score(&second, answer).unwrap();
    llm.clear_cache();
    let whole_answer = llm.generate(&req).unwrap();
    llm.clear_cache();
    llm.score(&first, answer).unwrap();
    let reused = llm.score(&second, answer).unwrap();
    llm.clear_cache();
    llm.generate(&GenerateRequest::new(first)).unwrap();
    let reused_answer = llm.generate(&req).unwrap();
    let cached = reused_answer.cached_prompt_tokens;
    assert!(
        cached > 100 && reused_answer.prompt_tokens - cached > 32,
        "{cached} of {} prompt tokens reused",
        reused_answer.prompt_tokens
    );
    if !rows_exact_or_say(&llm, "reused prefixes") {
        return;
    }
    assert_eq!(whole.logprob.to_bits(), reused.logprob.to_bits());
    assert_eq!(reused_answer.tokens, whole_answer.tokens);
}

#[test]
fn a_long_prompt_computed_inside_other_answers_decode_steps_gets_its_answer_alone() {
    // The second prompt is computed in several chunks while the first answer decodes.
    let asks = [
        "Write a Python function is_even(n). Only code.".to_string(),
        format!("{FILE}\n\nWrite a function `reset(path)` that saves the defaults to `path`. Only code."),
    ];
    let reqs: Vec<GenerateRequest> = asks
        .iter()
        .map(|a| {
            let mut r = GenerateRequest::new(Prompt::Chat(vec![Message::user(a.clone())]));
            r.max_new_tokens = 48;
            r
        })
        .collect();
    let mut llm = llm().lock().unwrap();
    let alone = one_at_a_time(&mut llm, &reqs);
    assert!(alone[1].prompt_tokens > 2 * repohop::llm::PREFILL_CHUNK);
    let mut batches = Vec::new();
    for mixed in [true, false] {
        llm.set_mixed_prefill(mixed);
        assert_eq!(llm.mixed_prefill(), mixed);
        llm.clear_cache();
        batches.push(llm.generate_batch(&reqs));
    }
    llm.set_mixed_prefill(true);
    if !rows_exact_or_say(&llm, "batched answers") {
        return;
    }
    for batch in batches {
        for (i, (b, a)) in batch.iter().zip(&alone).enumerate() {
            let b = b.as_ref().unwrap();
            assert_eq!(b.tokens, a.tokens, "answer {i}");
            assert_eq!(b.prompt_tokens, a.prompt_tokens);
        }
    }
}
