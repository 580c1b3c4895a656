//! Evaluation: DevEval-format task loading, Pass@1 by running the project's own tests in a
//! throwaway copy, dependency recall, line-level metrics and line-completion runs, batch runs
//! and reports.

pub mod batch;
pub mod body;
pub mod by_task;
pub mod candidates;
pub mod line_metrics;
pub mod line_report;
pub mod lines;
pub mod locate;
pub mod method;
pub mod metrics;
pub mod pipelines;
mod private_tmp;
pub mod report;
pub mod runner;
pub mod sample;
pub mod sandbox;
pub mod tasks;

use std::path::PathBuf;

/// Everything that can go wrong while evaluating; each variant names the file or task concerned.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}:{line}: {msg}")]
    Record {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    /// The message carries the OS error (not chained, so it is printed once).
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("task {namespace}: {msg}")]
    Task { namespace: String, msg: String },
    #[error("{0}")]
    Invalid(String),
}

impl EvalError {
    pub(crate) fn io(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        EvalError::Io {
            path: path.into(),
            err,
        }
    }

    /// The message without the task prefix, for combining errors about one task.
    pub(crate) fn reason(&self) -> String {
        match self {
            EvalError::Task { msg, .. } => msg.clone(),
            other => other.to_string(),
        }
    }

    pub(crate) fn task(namespace: &str, msg: impl Into<String>) -> Self {
        EvalError::Task {
            namespace: namespace.to_string(),
            msg: msg.into(),
        }
    }
}
