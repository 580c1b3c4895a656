//! The constrained-decoding guarantee, checked on a tiny random-weight model (whose choices
//! are arbitrary, so the mask does all the work): for any candidate list the answer parses and
//! names only members.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

mod test_device;

use proptest::prelude::*;
use repohop::llm::{
    CandleLlm, Constraint, FinishReason, GenerateRequest, IdentPattern, Llm, LlmOptions, Prompt,
    Sampling,
};

fn llm() -> &'static Mutex<CandleLlm> {
    static LLM: OnceLock<Mutex<CandleLlm>> = OnceLock::new();
    LLM.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm/qwen2");
        let llm = CandleLlm::load(dir.to_str().unwrap(), &LlmOptions::default()).unwrap();
        test_device::assert_on_test_device(llm.device(), "the engine");
        Mutex::new(llm)
    })
}

/// Pieces that tokenize awkwardly: shared prefixes, multi-byte characters, JSON escapes.
const PIECES: &[&str] = &[
    "a",
    "ab",
    "abc",
    "parse",
    "parse_args",
    "_",
    ".",
    " ",
    "é",
    "日本",
    "😀",
    "\"",
    "\\",
    "\n",
    "\t",
    "x.y",
    "def",
    "Ω",
    "0",
    "[",
    "]",
    ",",
];

fn candidate() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 1..4).prop_map(|p| p.concat())
}

fn request(
    prompt: String,
    seed: Option<u64>,
    max_new_tokens: usize,
    c: Constraint,
) -> GenerateRequest {
    let mut req = GenerateRequest::new(Prompt::Text(prompt));
    req.max_new_tokens = max_new_tokens;
    req.constraint = Some(c);
    if let Some(seed) = seed {
        req.sampling = Sampling::Sample {
            temperature: 1.5,
            top_p: 1.0,
            seed,
        };
    }
    req
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn one_of_answers_a_member(
        items in prop::collection::vec(candidate(), 1..6),
        prompt in "[a-z ]{1,12}",
        seed in prop::option::of(any::<u64>()),
        max in 1usize..24,
    ) {
        let resp = llm().lock().unwrap()
            .generate(&request(prompt, seed, max, Constraint::OneOf(items.clone()))).unwrap();
        prop_assert!(items.contains(&resp.text), "{:?} not in {:?}", resp.text, items);
        prop_assert!(resp.finish_reason != FinishReason::Stop);
    }

    #[test]
    fn subset_is_a_json_array_of_distinct_members(
        items in prop::collection::vec(candidate(), 1..6),
        max_items in 1usize..4,
        prompt in "[a-z ]{1,12}",
        seed in prop::option::of(any::<u64>()),
        max in 1usize..40,
    ) {
        let c = Constraint::Subset { items: items.clone(), max_items };
        let resp = llm().lock().unwrap().generate(&request(prompt, seed, max, c)).unwrap();
        let parsed: Vec<String> = serde_json::from_str(&resp.text)
            .map_err(|e| TestCaseError::fail(format!("{:?}: {e}", resp.text)))?;
        prop_assert!(!parsed.is_empty() && parsed.len() <= max_items, "{:?}", parsed);
        for (i, p) in parsed.iter().enumerate() {
            prop_assert!(items.contains(p), "{:?} not in {:?}", p, items);
            prop_assert!(!parsed[..i].contains(p), "{:?} repeated", p);
        }
    }

    #[test]
    fn ident_array_matches_the_pattern(
        max_items in 1usize..5,
        prompt in "[a-z ]{1,12}",
        seed in prop::option::of(any::<u64>()),
        max in 1usize..40,
    ) {
        let c = Constraint::IdentArray { pattern: IdentPattern::default(), max_items };
        let resp = llm().lock().unwrap().generate(&request(prompt, seed, max, c)).unwrap();
        let parsed: Vec<String> = serde_json::from_str(&resp.text)
            .map_err(|e| TestCaseError::fail(format!("{:?}: {e}", resp.text)))?;
        prop_assert!(parsed.len() <= max_items);
        let re = regex::Regex::new(r"^[A-Za-z_][A-Za-z0-9_.]*$").unwrap();
        for p in &parsed {
            prop_assert!(re.is_match(p) && p.len() <= 64, "{:?}", p);
        }
    }
}

#[test]
fn single_choice_is_answered_without_the_model() {
    let c = Constraint::OneOf(vec!["only".into(), "only".into()]);
    let resp = llm()
        .lock()
        .unwrap()
        .generate(&request("pick".into(), None, 5, c))
        .unwrap();
    assert_eq!(resp.text, "only");
    assert_eq!(resp.generated_tokens, 0);
    assert_eq!(resp.finish_reason, FinishReason::Constraint);
}
