//! Finding a target's body through the repository model, for tasks whose recorded line
//! positions do not match the file (upstream commits shift lines) or that have none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::body::BodySpan;
use super::tasks::FunctionTask;
use super::EvalError;
use crate::repo::lang::lexical::first_statement;
use crate::repo::{resolve_target, IndexOptions, Lang, Repository};

/// Parsed projects, by directory: each is opened once per process (sources don't change
/// during a run). Opening never writes into the project (no symbol cache).
pub(crate) fn open(project: &Path) -> Result<Arc<Repository>, EvalError> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Arc<Repository>>>> = OnceLock::new();
    let cache = OPEN.get_or_init(Default::default);
    if let Some(r) = cache.lock().ok().and_then(|c| c.get(project).cloned()) {
        return Ok(r);
    }
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Arc::new(
        Repository::open(project, &opts)
            .map_err(|e| EvalError::Invalid(format!("cannot index {}: {e}", project.display())))?,
    );
    if let Ok(mut c) = cache.lock() {
        c.insert(project.to_path_buf(), repo.clone());
    }
    Ok(repo)
}

/// The body of the function the task's namespace names, in the task's file, as DevEval counts
/// it: from the first statement after the docstring to the last statement.
pub fn locate_by_namespace(
    task: &FunctionTask,
    source_root: &Path,
    file_text: &str,
) -> Result<BodySpan, EvalError> {
    let project = source_root.join(&task.project_path);
    let repo = open(&project)?;
    locate_in_repository(task, &repo, file_text)
}

/// [`locate_by_namespace`] in the already indexed project `repo`.
pub fn locate_in_repository(
    task: &FunctionTask,
    repo: &Repository,
    file_text: &str,
) -> Result<BodySpan, EvalError> {
    let id = resolve_target(repo, &task.namespace)
        .map_err(|e| EvalError::task(&task.namespace, e.to_string()))?;
    let f = repo.function(id);
    if f.path != task.file_in_project() {
        return Err(EvalError::task(
            &task.namespace,
            format!(
                "the namespace names a function in {}, not in {}",
                f.path,
                task.file_in_project()
            ),
        ));
    }
    let mut start_line = f.body.start_line;
    if f.docstring.is_some() {
        let rest = file_text.get(f.body.start_byte..).unwrap_or("");
        let doc = first_statement(rest, Lang::Python);
        start_line += doc.matches('\n').count() + 1;
    }
    // DevEval's body starts at the first statement (as Python's `ast` counts lines): blank
    // and comment-only lines after the docstring are not part of it.
    let lines: Vec<&str> = file_text.lines().collect();
    while start_line < f.body.end_line
        && lines
            .get(start_line - 1)
            .is_some_and(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        start_line += 1;
    }
    if start_line > f.body.end_line {
        return Err(EvalError::task(
            &task.namespace,
            format!("{} has no body besides its docstring", f.qualname),
        ));
    }
    let first = lines.get(start_line - 1).copied().unwrap_or("");
    let indent = task
        .indent
        .unwrap_or(first.len() - first.trim_start_matches(' ').len());
    Ok(BodySpan {
        start_line,
        end_line: f.body.end_line,
        indent,
    })
}
