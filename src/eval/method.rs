//! The seam where generation pipelines plug into batch evaluation.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::body;
use super::runner::read_target;
use super::tasks::FunctionTask;
use crate::retrieve::dyretriever::ExpandMode;

/// Time and tokens spent in one phase of a pipeline (indexing, retrieval, generation, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    pub seconds: f64,
    #[serde(default)]
    pub tokens_in: u64,
    #[serde(default)]
    pub tokens_out: u64,
}

/// What a method produced for one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Generated {
    /// The function body (DevEval completion); indentation is normalised when spliced.
    pub completion: String,
    /// Qualified names present in the final context (definitions and the names their code
    /// uses in scope), for dependency recall; `None` for methods that retrieve nothing.
    pub context: Option<Vec<String>>,
    /// The retrieved definitions alone (qualified names), for the stricter recall.
    #[serde(default)]
    pub definitions: Option<Vec<String>>,
    pub phases: Vec<Phase>,
    /// Anything worth inspecting later (prompts, hops, candidates); stored per task as is.
    pub trace: serde_json::Value,
}

/// A task as a method sees it: the record and where the project sources live.
pub struct MethodInput<'a> {
    pub task: &'a FunctionTask,
    /// The root `task.project_path` and `task.completion_path` are relative to. Methods must
    /// not read the target's body or the project's tests (no leakage) and must not write here.
    pub source_root: &'a Path,
    /// Set when the user interrupts the run: a long generation may stop early (its error is
    /// then not recorded, so the task is generated again on resume).
    pub cancel: &'a AtomicBool,
}

pub type MethodError = Box<dyn std::error::Error + Send + Sync>;

/// A generation pipeline. Batch runs call `generate` once per task, one task at a time
/// (so a method may keep model state), and run tests for finished tasks in parallel.
pub trait Method {
    /// Stable name, recorded in the run directory and shown in reports.
    fn name(&self) -> &str;
    fn generate(&mut self, input: &MethodInput) -> Result<Generated, MethodError>;
}

/// The names `--method` accepts.
pub const BUILTIN: [&str; 9] = [
    "reference",
    "not-implemented",
    "direct",
    "dense",
    "bm25",
    "simplerag",
    "dyretriever",
    "dycoder",
    "dycoder-bm25",
];

/// How the generating methods run. Each switch away from the default adds a suffix to the
/// method's name (`dense-nolocal`), so that runs of variants stay apart.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The generator: alias, local path or Hugging Face repo id.
    pub model: String,
    /// Show the target's own file in the prompt (off: the papers' layout).
    pub local: bool,
    /// DyRetriever's expand step.
    pub expand: ExpandMode,
    /// DyRetriever's entry points from the LLM alone (the paper).
    pub paper_walk: bool,
    /// Check the answer's names and repair once.
    pub grounding: bool,
    /// Sampled candidates when the repaired answer still has problems.
    pub samples: usize,
    /// The embedder (for methods with dense similarity) and its device.
    pub embed_model: String,
    pub embed_device: String,
    /// Where the projects' vectors are kept between runs (never inside the projects).
    pub vectors_dir: PathBuf,
}

impl Settings {
    pub fn new(model: &str, vectors_dir: &Path) -> Self {
        Self {
            model: model.to_string(),
            local: true,
            expand: ExpandMode::default(),
            paper_walk: false,
            grounding: true,
            samples: crate::generate::pipeline::SAMPLES,
            embed_model: crate::embed::DEFAULT_MODEL.to_string(),
            embed_device: "cpu".to_string(),
            vectors_dir: vectors_dir.to_path_buf(),
        }
    }

    /// `name` with a suffix per switch that differs from the default.
    pub fn variant_name(&self, name: &str) -> String {
        let mut out = name.to_string();
        if !self.local {
            out.push_str("-nolocal");
        }
        if !self.grounding {
            out.push_str("-nogrounding");
        } else if self.samples != crate::generate::pipeline::SAMPLES {
            out.push_str(&format!("-samples{}", self.samples));
        }
        if self.paper_walk {
            out.push_str("-paperwalk");
        }
        if self.expand != ExpandMode::default() {
            out.push_str(&format!("-expand-{}", self.expand.name()));
        }
        if self.embed_model != crate::embed::DEFAULT_MODEL {
            let model: String = self
                .embed_model
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            out.push_str(&format!("-embed-{model}"));
        }
        out
    }
}

/// The method called `name`, configured by `settings` where it generates.
pub fn builtin(name: &str, settings: &Settings) -> Result<Box<dyn Method>, MethodError> {
    use crate::generate::pipeline::{Method as Kind, Similarity};
    let (kind, similarity) = match name {
        "reference" => return Ok(Box::new(Reference)),
        "not-implemented" => return Ok(Box::new(NotImplemented)),
        "direct" => (Kind::Direct, Similarity::Dense),
        "dense" => (Kind::Dense, Similarity::Dense),
        "bm25" => (Kind::Dense, Similarity::Bm25),
        "simplerag" => (Kind::Simplerag, Similarity::Dense),
        "dyretriever" => (Kind::Dyretriever, Similarity::Dense),
        "dycoder" => (Kind::Dycoder, Similarity::Dense),
        "dycoder-bm25" => (Kind::Dycoder, Similarity::Bm25),
        _ => {
            return Err(
                format!("unknown method `{name}`; available: {}", BUILTIN.join(", ")).into(),
            )
        }
    };
    let name = settings.variant_name(name);
    Ok(Box::new(super::pipelines::Pipeline::load(
        &name, kind, similarity, settings,
    )?))
}

/// DevEval's reference body, read from the source file: validates the harness (must pass all).
pub struct Reference;

impl Method for Reference {
    fn name(&self) -> &str {
        "reference"
    }

    fn generate(&mut self, input: &MethodInput) -> Result<Generated, MethodError> {
        let started = Instant::now();
        let (text, span) = read_target(input.task, input.source_root)?;
        Ok(Generated {
            completion: body::body_text(&text, span),
            context: None,
            definitions: None,
            phases: vec![Phase {
                name: "read".into(),
                seconds: started.elapsed().as_secs_f64(),
                ..Phase::default()
            }],
            trace: serde_json::json!({"body_lines": [span.start_line, span.end_line]}),
        })
    }
}

/// `raise NotImplementedError`: the floor (must fail all).
pub struct NotImplemented;

impl Method for NotImplemented {
    fn name(&self) -> &str {
        "not-implemented"
    }

    fn generate(&mut self, _input: &MethodInput) -> Result<Generated, MethodError> {
        Ok(Generated {
            completion: "raise NotImplementedError\n".into(),
            ..Generated::default()
        })
    }
}
