//! The seam where generation pipelines plug into batch evaluation: what a method is given and
//! what it returns, and the two methods that generate nothing (the reference body, the floor).
//! The generating methods are [`super::pipelines`].

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::body;
use super::runner::{read_target, RunnerConfig};
use super::tasks::FunctionTask;

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
    /// How the run tests answers: `--select tests` runs the model's tests this way too.
    pub runner: &'a RunnerConfig,
}

pub type MethodError = Box<dyn std::error::Error + Send + Sync>;

/// A generation pipeline. Batch runs call `generate` once per task, one task at a time per
/// instance (so a method may keep model state), and run tests for finished tasks in parallel.
pub trait Method: Send {
    /// Stable name, recorded in the run directory and shown in reports.
    fn name(&self) -> &str;
    fn generate(&mut self, input: &MethodInput) -> Result<Generated, MethodError>;
    /// Another instance to generate other tasks at the same time (sharing models where it
    /// can); `None` when this one can't run beside another.
    fn fork(&self) -> Option<Box<dyn Method>>;
}

/// DevEval's reference body, read from the source file: validates the harness (must pass all).
pub struct Reference;

impl Method for Reference {
    fn name(&self) -> &str {
        "reference"
    }

    fn fork(&self) -> Option<Box<dyn Method>> {
        Some(Box::new(Reference))
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

    fn fork(&self) -> Option<Box<dyn Method>> {
        Some(Box::new(NotImplemented))
    }

    fn generate(&mut self, _input: &MethodInput) -> Result<Generated, MethodError> {
        Ok(Generated {
            completion: "raise NotImplementedError\n".into(),
            ..Generated::default()
        })
    }
}
