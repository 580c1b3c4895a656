//! The default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) end to end. It is read through
//! `repohop::models` (set REPOHOP_MODELS; `repohop models fetch` provides it). One binary, one
//! shared model, few short prompts: these run on a 2-core CI machine.

use std::sync::{Mutex, OnceLock};

use repohop::llm::{
    CandleLlm, Constraint, FinishReason, GenerateRequest, Llm, LlmOptions, Message, Prompt,
};
use repohop::models::DEFAULT_GENERATOR;

fn llm() -> &'static Mutex<CandleLlm> {
    static LLM: OnceLock<Mutex<CandleLlm>> = OnceLock::new();
    LLM.get_or_init(|| {
        let llm = CandleLlm::load(DEFAULT_GENERATOR, &LlmOptions::default()).unwrap_or_else(|e| {
            panic!("the default model is needed for these tests ({e}); run `repohop models fetch`")
        });
        Mutex::new(llm)
    })
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
