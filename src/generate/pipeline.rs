//! DyCoder and its ablations on one code path: dense retrieval and DyRetriever over the masked
//! view, one deduplicated context, then generation.

use std::collections::HashSet;
use std::time::Instant;

use serde::Serialize;

use super::grounding::{self, Grounding};
use super::model_tests::{self, ModelTests, TestRunner, TestScore};
use super::postprocess::dedent;
use super::select::{self, Select};
use super::{
    generate, prompts, retry, ContextSnippet, GenerateError, GenerateOptions, Generation,
    LocalView, PromptFormat, Retry, Target,
};
use crate::embed::{text, Embedder};
use crate::index::vectors::{Item, VectorIndex};
use crate::llm::{GenerateResponse, Llm, LlmError, Sampling};
use crate::repo::mask::MaskedView;
use crate::repo::{FnId, Repository};
use crate::retrieve::dense::{self, DenseError};
use crate::retrieve::dyretriever::{self, DyError, DyOptions, DyTrace};
use crate::retrieve::{bm25, slices};

/// Which context the generator gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// DyRetriever's extracted functions plus the similar functions (the paper's DyCoder).
    Dycoder,
    /// DyRetriever's extracted functions only (the paper's "w/o similarity").
    Dyretriever,
    /// The similar functions only (the paper's "w/o DyRetriever").
    Dense,
    /// Sliding-window code slices by cosine similarity (the paper's SimpleRAG baseline).
    Simplerag,
    /// No retrieved context: the signature and docstring only (the Direct baseline).
    Direct,
}

/// How the similar functions are found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Similarity {
    /// Cosine between embeddings (the paper's default).
    #[default]
    Dense,
    /// Okapi BM25 over identifiers and words (the paper's sparse variant).
    Bm25,
}

/// What a method embeds ahead of queries, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corpus {
    Functions,
    Slices,
}

impl Corpus {
    pub fn items(self, repo: &Repository) -> Vec<Item> {
        match self {
            Corpus::Functions => dense::function_items(repo),
            Corpus::Slices => slices::slice_items(repo),
        }
    }

    /// The cache folder's name under the repository's cache.
    pub fn cache_name(self) -> &'static str {
        match self {
            Corpus::Functions => "vectors",
            Corpus::Slices => "slices",
        }
    }
}

impl Method {
    /// Whether the method has a similarity part (dense or BM25 functions).
    pub fn uses_similar_functions(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dense)
    }
    /// Whether the method has a similarity part at all (functions or SimpleRAG slices).
    pub fn uses_similarity(self) -> bool {
        self.uses_similar_functions() || self == Method::Simplerag
    }
    pub fn uses_dyretriever(self) -> bool {
        matches!(self, Method::Dycoder | Method::Dyretriever)
    }
    /// What has to be embedded for this method with `similarity`.
    pub fn corpus(self, similarity: Similarity) -> Option<Corpus> {
        match self {
            Method::Simplerag => Some(Corpus::Slices),
            _ if self.uses_similar_functions() && similarity == Similarity::Dense => {
                Some(Corpus::Functions)
            }
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Method::Dycoder => "dycoder",
            Method::Dyretriever => "dyretriever",
            Method::Dense => "dense",
            Method::Simplerag => "simplerag",
            Method::Direct => "direct",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub method: Method,
    pub similarity: Similarity,
    pub dy: DyOptions,
    /// Similar functions (or SimpleRAG slices) in the context (the paper's top-10).
    pub top_sim: usize,
    /// Show the target's own file (imports, class, neighbours) before the retrieved context;
    /// off reproduces the papers' prompt.
    pub local: bool,
    /// Check the answer's names against the repository and, when some don't exist, ask once
    /// more with what is wrong and what exists.
    pub grounding: bool,
    /// Answers drawn at temperature: every task with `central`/`review`/`likely`; with `first`, when the
    /// checked answer (after the repair round) still has problems, and the first with fewer
    /// problems replaces it.
    pub samples: usize,
    /// Which checked answer is kept; `central`, `review` and `likely` draw the samples and the
    /// infilled answer for every task.
    pub select: Select,
    pub generation: GenerateOptions,
}

/// Sampled candidates by default.
pub const SAMPLES: usize = 3;
/// How the candidates are drawn: diverse enough to leave a wrong name, close to greedy.
const SAMPLE_TEMPERATURE: f32 = 0.7;
const SAMPLE_TOP_P: f32 = 0.95;

impl PipelineOptions {
    pub fn new(method: Method) -> Self {
        Self {
            method,
            similarity: Similarity::Dense,
            dy: DyOptions::default(),
            top_sim: 10,
            local: true,
            grounding: true,
            samples: SAMPLES,
            select: Select::default(),
            generation: GenerateOptions::default(),
        }
    }
}

/// The embedder and the repository's vectors of the method's [`Corpus`].
pub struct Embeddings<'a> {
    pub embedder: &'a dyn Embedder,
    pub index: &'a VectorIndex,
}

/// A function in the final context.
#[derive(Debug, Clone, Serialize)]
pub struct ContextItem {
    pub qualname: String,
    pub path: String,
    pub start_line: usize,
    /// `dyretriever`, `dense`, `bm25` or `simplerag`; a SimpleRAG slice is named `path:start-end`.
    pub source: &'static str,
    pub code: String,
    /// The function (none for a SimpleRAG slice).
    #[serde(skip)]
    pub id: Option<FnId>,
}

/// What the names check found, and whether a repair round ran and was kept.
#[derive(Debug, Default, Serialize)]
pub struct GroundingTrace {
    pub first: Option<Grounding>,
    pub repaired: Option<Grounding>,
    /// The repaired answer replaced the first (it had fewer problems).
    pub kept_repair: bool,
    /// The first answer, when the repair or a sample replaced it.
    pub first_answer: Option<String>,
    /// Why the repair round gave no answer (the first one stands).
    pub repair_error: Option<String>,
    /// Prompt and generated tokens of the repair round.
    pub repair_tokens: (usize, usize),
    /// The repair round's answer, kept or not.
    pub repaired_answer: Option<String>,
    /// The sampled candidates, in the order drawn.
    pub samples: Vec<SampleTrace>,
    /// The seed of the sampled candidate that replaced the answer.
    pub kept_sample: Option<u64>,
    /// A chat answer still flagged after the repair and the samples: the greedy answer in the
    /// fill-in-the-middle layout (seed 0), and whether it replaced the answer (it had no
    /// problems).
    pub infill: Option<SampleTrace>,
    pub kept_infill: bool,
    /// With `--select central|review|likely`: every answer checked, its problems, centrality and
    /// review, in the order first, repair, samples, infill; and which one was kept.
    pub candidates: Vec<CandidateTrace>,
    pub kept_selected: Option<String>,
    /// Why the answers have no review (the engine could not score; centrality alone chose).
    pub review_error: Option<String>,
    /// With `--select tests`: the tests the model wrote, or why there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestsTrace>,
    /// Why an answer's docstring examples could not be run (the first such error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub examples_error: Option<String>,
    /// When every answer tried failed the docstring's examples: the round that showed the model
    /// what they gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub examples_repair: Option<ExamplesRepairTrace>,
}

/// The round after every answer tried failed the docstring's examples: the kept answer's
/// conversation, then doctest's report of the examples that failed with it.
#[derive(Debug, Default, Serialize)]
pub struct ExamplesRepairTrace {
    /// The examples that failed, as the model was shown them.
    pub report: Option<String>,
    /// The round's answer, its problems, and whether it passes the examples (run only when it
    /// has no more problems than the kept answer).
    pub answer: Option<String>,
    /// As [`CandidateTrace::problems`].
    pub problems: Option<usize>,
    pub passed: Option<bool>,
    /// It passes them: it replaced the kept answer.
    pub kept: bool,
    /// Why the round gave no answer, or its answer could not be tested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The examples repair round's trace, and its answer when it has one.
struct ExamplesRepair {
    trace: ExamplesRepairTrace,
    answer: Option<Generation>,
}

/// What `--select tests` ran the answers against.
#[derive(Debug, Default, Serialize)]
pub struct TestsTrace {
    pub written: Option<ModelTests>,
    /// Why there are no tests, or why an answer could not be tested (the first such error).
    pub error: Option<String>,
}

/// One answer of the pool `--select central|review|likely` chooses from.
#[derive(Debug, Serialize)]
pub struct CandidateTrace {
    /// `first`, `repair`, `sample<seed>` or `infill`.
    pub label: String,
    /// The weight of its problems ([`Grounding::weight`]: a syntax error counts as
    /// [`grounding::SYNTAX_WEIGHT`]).
    pub problems: usize,
    pub centrality: f64,
    /// With `--select review`, for the answers with the fewest problems: the log-probability
    /// of the target's docstring given the answer's code.
    pub review: Option<f64>,
    /// With `--select likely`, for the answers with the fewest problems: the mean
    /// log-probability per token of the body under the bare request, and its tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likelihood_tokens: Option<usize>,
    /// With `--select tests`, for the answers with the fewest problems: how many of the
    /// model's tests pass, and how many end in an exception other than a failed assertion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_passed: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_raised: Option<usize>,
    /// Whether the examples of the target's docstring pass with this answer (answers with the
    /// fewest problems, when a runner was given and the docstring has examples).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub examples_passed: Option<bool>,
    /// The body as it would go under the target's header.
    pub body: String,
}

/// One sampled candidate and what the names check found in it.
#[derive(Debug, Serialize)]
pub struct SampleTrace {
    pub seed: u64,
    pub check: Option<Grounding>,
    pub error: Option<String>,
    pub tokens: (usize, usize),
}

impl SampleTrace {
    /// The weight of the problems the names check found (none checked: `None`).
    fn problems(&self) -> Option<usize> {
        self.check.as_ref().map(Grounding::weight)
    }
}

/// One timed step of the generation phase: where a task's seconds go.
#[derive(Debug, Clone, Serialize)]
pub struct StepTrace {
    /// `first` (the greedy answer), `retries` (the repair round and the samples, decoded
    /// together), `infill` (the fill-in-the-middle answer), `review` (one scoring pass per
    /// reviewed answer: prompt tokens only, the docstring scored counted with them),
    /// `likelihood` (as `review`) or `tests` (writing the model's tests and running them).
    pub step: &'static str,
    pub seconds: f64,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix KV cache (not known for reviews: 0).
    pub cached_prompt_tokens: usize,
    pub generated_tokens: usize,
}

impl StepTrace {
    fn new<'a>(
        step: &'static str,
        started: Instant,
        responses: impl IntoIterator<Item = &'a GenerateResponse>,
    ) -> Self {
        let mut out = StepTrace {
            step,
            seconds: started.elapsed().as_secs_f64(),
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
            generated_tokens: 0,
        };
        for r in responses {
            out.prompt_tokens += r.prompt_tokens;
            out.cached_prompt_tokens += r.cached_prompt_tokens;
            out.generated_tokens += r.generated_tokens;
        }
        out
    }
}

/// A result of the similarity part: a function or a SimpleRAG slice, with its score.
#[derive(Debug, Clone, Serialize)]
pub struct SimilarItem {
    pub qualname: String,
    pub path: String,
    pub score: f32,
}

/// Everything a run did, for traces and reports.
#[derive(Debug, Serialize)]
pub struct PipelineRun {
    pub method: Method,
    pub context: Vec<ContextItem>,
    pub dyretriever: DyTrace,
    /// What the similarity part found, best first.
    pub similar: Vec<SimilarItem>,
    pub generation: Generation,
    /// The names check of the first answer and, after a repair round, of the second.
    pub grounding: GroundingTrace,
    /// The generation phase's steps in the order run, each timed.
    pub steps: Vec<StepTrace>,
    pub similarity_s: f64,
    pub dyretriever_s: f64,
    pub generation_s: f64,
}

impl PipelineRun {
    /// Prompt and generated tokens of the generation step, every answer and review counted.
    pub fn generation_tokens(&self) -> (usize, usize) {
        let prompt = self.steps.iter().map(|s| s.prompt_tokens).sum();
        (prompt, self.steps.iter().map(|s| s.generated_tokens).sum())
    }

    /// Prompt tokens of the generation step served from the prefix cache, every answer counted.
    pub fn generation_cached(&self) -> usize {
        self.steps.iter().map(|s| s.cached_prompt_tokens).sum()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("method {0} needs embeddings, and none were given")]
    NoEmbeddings(&'static str),
    #[error(transparent)]
    Dense(Box<DenseError>),
    #[error(transparent)]
    DyRetriever(#[from] DyError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
}

impl From<DenseError> for PipelineError {
    fn from(e: DenseError) -> Self {
        PipelineError::Dense(Box::new(e))
    }
}

/// Runs `opts.method` for the view's target. The paper runs dense retrieval and DyRetriever
/// concurrently; on a CPU both compete for the same cores, so they run one after the other.
/// `tests` runs the model's tests for `--select tests` (without it, that selection is `review`).
pub fn run(
    llm: &mut dyn Llm,
    view: &MaskedView,
    target: &Target,
    embeddings: Option<&Embeddings>,
    opts: &PipelineOptions,
    tests: Option<&dyn TestRunner>,
) -> Result<PipelineRun, PipelineError> {
    let started = Instant::now();
    let similar = similar_context(view, target, embeddings, opts)?;
    let similarity_s = started.elapsed().as_secs_f64();

    let mut dy_trace = DyTrace::default();
    let mut dy_functions = Vec::new();
    let mut dyretriever_s = 0.0;
    if opts.method.uses_dyretriever() {
        let started = Instant::now();
        let seeds: Vec<FnId> = similar.iter().filter_map(|(c, _)| c.id).collect();
        let result = dyretriever::retrieve(
            llm,
            view,
            &target.prompt_text(),
            &target.path,
            &seeds,
            &opts.dy,
        )?;
        dy_functions = result.functions;
        dy_trace = result.trace;
        dyretriever_s = started.elapsed().as_secs_f64();
    }

    // One deduplicated context: DyRetriever's picks first, then the similar code.
    let mut seen = HashSet::new();
    let mut context = Vec::new();
    for id in dy_functions {
        let (Some(f), Some(code)) = (view.function(id), snippet_code(view, id)) else {
            continue;
        };
        if seen.insert((f.path.clone(), f.span.start_line)) {
            context.push(ContextItem {
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                start_line: f.span.start_line,
                source: "dyretriever",
                code,
                id: Some(id),
            });
        }
    }
    for (item, _) in &similar {
        if seen.insert((item.path.clone(), item.start_line)) {
            context.push(item.clone());
        }
    }
    let snippets: Vec<ContextSnippet> = context
        .iter()
        .map(|c| ContextSnippet {
            qualname: c.qualname.clone(),
            path: c.path.clone(),
            start_line: c.start_line,
            code: c.code.clone(),
        })
        .collect();
    let started = Instant::now();
    let local = opts.local.then(|| LocalView::new(view, target)).flatten();
    let mut generation = generate(llm, target, local.as_ref(), &snippets, &opts.generation)?;
    let mut steps = vec![StepTrace::new("first", started, [&generation.response])];
    let mut checked = GroundingTrace::default();
    if opts.grounding {
        let pooled = opts.select.pools();
        let first = grounding::check_importing(
            view,
            target,
            &mut generation.completion,
            &generation.raw_answer,
        );
        let original = generation.clone();
        let mut problems = first.weight();
        // The answers `--select central|review|likely` chooses from, with their problems (kept only
        // then).
        let mut pool = Vec::new();
        let mut offer = |label: String, answer: &Generation, problems: usize| {
            if pooled {
                pool.push((label, answer.clone(), problems));
            }
        };
        offer("first".to_string(), &original, problems);
        let request = grounding::repair_request(&first);
        if request.is_some() || pooled {
            // The repair round and the samples decode together; a sample counts only while the
            // answer kept so far (the repair's, when it has fewer problems) still has some.
            // An infilled body has no conversation to repair: only samples are drawn.
            let mut retries = Vec::new();
            let repair = generation.format == PromptFormat::Chat && request.is_some();
            if let Some(request) = request.filter(|_| repair) {
                retries.push(Retry::Repair(request));
            }
            retries.extend((1..=opts.samples as u64).map(|seed| {
                Retry::Sample(Sampling::Sample {
                    temperature: SAMPLE_TEMPERATURE,
                    top_p: SAMPLE_TOP_P,
                    seed,
                })
            }));
            let step_started = Instant::now();
            let answers = retry(llm, target, &original, &retries);
            let responses = answers.iter().flatten().map(|g| &g.response);
            steps.push(StepTrace::new("retries", step_started, responses));
            let mut answers = answers.into_iter();
            let repaired = if repair { answers.next() } else { None };
            match repaired {
                Some(Ok(mut second)) => {
                    let r = &second.response;
                    checked.repair_tokens = (r.prompt_tokens, r.generated_tokens);
                    checked.repaired_answer = Some(second.raw_answer.clone());
                    let again = grounding::check_importing(
                        view,
                        target,
                        &mut second.completion,
                        &second.raw_answer,
                    );
                    offer("repair".to_string(), &second, again.weight());
                    if again.weight() < problems {
                        problems = again.weight();
                        checked.kept_repair = true;
                        generation = second;
                    }
                    checked.repaired = Some(again);
                }
                Some(Err(GenerateError::Llm(e))) => return Err(GenerateError::Llm(e).into()),
                Some(Err(e)) => checked.repair_error = Some(e.to_string()),
                None => {}
            }
            for (seed, answer) in (1..).zip(answers) {
                let (trace, candidate) = candidate(answer, seed, view, target)?;
                if let (Some(candidate), Some(found)) = (candidate, trace.problems()) {
                    offer(format!("sample{seed}"), &candidate, found);
                    if found < problems {
                        problems = found;
                        checked.kept_sample = Some(seed);
                        generation = candidate;
                    }
                }
                checked.samples.push(trace);
            }
        }
        // Still flagged: the same context in the model's fill-in-the-middle layout, which
        // writes the body in place, inside its file, and passes tasks the chat layout fails
        // (9 of its 39 on the development set). Kept only when its answer has no problems.
        if (problems > 0 || pooled)
            && generation.format == PromptFormat::Chat
            && target.lang == crate::repo::model::Lang::Python
        {
            let infill_options = GenerateOptions {
                format: PromptFormat::Infill,
                ..opts.generation.clone()
            };
            let step_started = Instant::now();
            let answer = generate(llm, target, local.as_ref(), &snippets, &infill_options);
            let response = answer.as_ref().ok().map(|g| &g.response);
            steps.push(StepTrace::new("infill", step_started, response));
            let (trace, candidate) = candidate(answer, 0, view, target)?;
            if let (Some(candidate), Some(found)) = (candidate, trace.problems()) {
                offer("infill".to_string(), &candidate, found);
                if problems > 0 && found == 0 {
                    checked.kept_infill = true;
                    generation = candidate;
                }
            }
            checked.infill = Some(trace);
        }
        if pooled {
            let answers: Vec<(&str, &str)> = pool
                .iter()
                .map(|(_, g, _)| (g.completion.function.as_str(), g.completion.body.as_str()))
                .collect();
            let bodies: Vec<&str> = answers.iter().map(|(_, body)| *body).collect();
            let scores = select::centrality(&bodies, target.lang);
            let problems: Vec<usize> = pool.iter().map(|(_, _, p)| *p).collect();
            let eligible = select::eligible(&problems);
            let mut likely = vec![None; pool.len()];
            if opts.select == Select::Likely {
                let step_started = Instant::now();
                match select::likelihoods(llm, target, &bodies, &eligible) {
                    Ok(found) => {
                        let mut step = StepTrace::new("likelihood", step_started, []);
                        step.prompt_tokens = found.tokens;
                        steps.push(step);
                        likely = found.scores;
                    }
                    Err(e @ (LlmError::InvalidRequest(_) | LlmError::PromptTooLong { .. })) => {
                        checked.review_error = Some(e.to_string());
                    }
                    Err(e) => return Err(GenerateError::Llm(e).into()),
                }
            }
            // Without every eligible answer's likelihood (Java, an engine that cannot score),
            // `likely` ranks as `review` does.
            let means: Vec<Option<f64>> = likely.iter().map(|l| l.map(|l| l.mean())).collect();
            let scored =
                select::likely_ranks(&means, &eligible).filter(|_| opts.select == Select::Likely);
            let mut reviews = vec![None; pool.len()];
            let reviewed = matches!(opts.select, Select::Review | Select::Tests);
            if reviewed || (opts.select == Select::Likely && scored.is_none()) {
                let step_started = Instant::now();
                let found = select::reviews(llm, target, &answers, &eligible)
                    .map_err(GenerateError::Llm)?;
                let mut step = StepTrace::new("review", step_started, []);
                step.prompt_tokens = found.tokens;
                steps.push(step);
                reviews = found.scores;
                checked.review_error = checked.review_error.take().or(found.error);
            }
            let mut ranks = scored.unwrap_or_else(|| select::ranks(&scores, &reviews, &eligible));
            let mut passed = vec![None; pool.len()];
            if opts.select == Select::Tests {
                let step_started = Instant::now();
                let judged = judge(llm, view, target, opts, tests, &bodies, &eligible)?;
                passed = judged.passed;
                ranks = select::tests_ranks(&passed, &ranks);
                steps.push(StepTrace::new(
                    "tests",
                    step_started,
                    judged.response.as_ref(),
                ));
                checked.tests = Some(judged.trace);
            }
            // The docstring's own examples, where it has some: an answer that passes them ranks
            // above every one that does not, whatever the selection.
            let mut examples = vec![None; pool.len()];
            let written = model_tests::docstring_examples(view, target);
            let examples_run = tests.zip(written.as_ref());
            if let Some((runner, written)) = examples_run {
                if distinct_eligible(&bodies, &eligible) > 0 {
                    let step_started = Instant::now();
                    let (found, error) = model_tests::run_pool(runner, written, &bodies, &eligible);
                    examples = found.iter().map(|s| s.map(|s| s.passed > 0)).collect();
                    ranks = select::examples_ranks(&examples, &ranks);
                    steps.push(StepTrace::new("examples", step_started, []));
                    checked.examples_error = error;
                }
            }
            if let Some(best) = select::best(&ranks, &eligible) {
                checked.kept_selected = Some(pool[best].0.clone());
                generation = pool[best].1.clone();
                // Every answer tried fails the docstring's examples: one more round shows the
                // model what they gave with the kept answer.
                let tried: Vec<bool> = examples.iter().flatten().copied().collect();
                let failed = !tried.is_empty() && !tried.contains(&true);
                if let Some((runner, written)) = examples_run.filter(|_| failed) {
                    let (_, kept, problems) = &pool[best];
                    let step_started = Instant::now();
                    let repair = examples_repair(
                        llm, view, target, runner, written, kept, *problems, &original,
                    )?;
                    let response = repair.answer.as_ref().map(|g| &g.response);
                    steps.push(StepTrace::new("examples_repair", step_started, response));
                    if repair.trace.kept {
                        checked.kept_selected = Some("examples_repair".into());
                        generation = repair.answer.expect("a kept answer");
                    }
                    checked.examples_repair = Some(repair.trace);
                }
            }
            checked.candidates = pool
                .into_iter()
                .zip(
                    scores
                        .into_iter()
                        .zip(reviews)
                        .zip(likely)
                        .zip(passed)
                        .zip(examples),
                )
                .map(
                    |(
                        (label, g, problems),
                        ((((centrality, review), likely), passed), examples),
                    )| {
                        CandidateTrace {
                            label,
                            problems,
                            centrality,
                            review,
                            likelihood: likely.map(|l| l.mean()),
                            likelihood_tokens: likely.map(|l| l.tokens),
                            tests_passed: passed.map(|s| s.passed),
                            tests_raised: passed.map(|s| s.raised),
                            examples_passed: examples,
                            body: g.completion.body,
                        }
                    },
                )
                .collect();
        }
        let replaced = checked.kept_repair
            || checked.kept_sample.is_some()
            || checked.kept_infill
            || checked
                .kept_selected
                .as_deref()
                .is_some_and(|l| l != "first");
        if replaced {
            checked.first_answer = Some(original.raw_answer.clone());
        }
        checked.first = Some(first);
    }
    let generation_s = started.elapsed().as_secs_f64();
    Ok(PipelineRun {
        method: opts.method,
        context,
        dyretriever: dy_trace,
        similar: similar
            .into_iter()
            .map(|(c, score)| SimilarItem {
                qualname: c.qualname,
                path: c.path,
                score,
            })
            .collect(),
        generation,
        steps,
        grounding: checked,
        similarity_s,
        dyretriever_s,
        generation_s,
    })
}

/// What `--select tests` found: the trace, each answer's score, and the test writer's
/// response.
struct Judged {
    trace: TestsTrace,
    passed: Vec<Option<TestScore>>,
    response: Option<GenerateResponse>,
}

/// `--select tests`: the model writes tests for a Python target from its file, and `runner` runs
/// them against each `eligible` body. With one distinct eligible answer (nothing to choose), or
/// without a runner, a file view or tests, nothing passes (the trace says why) and `review`
/// decides; an engine failure other than a refused request ends the run.
fn judge(
    llm: &mut dyn Llm,
    view: &MaskedView,
    target: &Target,
    opts: &PipelineOptions,
    runner: Option<&dyn TestRunner>,
    bodies: &[&str],
    eligible: &[bool],
) -> Result<Judged, PipelineError> {
    let mut judged = Judged {
        trace: TestsTrace::default(),
        passed: vec![None; bodies.len()],
        response: None,
    };
    let why = match runner {
        _ if distinct_eligible(bodies, eligible) < 2 => {
            "one answer to choose from: no tests needed"
        }
        None => "no way to run tests was given",
        Some(_) if target.lang != crate::repo::Lang::Python => {
            "tests are written for Python targets only"
        }
        Some(runner) => {
            let budget = opts.generation.local_budget;
            match model_tests::write_in_view(llm, view, target, budget) {
                Ok(None) => "the target's file is not in view",
                Ok(Some((written, response))) => {
                    judged.response = Some(response);
                    if written.names.is_empty() {
                        judged.trace.written = Some(written);
                        "the model's answer holds no test function"
                    } else {
                        let (passed, error) =
                            model_tests::run_pool(runner, &written, bodies, eligible);
                        judged.passed = passed;
                        judged.trace = TestsTrace {
                            written: Some(written),
                            error,
                        };
                        return Ok(judged);
                    }
                }
                Err(e @ (LlmError::InvalidRequest(_) | LlmError::PromptTooLong { .. })) => {
                    judged.trace.error = Some(e.to_string());
                    return Ok(judged);
                }
                Err(e) => return Err(GenerateError::Llm(e).into()),
            }
        }
    };
    judged.trace.error = Some(why.to_string());
    Ok(judged)
}

/// How many different bodies the `eligible` answers have.
fn distinct_eligible(bodies: &[&str], eligible: &[bool]) -> usize {
    let mut distinct: Vec<&str> = (0..bodies.len())
        .filter(|&i| eligible[i])
        .map(|i| bodies[i])
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    distinct.len()
}

/// The examples repair round for `kept` (a chat answer with `problems`, which fails the
/// docstring's examples `written`): doctest's report of the failing examples goes back to the
/// model in `kept`'s conversation, decoded as `original` was; the answer is kept when it has no
/// more problems and passes the examples. An LLM failure ends the run.
#[allow(clippy::too_many_arguments)]
fn examples_repair(
    llm: &mut dyn Llm,
    view: &MaskedView,
    target: &Target,
    runner: &dyn TestRunner,
    written: &ModelTests,
    kept: &Generation,
    problems: usize,
    original: &Generation,
) -> Result<ExamplesRepair, PipelineError> {
    let mut out = ExamplesRepair {
        trace: ExamplesRepairTrace::default(),
        answer: None,
    };
    if kept.format != PromptFormat::Chat {
        out.trace.error = Some("the kept answer has no conversation (infilled)".into());
        return Ok(out);
    }
    let tail = match runner.failure(&kept.completion.body, written) {
        Ok(Some(tail)) => tail,
        Ok(None) => {
            out.trace.error = Some("the examples passed when run again".into());
            return Ok(out);
        }
        Err(e) => {
            out.trace.error = Some(e);
            return Ok(out);
        }
    };
    let Some(report) = model_tests::examples_failures(&tail) else {
        // A timeout or a collection error: its last line says which.
        let last = tail
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        out.trace.error = Some(format!(
            "the examples' run names no failed example: {}",
            last.trim()
        ));
        return Ok(out);
    };
    let mut base = kept.clone();
    base.request.sampling = original.request.sampling;
    let request = Retry::Repair(prompts::examples_repair(&report));
    out.trace.report = Some(report);
    let answer = retry(llm, target, &base, &[request]).pop();
    let mut answer = match answer {
        Some(Ok(g)) => g,
        Some(Err(GenerateError::Llm(e))) => return Err(GenerateError::Llm(e).into()),
        Some(Err(e)) => {
            out.trace.error = Some(e.to_string());
            return Ok(out);
        }
        None => return Ok(out),
    };
    let found =
        grounding::check_importing(view, target, &mut answer.completion, &answer.raw_answer)
            .weight();
    out.trace.answer = Some(answer.raw_answer.clone());
    out.trace.problems = Some(found);
    if found <= problems {
        match runner.run(&answer.completion.body, written) {
            Ok(each) => {
                let passed = TestScore::of(&each).passed > 0;
                out.trace.passed = Some(passed);
                out.trace.kept = passed;
            }
            Err(e) => out.trace.error = Some(e),
        }
    }
    out.answer = Some(answer);
    Ok(out)
}

/// Another answer (a sample, or the infilled one) checked for names: its trace, and the answer
/// when there is one. An LLM failure ends the run; other errors (an answer that doesn't parse)
/// are traced.
fn candidate(
    answer: Result<Generation, GenerateError>,
    seed: u64,
    view: &MaskedView,
    target: &Target,
) -> Result<(SampleTrace, Option<Generation>), PipelineError> {
    let mut trace = SampleTrace {
        seed,
        check: None,
        error: None,
        tokens: (0, 0),
    };
    match answer {
        Ok(mut candidate) => {
            let r = &candidate.response;
            trace.tokens = (r.prompt_tokens, r.generated_tokens);
            trace.check = Some(grounding::check_importing(
                view,
                target,
                &mut candidate.completion,
                &candidate.raw_answer,
            ));
            Ok((trace, Some(candidate)))
        }
        Err(GenerateError::Llm(e)) => Err(GenerateError::Llm(e).into()),
        Err(e) => {
            trace.error = Some(e.to_string());
            Ok((trace, None))
        }
    }
}

/// The similarity part of the method's context, best first, with scores.
fn similar_context(
    view: &MaskedView,
    target: &Target,
    embeddings: Option<&Embeddings>,
    opts: &PipelineOptions,
) -> Result<Vec<(ContextItem, f32)>, PipelineError> {
    let query = text::query_text(&target.signature, target.docstring.as_deref());
    let embeddings = || embeddings.ok_or(PipelineError::NoEmbeddings(opts.method.name()));
    let hits = match (opts.method, opts.similarity) {
        (Method::Simplerag, _) => {
            let e = embeddings()?;
            let found = slices::top_k(view, e.embedder, e.index, &query, opts.top_sim)?;
            return Ok(found
                .into_iter()
                .map(|s| {
                    let item = ContextItem {
                        qualname: s.name(),
                        path: s.path.clone(),
                        start_line: s.start_line,
                        source: "simplerag",
                        code: s.code.clone(),
                        id: None,
                    };
                    (item, s.score)
                })
                .collect());
        }
        (m, _) if !m.uses_similar_functions() => return Ok(Vec::new()),
        (_, Similarity::Dense) => {
            let e = embeddings()?;
            dense::top_k(view, e.embedder, e.index, &query, opts.top_sim)?
        }
        (_, Similarity::Bm25) => bm25::top_k(view, &query, opts.top_sim),
    };
    let source = match opts.similarity {
        Similarity::Dense => "dense",
        Similarity::Bm25 => "bm25",
    };
    Ok(hits
        .iter()
        .filter_map(|h| {
            let (f, code) = (view.function(h.id)?, snippet_code(view, h.id)?);
            let item = ContextItem {
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                start_line: f.span.start_line,
                source,
                code,
                id: Some(h.id),
            };
            Some((item, h.score))
        })
        .collect())
}

/// A visible function's code as a context snippet, dedented as a whole (its first line starts
/// at the definition's column in the file); `None` for hidden functions and for `@overload`
/// stubs, which only repeat the implementation's signature.
fn snippet_code(view: &MaskedView, id: FnId) -> Option<String> {
    let f = view.function(id)?;
    let signature = view.signature_text(id)?;
    if signature
        .lines()
        .any(|l| matches!(l.trim(), "@overload" | "@typing.overload" | "@t.overload"))
    {
        return None;
    }
    let code = view.function_code(id)?;
    let repo = view.repository();
    let column = repo
        .file(view.function_file(id))
        .text
        .as_deref()
        .and_then(|t| t.get(..f.span.start_byte))
        .map_or(0, |before| {
            before.len() - before.rfind('\n').map_or(0, |i| i + 1)
        });
    Some(dedent(&format!("{}{code}", " ".repeat(column))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::model_tests::TestOutcome;
    use crate::llm::{FinishReason, GenerateRequest, GenerateResponse, LlmError, Prompt, Scored};
    use crate::repo::{resolve_target, temp_repository};

    /// Answers name a helper that doesn't exist, except greedy ones when `greedy_clean`, the
    /// sampled one with seed `good_seed`, and fill-in-the-middle ones when `infill_clean`.
    struct Scripted {
        greedy_clean: bool,
        /// The clean greedy answer's body, other than `return a + b`.
        greedy_body: Option<&'static str>,
        good_seed: u64,
        infill_clean: bool,
        /// Scores reviews (an answer returning `a + b` fits the docstring best); otherwise
        /// scoring is refused, as by a server.
        scores: bool,
        calls: Vec<Sampling>,
    }

    impl Llm for Scripted {
        fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
            self.calls.push(request.sampling);
            if let Prompt::Chat(m) = &request.prompt {
                let last = &m[m.len() - 1].content;
                if last.contains("the examples in its docstring") {
                    assert!(last.contains("Got:\n    4\n"), "{last}");
                    let text = "```python\ndef total(a, b):\n    return b + a\n```";
                    return Ok(GenerateResponse::new(text.to_string(), FinishReason::Stop));
                }
                if m[1].content.contains("`test_generated_1`") {
                    let tests = "```python\nfrom calc import total\n\n\
                                 def test_generated_1():\n    assert total(1, 2) == 3\n\n\
                                 def test_generated_2():\n    assert total(0, 0) == 0\n```";
                    return Ok(GenerateResponse {
                        prompt_tokens: 200,
                        generated_tokens: 30,
                        ..GenerateResponse::new(tests.to_string(), FinishReason::Stop)
                    });
                }
            }
            let infill = matches!(request.prompt, Prompt::Text(_));
            let clean = match request.sampling {
                _ if infill => self.infill_clean,
                Sampling::Greedy => self.greedy_clean,
                Sampling::Sample { seed, .. } => seed == self.good_seed,
            };
            let body = if clean {
                match request.sampling {
                    Sampling::Greedy if !infill => self.greedy_body.unwrap_or("return a + b"),
                    _ => "return a + b",
                }
            } else {
                "return add_numbers(a, b)"
            };
            let text = if infill {
                format!("    {body}\n")
            } else {
                format!("```python\ndef total(a, b):\n    {body}\n```")
            };
            Ok(GenerateResponse {
                prompt_tokens: 100,
                generated_tokens: 10,
                ..GenerateResponse::new(text, FinishReason::Stop)
            })
        }
        fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
            Ok(match prompt {
                Prompt::Chat(m) => m.iter().map(|m| m.content.len() / 4).sum(),
                _ => 0,
            })
        }
        fn score(&mut self, prompt: &Prompt, continuation: &str) -> Result<Scored, LlmError> {
            if !self.scores {
                return Err(LlmError::InvalidRequest("scripted does not score".into()));
            }
            let Prompt::Chat(m) = prompt else {
                panic!("reviews and likelihoods are chat prompts");
            };
            if continuation.starts_with("```python\n") {
                // A likelihood: a token per line, `+=` lines likely, `return a + b` not.
                let line = |l: &str| match l {
                    _ if l.contains("+=") => -0.1,
                    _ if l.contains("return a + b") => -3.0,
                    _ => -1.0,
                };
                return Ok(Scored {
                    logprob: continuation.lines().map(line).sum(),
                    prompt_tokens: 30,
                    tokens: continuation.lines().count(),
                });
            }
            assert!(
                continuation.starts_with("Sum of two numbers."),
                "{continuation}"
            );
            let fits = m[0].content.contains("return a + b");
            Ok(Scored {
                logprob: if fits { -1.0 } else { -20.0 },
                prompt_tokens: 40,
                tokens: 5,
            })
        }
        fn context_window(&self) -> usize {
            32_768
        }
        fn name(&self) -> &str {
            "scripted"
        }
    }

    fn run_with(llm: Scripted, samples: usize) -> (PipelineRun, Vec<Sampling>) {
        run_selecting(llm, samples, Select::First)
    }

    fn run_selecting(
        llm: Scripted,
        samples: usize,
        select: Select,
    ) -> (PipelineRun, Vec<Sampling>) {
        run_judged(llm, samples, select, None)
    }

    fn run_judged(
        llm: Scripted,
        samples: usize,
        select: Select,
        tests: Option<&dyn TestRunner>,
    ) -> (PipelineRun, Vec<Sampling>) {
        let source = "def total(a, b):\n    \"\"\"Sum of two numbers.\"\"\"\n    return a + b\n";
        run_on(source, llm, samples, select, tests)
    }

    /// The pipeline on `calc.total` as `source` (calc.py) defines it.
    fn run_on(
        source: &str,
        mut llm: Scripted,
        samples: usize,
        select: Select,
        tests: Option<&dyn TestRunner>,
    ) -> (PipelineRun, Vec<Sampling>) {
        let (_dir, repo) = temp_repository(&[("calc.py", source)]);
        let id = resolve_target(&repo, "calc.total").expect("target");
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).expect("target");
        let opts = PipelineOptions {
            samples,
            select,
            ..PipelineOptions::new(Method::Direct)
        };
        let run = run(&mut llm, &view, &target, None, &opts, tests).expect("run");
        (run, llm.calls)
    }

    fn flagged(good_seed: u64) -> Scripted {
        Scripted {
            greedy_clean: false,
            greedy_body: None,
            good_seed,
            infill_clean: false,
            scores: true,
            calls: Vec::new(),
        }
    }

    #[test]
    fn a_sampled_candidate_without_problems_replaces_a_flagged_answer() {
        let (run, calls) = run_with(flagged(2), 3);
        // The first answer, then the repair and every sample together; the first clean sample
        // is kept, and seed 3, drawn with it, changes nothing.
        assert_eq!(calls.len(), 5);
        assert_eq!(run.grounding.samples.len(), 3);
        assert_eq!(run.grounding.kept_sample, Some(2));
        assert!(!run.grounding.kept_repair);
        let first = run
            .grounding
            .first_answer
            .as_deref()
            .expect("first answer kept");
        assert!(first.contains("add_numbers"));
        assert!(run.generation.completion.function.contains("return a + b"));
        assert_eq!(run.generation_tokens(), (500, 50));
    }

    #[test]
    fn without_a_better_candidate_the_first_answer_stands() {
        let (run, calls) = run_with(flagged(99), 2);
        // The first answer, the repair and two samples, then the infilled one.
        assert_eq!(calls.len(), 5);
        assert_eq!(run.grounding.kept_sample, None);
        assert!(!run.grounding.kept_infill);
        let infill = run.grounding.infill.as_ref().expect("infill tried");
        assert_eq!(infill.check.as_ref().map(|c| c.problems.len()), Some(1));
        assert_eq!(run.grounding.first_answer, None);
        assert!(run.generation.completion.function.contains("add_numbers"));
        // No samples asked for: the first answer, the repair and the infilled one only.
        let (run, calls) = run_with(flagged(1), 0);
        assert_eq!((calls.len(), run.grounding.samples.len()), (3, 0));
    }

    #[test]
    fn an_answer_that_does_not_parse_ranks_below_any_that_does() {
        // The greedy answer (and so its repair) stops parsing; every sample and the infilled
        // answer call a name that does not exist: one problem each, but they parse.
        let broken = || Scripted {
            greedy_clean: true,
            greedy_body: Some("return sum(a=a, a=b)"),
            ..flagged(99)
        };
        let (run, _) = run_with(broken(), 2);
        let g = &run.grounding;
        let first = g.first.as_ref().expect("checked");
        assert_eq!(first.problems.len(), 1);
        assert_eq!(first.weight(), grounding::SYNTAX_WEIGHT);
        assert_eq!(g.kept_sample, Some(1));
        assert!(run.generation.completion.body.contains("add_numbers"));
        let (run, _) = run_selecting(broken(), 2, Select::Review);
        let weights: Vec<(&str, usize)> = run
            .grounding
            .candidates
            .iter()
            .map(|c| (c.label.as_str(), c.problems))
            .collect();
        let syntax = grounding::SYNTAX_WEIGHT;
        assert_eq!(
            weights,
            [
                ("first", syntax),
                ("repair", syntax),
                ("sample1", 1),
                ("sample2", 1),
                ("infill", 1)
            ]
        );
        assert_eq!(run.grounding.kept_selected.as_deref(), Some("sample1"));
    }

    #[test]
    fn a_clean_infilled_answer_replaces_a_chat_answer_still_flagged() {
        let llm = Scripted {
            infill_clean: true,
            ..flagged(99)
        };
        let (run, calls) = run_with(llm, 1);
        assert_eq!(calls.len(), 4);
        assert!(run.grounding.kept_infill);
        assert_eq!(run.generation.format, PromptFormat::Infill);
        let function = &run.generation.completion.function;
        assert!(
            function.starts_with("def total(a, b):\n") && function.ends_with("    return a + b\n"),
            "{function:?}"
        );
        assert!(run
            .grounding
            .first_answer
            .as_deref()
            .unwrap()
            .contains("add_numbers"));
        assert_eq!(run.generation_tokens(), (400, 40));
    }

    #[test]
    fn a_clean_answer_is_neither_repaired_nor_sampled() {
        let clean = Scripted {
            greedy_clean: true,
            greedy_body: None,
            good_seed: 1,
            infill_clean: true,
            scores: true,
            calls: Vec::new(),
        };
        let (run, calls) = run_with(clean, 3);
        assert_eq!(calls, vec![Sampling::Greedy]);
        assert!(run.grounding.repaired.is_none() && run.grounding.samples.is_empty());
    }

    #[test]
    fn a_standard_module_the_file_never_imports_is_imported_in_the_body_not_repaired() {
        let reads_a_module = Scripted {
            greedy_body: Some("return operator.add(a, b)"),
            ..flagged(99)
        };
        let reads_a_module = Scripted {
            greedy_clean: true,
            ..reads_a_module
        };
        let (run, calls) = run_with(reads_a_module, 3);
        assert_eq!(calls, vec![Sampling::Greedy]);
        let first = run.grounding.first.as_ref().expect("checked");
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        assert_eq!(first.added_imports, ["import operator"]);
        assert_eq!(
            run.generation.completion.function,
            "def total(a, b):\n    import operator\n    return operator.add(a, b)\n"
        );
    }

    /// Clean answers, the greedy one unlike the others (which return `a + b`), sample 1 clean.
    fn outlier() -> Scripted {
        Scripted {
            greedy_clean: true,
            greedy_body: Some("total = a\n    total += b\n    return total"),
            good_seed: 1,
            infill_clean: true,
            scores: true,
            calls: Vec::new(),
        }
    }

    #[test]
    fn central_selection_draws_every_candidate_and_keeps_the_one_the_others_agree_with() {
        // A clean greedy answer unlike the rest: the samples and the infilled answer are drawn
        // anyway, and of the three clean answers the two that agree outvote it.
        let (run, calls) = run_selecting(outlier(), 3, Select::Central);
        assert_eq!(calls.len(), 5, "greedy, three samples, the infilled answer");
        let g = &run.grounding;
        assert!(g.repaired.is_none() && !g.kept_infill && g.kept_sample.is_none());
        let labels: Vec<(&str, usize)> = g
            .candidates
            .iter()
            .map(|c| (c.label.as_str(), c.problems))
            .collect();
        assert_eq!(
            labels,
            [
                ("first", 0),
                ("sample1", 0),
                ("sample2", 1),
                ("sample3", 1),
                ("infill", 0)
            ]
        );
        assert_eq!(g.kept_selected.as_deref(), Some("sample1"));
        assert!(run.generation.completion.body.contains("return a + b"));
        assert!(g.first_answer.as_deref().unwrap().contains("total += b"));

        // A flagged greedy answer: the pool adds the repair; only clean answers are eligible,
        // and the first of equals in drawing order is kept.
        let (run, calls) = run_selecting(flagged(2), 3, Select::Central);
        assert_eq!(
            calls.len(),
            6,
            "greedy, repair and samples, the infilled answer"
        );
        let g = &run.grounding;
        assert_eq!(g.candidates.len(), 6);
        assert_eq!(g.kept_selected.as_deref(), Some("sample2"));
        assert_eq!(
            g.kept_sample,
            Some(2),
            "what the default would keep is traced too"
        );
    }

    #[test]
    fn review_selection_scores_the_eligible_answers_and_falls_back_to_centrality() {
        let (run, calls) = run_selecting(outlier(), 3, Select::Review);
        assert_eq!(calls.len(), 5, "greedy, three samples, the infilled answer");
        let g = &run.grounding;
        let reviews: Vec<(&str, Option<f64>)> = g
            .candidates
            .iter()
            .map(|c| (c.label.as_str(), c.review))
            .collect();
        // Only the answers with the fewest problems are reviewed.
        assert_eq!(
            reviews,
            [
                ("first", Some(-20.0)),
                ("sample1", Some(-1.0)),
                ("sample2", None),
                ("sample3", None),
                ("infill", Some(-1.0))
            ]
        );
        assert_eq!(g.kept_selected.as_deref(), Some("sample1"));
        assert_eq!(g.review_error, None);
        // Five answers of 100 prompt tokens, three reviews of 40 + 5.
        assert_eq!(
            run.generation_tokens().0,
            5 * 100 + 3 * 45,
            "the reviews' tokens are counted"
        );
        // The timed steps account for the same tokens.
        let steps: Vec<(&str, usize, usize)> = run
            .steps
            .iter()
            .map(|s| (s.step, s.prompt_tokens, s.generated_tokens))
            .collect();
        assert_eq!(
            steps,
            [
                ("first", 100, 10),
                ("retries", 300, 30),
                ("infill", 100, 10),
                ("review", 135, 0)
            ]
        );

        // An engine that cannot score: the error is traced and centrality alone chooses.
        let run = unscored(Select::Review);
        assert!(run.grounding.candidates.iter().all(|c| c.review.is_none()));
    }

    /// `select` on an engine that cannot score: the error is traced and centrality alone
    /// chooses (sample 1, which the infilled answer agrees with).
    fn unscored(select: Select) -> PipelineRun {
        let (run, _) = run_selecting(
            Scripted {
                scores: false,
                ..outlier()
            },
            3,
            select,
        );
        let g = &run.grounding;
        let error = g.review_error.as_deref().unwrap_or_default();
        assert!(error.contains("does not score"), "{error}");
        assert_eq!(g.kept_selected.as_deref(), Some("sample1"));
        run
    }

    #[test]
    fn likely_selection_keeps_the_body_likeliest_per_token_and_falls_back_to_review() {
        let (run, calls) = run_selecting(outlier(), 3, Select::Likely);
        assert_eq!(calls.len(), 5, "greedy, three samples, the infilled answer");
        let g = &run.grounding;
        let scored: Vec<(&str, Option<usize>)> = g
            .candidates
            .iter()
            .map(|c| (c.label.as_str(), c.likelihood_tokens))
            .collect();
        // Only the eligible answers are scored, by their body's lines (and the closing fence).
        assert_eq!(
            scored,
            [
                ("first", Some(4)),
                ("sample1", Some(2)),
                ("sample2", None),
                ("sample3", None),
                ("infill", Some(2))
            ]
        );
        let mean = |i: usize| g.candidates[i].likelihood.unwrap();
        assert!((mean(0) - -3.1 / 4.0).abs() < 1e-9 && (mean(1) - -2.0).abs() < 1e-9);
        // The outlier that centrality and the review turn down is the likeliest here.
        assert_eq!(g.kept_selected.as_deref(), Some("first"));
        assert!(g.candidates.iter().all(|c| c.review.is_none()));
        let steps: Vec<&str> = run.steps.iter().map(|s| s.step).collect();
        assert_eq!(steps, ["first", "retries", "infill", "likelihood"]);
        // The head once, then three answers: 30 prompt tokens each, with their lines.
        let head = run.steps[3].prompt_tokens;
        assert!(head > 4 * 30, "{head}");

        // An engine that cannot score: neither likelihoods nor reviews, centrality chooses.
        let run = unscored(Select::Likely);
        assert!(run
            .grounding
            .candidates
            .iter()
            .all(|c| c.likelihood.is_none()));
    }

    /// Runs the scripted tests by the answer's text: every answer passes the first, `second`
    /// says how the second ends; records each body it was given.
    /// `examples` says whether the docstring's examples pass with a body.
    struct ByBody {
        ran: std::sync::Mutex<Vec<String>>,
        second: fn(&str) -> TestOutcome,
        examined: std::sync::Mutex<Vec<String>>,
        examples: fn(&str) -> bool,
        /// The failed examples' output (doctest's report, unless a test sets another).
        report: &'static str,
    }

    impl ByBody {
        fn new(second: fn(&str) -> TestOutcome) -> ByBody {
            ByBody {
                ran: Default::default(),
                second,
                examined: Default::default(),
                examples: |_| false,
                report: "E       AssertionError: ****\nE         Line 3, in total\n\
                    E         Failed example:\nE             total(1, 2)\n\
                    E         Expected:\nE             3\nE         Got:\nE             4\n\
                    E       assert 1 == 0\n",
            }
        }
    }

    impl TestRunner for ByBody {
        fn run(&self, body: &str, tests: &ModelTests) -> Result<Vec<TestOutcome>, String> {
            if tests.names == ["test_docstring_examples"] {
                assert!(tests.code.contains(">>> total(1, 2)"), "{}", tests.code);
                self.examined.lock().unwrap().push(body.to_string());
                return Ok(vec![match (self.examples)(body) {
                    true => TestOutcome::Passed,
                    false => TestOutcome::Failed,
                }]);
            }
            assert_eq!(tests.names, ["test_generated_1", "test_generated_2"]);
            self.ran.lock().unwrap().push(body.to_string());
            Ok(vec![TestOutcome::Passed, (self.second)(body)])
        }

        /// doctest's report in pytest's words, when the examples fail.
        fn failure(&self, body: &str, tests: &ModelTests) -> Result<Option<String>, String> {
            assert_eq!(tests.names, ["test_docstring_examples"]);
            Ok((!(self.examples)(body)).then(|| self.report.to_string()))
        }
    }

    /// How many different bodies the candidates `which` picks have.
    fn distinct_bodies(g: &GroundingTrace, which: fn(&CandidateTrace) -> bool) -> usize {
        let bodies: Vec<&str> = g
            .candidates
            .iter()
            .filter(|c| which(c))
            .map(|c| c.body.as_str())
            .collect();
        let eligible = vec![true; bodies.len()];
        distinct_eligible(&bodies, &eligible)
    }

    #[test]
    fn answers_passing_the_docstrings_examples_come_first() {
        let with_examples = "def total(a, b):\n    \"\"\"Sum of two numbers.\n\n    \
                             >>> total(1, 2)\n    3\n    \"\"\"\n    return a + b\n";
        // Only the outlier's running total passes them: it overrules the review (which keeps
        // `sample1`, see above) and the model's tests (which `return a + b` passes as well).
        let mut runner = ByBody::new(|_| TestOutcome::Passed);
        runner.examples = |body| body.contains("total += b");
        for select in [Select::Review, Select::Central, Select::Tests] {
            let (run, _) = run_on(with_examples, outlier(), 3, select, Some(&runner));
            let g = &run.grounding;
            assert_eq!(g.kept_selected.as_deref(), Some("first"), "{select:?}");
            let examples: Vec<Option<bool>> =
                g.candidates.iter().map(|c| c.examples_passed).collect();
            // The answers with the fewest problems only, each distinct body once.
            assert_eq!(examples, [Some(true), Some(false), None, None, Some(false)]);
            assert!(run.steps.iter().any(|s| s.step == "examples"));
            let distinct = distinct_bodies(g, |c| c.examples_passed.is_some());
            let mut examined = runner.examined.lock().unwrap();
            assert_eq!(examined.len(), distinct, "{examined:?}");
            examined.clear();
        }

        // Examples no answer passes: the review decides, then the model sees what the examples
        // gave with its choice; an answer that still fails them is not kept.
        let runner = ByBody::new(|_| TestOutcome::Passed);
        let (run, calls) = run_on(with_examples, outlier(), 3, Select::Review, Some(&runner));
        assert_eq!(run.grounding.kept_selected.as_deref(), Some("sample1"));
        let passed = run.grounding.candidates.iter().map(|c| c.examples_passed);
        assert!(passed.clone().all(|p| p != Some(true)) && passed.clone().any(|p| p.is_some()));
        let repair = run
            .grounding
            .examples_repair
            .as_ref()
            .expect("a repair round");
        assert!(repair
            .report
            .as_deref()
            .unwrap()
            .contains("Expected:\n    3\nGot:\n    4"));
        assert_eq!(
            (repair.problems, repair.passed, repair.kept),
            (Some(0), Some(false), false)
        );
        // Greedy, as the first answer was, though `sample1`'s conversation.
        assert_eq!(calls.last(), Some(&Sampling::Greedy));
        let calls_with_round = calls.len();
        let steps: Vec<&str> = run.steps.iter().map(|s| s.step).collect();
        assert_eq!(steps.last(), Some(&"examples_repair"));
        // The repaired answer passes them: it is kept.
        let mut runner = ByBody::new(|_| TestOutcome::Passed);
        runner.examples = |body| body.contains("b + a");
        let (run, _) = run_on(with_examples, outlier(), 3, Select::Review, Some(&runner));
        assert_eq!(
            run.grounding.kept_selected.as_deref(),
            Some("examples_repair")
        );
        assert_eq!(run.generation.completion.body, "return b + a\n");
        assert!(run.grounding.examples_repair.as_ref().unwrap().kept);
        assert!(run.grounding.first_answer.is_some());

        // A run that names no failed example (a timeout): no round, and the trace says why.
        let mut runner = ByBody::new(|_| TestOutcome::Passed);
        runner.report = "Timeout (10 s)\n\n";
        let (run, calls) = run_on(with_examples, outlier(), 3, Select::Review, Some(&runner));
        let repair = run.grounding.examples_repair.as_ref().unwrap();
        assert_eq!(
            repair.error.as_deref(),
            Some("the examples' run names no failed example: Timeout (10 s)")
        );
        assert_eq!(
            calls.len(),
            calls_with_round - 1,
            "a call for the round: {calls:?}"
        );

        // A docstring without examples runs nothing; neither does `first`, which has no pool.
        let mut runner = ByBody::new(|_| TestOutcome::Passed);
        runner.examples = |_| panic!("nothing to run");
        let (run, _) = run_judged(outlier(), 3, Select::Review, Some(&runner));
        assert_eq!(run.grounding.kept_selected.as_deref(), Some("sample1"));
        assert!(!run.steps.iter().any(|s| s.step == "examples"));
        run_on(with_examples, outlier(), 3, Select::First, Some(&runner));
    }

    #[test]
    fn tests_selection_keeps_the_answer_passing_most_of_the_models_tests() {
        // The outlier's running total passes both tests, `return a + b` one.
        let runner = ByBody::new(|body| match body.contains("total += b") {
            true => TestOutcome::Passed,
            false => TestOutcome::Failed,
        });
        let (run, calls) = run_judged(outlier(), 3, Select::Tests, Some(&runner));
        assert_eq!(
            calls.len(),
            6,
            "greedy, three samples, the infilled answer, the tests"
        );
        let g = &run.grounding;
        let passed: Vec<(&str, Option<usize>)> = g
            .candidates
            .iter()
            .map(|c| (c.label.as_str(), c.tests_passed))
            .collect();
        // Only the answers with the fewest problems run, each distinct body once.
        assert_eq!(
            passed,
            [
                ("first", Some(2)),
                ("sample1", Some(1)),
                ("sample2", None),
                ("sample3", None),
                ("infill", Some(1))
            ]
        );
        let distinct = distinct_bodies(g, |c| c.tests_passed.is_some());
        let ran = runner.ran.lock().unwrap();
        assert_eq!(ran.len(), distinct, "{ran:?}");
        // The review prefers `sample1` (see above); the tests overrule it.
        assert_eq!(g.kept_selected.as_deref(), Some("first"));
        let tests = g.tests.as_ref().expect("traced");
        assert_eq!(tests.error, None);
        let written = tests.written.as_ref().expect("written");
        assert!(written.code.starts_with("from calc import total\n"));
        let steps: Vec<&str> = run.steps.iter().map(|s| s.step).collect();
        assert_eq!(steps, ["first", "retries", "infill", "review", "tests"]);
        assert_eq!(
            (run.steps[4].prompt_tokens, run.steps[4].generated_tokens),
            (200, 30)
        );

        // Both pass one test, and `return a + b` raises in the other: an answer that returns
        // a value the test did not expect is kept over one that raises.
        let runner = ByBody::new(|body| match body.contains("total += b") {
            true => TestOutcome::Failed,
            false => TestOutcome::Raised,
        });
        let (run, _) = run_judged(outlier(), 3, Select::Tests, Some(&runner));
        let g = &run.grounding;
        let raised: Vec<Option<usize>> = g.candidates.iter().map(|c| c.tests_raised).collect();
        assert_eq!(raised, [Some(0), Some(1), None, None, Some(1)]);
        assert_eq!(g.kept_selected.as_deref(), Some("first"));

        // Without a way to run them, no tests are written and the review decides.
        let (run, calls) = run_judged(outlier(), 3, Select::Tests, None);
        assert_eq!(calls.len(), 5);
        let g = &run.grounding;
        assert_eq!(g.kept_selected.as_deref(), Some("sample1"));
        let error = g.tests.as_ref().and_then(|t| t.error.as_deref());
        assert_eq!(error, Some("no way to run tests was given"));
        assert!(g.candidates.iter().all(|c| c.tests_passed.is_none()));
    }
}
