//! Task files: DevEval's JSONL records as they are, plus two small native formats.
//!
//! One record per line; the format is recognised per record by its fields:
//! - DevEval: `namespace`, `project_path`, `completion_path`, `body_position`, ... (as published);
//! - native function task: `repo`, `file`, `target`, `tests`, optional `dependency`;
//! - native line task: `repo`, `file`, `line`, `ground_truth` (optional `id`).

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::EvalError;

/// Names the reference body uses, by where they are defined (ground truth for recall).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    #[serde(default)]
    pub intra_class: Vec<String>,
    #[serde(default)]
    pub intra_file: Vec<String>,
    #[serde(default)]
    pub cross_file: Vec<String>,
}

/// The dependency kinds Pass@1 is split by; a task counts under each kind it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepKind {
    None,
    IntraClass,
    IntraFile,
    CrossFile,
}

impl DepKind {
    pub const ALL: [DepKind; 4] = [
        DepKind::None,
        DepKind::IntraClass,
        DepKind::IntraFile,
        DepKind::CrossFile,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::None => "none",
            DepKind::IntraClass => "intra_class",
            DepKind::IntraFile => "intra_file",
            DepKind::CrossFile => "cross_file",
        }
    }
}

impl Dependency {
    pub fn kinds(&self) -> Vec<DepKind> {
        let mut kinds = Vec::new();
        if !self.intra_class.is_empty() {
            kinds.push(DepKind::IntraClass);
        }
        if !self.intra_file.is_empty() {
            kinds.push(DepKind::IntraFile);
        }
        if !self.cross_file.is_empty() {
            kinds.push(DepKind::CrossFile);
        }
        if kinds.is_empty() {
            kinds.push(DepKind::None);
        }
        kinds
    }

    /// All dependency names, deduplicated, in record order.
    pub fn names(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.intra_class
            .iter()
            .chain(&self.intra_file)
            .chain(&self.cross_file)
            .map(String::as_str)
            .filter(|n| seen.insert(*n))
            .collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    #[serde(rename = "Functionality", default)]
    pub functionality: String,
    #[serde(rename = "Arguments", default)]
    pub arguments: String,
}

/// A function-generation task. Paths are relative to the source root (DevEval's `Source_Code`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionTask {
    /// Dotted target, e.g. `boltons.strutils.slugify`; unique within a task file.
    pub namespace: String,
    /// `function` or `method` when the record says.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The project root, where tests run.
    pub project_path: String,
    /// The file holding the target.
    pub completion_path: String,
    /// 1-based inclusive line ranges; absent for native tasks (located by namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_position: Option<[usize; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_position: Option<[usize; 2]>,
    #[serde(default)]
    pub dependency: Dependency,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirement: Option<Requirement>,
    /// pytest ids relative to the project root.
    pub tests: Vec<String>,
    /// Spaces before body lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indent: Option<usize>,
}

impl FunctionTask {
    /// The target's own name: the last namespace component.
    pub fn name(&self) -> &str {
        self.namespace.rsplit('.').next().unwrap_or(&self.namespace)
    }

    /// Regenerating `qualname` of the repository file `path`, the repository being the source
    /// root: no recorded positions or tests (`generate --select tests` runs the model's).
    pub fn in_repository(qualname: &str, path: &str) -> Self {
        FunctionTask {
            namespace: qualname.to_string(),
            kind: None,
            project_path: String::new(),
            completion_path: path.to_string(),
            signature_position: None,
            body_position: None,
            dependency: Dependency::default(),
            requirement: None,
            tests: Vec::new(),
            indent: None,
        }
    }

    /// `completion_path` relative to the project root.
    pub fn file_in_project(&self) -> &str {
        let rel = self
            .completion_path
            .strip_prefix(self.project_path.trim_end_matches('/'))
            .unwrap_or(&self.completion_path);
        rel.trim_start_matches('/')
    }
}

/// A line-completion task: the statement at `line` (1-based) of `file` is the ground truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineTask {
    pub id: String,
    pub repo: String,
    pub file: String,
    pub line: usize,
    pub ground_truth: String,
    /// Which part of a set the cursor belongs to (`in_file`, `cross_file`); results are
    /// reported per split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Task {
    Function(FunctionTask),
    Line(LineTask),
}

#[derive(Deserialize)]
struct NativeFunction {
    repo: String,
    file: String,
    target: String,
    tests: Vec<String>,
    #[serde(default)]
    dependency: Dependency,
}

#[derive(Deserialize)]
struct NativeLine {
    #[serde(default)]
    id: Option<String>,
    repo: String,
    file: String,
    line: usize,
    ground_truth: String,
    #[serde(default)]
    split: Option<String>,
}

/// Reads a task file; every malformed record is reported with its file and line.
pub fn load_tasks(path: &Path) -> Result<Vec<Task>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    parse_tasks(&text, path)
}

/// Reads a task file that must hold one kind of task: `keep` takes it, or says what the other
/// kind's record is doing there.
fn load_kind<T>(
    path: &Path,
    keep: impl Fn(Task) -> Result<T, String>,
) -> Result<Vec<T>, EvalError> {
    load_tasks(path)?
        .into_iter()
        .map(|t| keep(t).map_err(|m| EvalError::Invalid(format!("{}: {m}", path.display()))))
        .collect()
}

/// Reads a task file that must hold only function tasks.
pub fn load_function_tasks(path: &Path) -> Result<Vec<FunctionTask>, EvalError> {
    load_kind(path, |t| match t {
        Task::Function(f) => Ok(f),
        Task::Line(l) => Err(format!(
            "line task {} in a function-task run; give line tasks to line metrics",
            l.id
        )),
    })
}

/// Reads a task file that must hold only line tasks.
pub fn load_line_tasks(path: &Path) -> Result<Vec<LineTask>, EvalError> {
    load_kind(path, |t| match t {
        Task::Line(l) => Ok(l),
        Task::Function(f) => Err(format!("function task {} in a line-task file", f.namespace)),
    })
}

/// Parses JSONL text; `path` only names the source in errors.
pub fn parse_tasks(text: &str, path: &Path) -> Result<Vec<Task>, EvalError> {
    let mut tasks = Vec::new();
    let mut ids = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |msg: String| EvalError::Record {
            path: path.to_path_buf(),
            line,
            msg,
        };
        if raw.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| err(format!("not JSON: {e}")))?;
        let has = |k: &str| value.get(k).is_some();
        let task = if has("namespace") && has("project_path") {
            let t: FunctionTask = serde_json::from_value(value)
                .map_err(|e| err(format!("bad DevEval record: {e}")))?;
            check_function(&t).map_err(err)?;
            Task::Function(t)
        } else if has("target") {
            let n: NativeFunction = serde_json::from_value(value).map_err(|e| {
                err(format!(
                    "bad function task (repo, file, target, tests): {e}"
                ))
            })?;
            let t = FunctionTask {
                namespace: n.target,
                kind: None,
                completion_path: join_rel(&n.repo, &n.file),
                project_path: n.repo,
                signature_position: None,
                body_position: None,
                dependency: n.dependency,
                requirement: None,
                tests: n.tests,
                indent: None,
            };
            check_function(&t).map_err(err)?;
            Task::Function(t)
        } else if has("ground_truth") {
            let n: NativeLine = serde_json::from_value(value).map_err(|e| {
                err(format!(
                    "bad line task (repo, file, line, ground_truth): {e}"
                ))
            })?;
            if n.line == 0 {
                return Err(err("`line` is 1-based; 0 is not a line".into()));
            }
            for p in [&n.repo, &n.file] {
                if Path::new(p).is_absolute() || p.split('/').any(|c| c == "..") {
                    return Err(err(format!(
                        "`{p}` must be a relative path inside the source root, without `..`"
                    )));
                }
            }
            let id =
                n.id.unwrap_or_else(|| format!("{}:{}", join_rel(&n.repo, &n.file), n.line));
            Task::Line(LineTask {
                id,
                repo: n.repo,
                file: n.file,
                line: n.line,
                ground_truth: n.ground_truth,
                split: n.split,
            })
        } else {
            return Err(err("unrecognised record: expected DevEval fields (namespace, project_path, ...), a function task (repo, file, target, tests) or a line task (repo, file, line, ground_truth)".into()));
        };
        let id = match &task {
            Task::Function(f) => f.namespace.clone(),
            Task::Line(l) => l.id.clone(),
        };
        if !ids.insert(id.clone()) {
            return Err(err(format!("duplicate task `{id}`")));
        }
        tasks.push(task);
    }
    Ok(tasks)
}

fn join_rel(repo: &str, file: &str) -> String {
    format!(
        "{}/{}",
        repo.trim_end_matches('/'),
        file.trim_start_matches('/')
    )
}

/// The deepest body indentation a task may ask for: the splice writes that many spaces per
/// line, and no real file nests that deep.
const MAX_INDENT: usize = 1024;

fn check_function(t: &FunctionTask) -> Result<(), String> {
    if t.namespace.is_empty() {
        return Err("empty namespace".into());
    }
    if t.tests.is_empty() {
        return Err(format!("task {} lists no tests", t.namespace));
    }
    for p in [&t.project_path, &t.completion_path] {
        if Path::new(p).is_absolute() || p.split('/').any(|c| c == "..") {
            return Err(format!(
                "task {}: path `{p}` must be relative to the source root, without `..`",
                t.namespace
            ));
        }
    }
    if !t
        .completion_path
        .starts_with(t.project_path.trim_end_matches('/'))
    {
        return Err(format!(
            "task {}: completion_path `{}` is not inside project_path `{}`",
            t.namespace, t.completion_path, t.project_path
        ));
    }
    for (field, range) in [
        ("signature_position", t.signature_position),
        ("body_position", t.body_position),
    ] {
        if let Some([a, b]) = range {
            if a == 0 || b < a {
                return Err(format!(
                    "task {}: {field} [{a}, {b}] is not a 1-based inclusive range",
                    t.namespace
                ));
            }
        }
    }
    if let Some(indent) = t.indent.filter(|&i| i > MAX_INDENT) {
        return Err(format!(
            "task {}: indent {indent} is over {MAX_INDENT} spaces",
            t.namespace
        ));
    }
    if t.body_position.is_some() != t.signature_position.is_some() {
        return Err(format!(
            "task {}: give both signature_position and body_position, or neither",
            t.namespace
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Task>, EvalError> {
        parse_tasks(text, Path::new("t.jsonl"))
    }

    #[test]
    fn reads_deveval_native_and_line_records() {
        let text = r#"{"namespace": "p.m.f", "type": "function", "project_path": "A/p", "completion_path": "A/p/p/m.py", "signature_position": [3, 3], "body_position": [5, 7], "dependency": {"intra_class": [], "intra_file": ["p.m.g"], "cross_file": ["p.n.h"]}, "requirement": {"Functionality": "f", "Arguments": "a"}, "tests": ["tests/t.py::test_f"], "indent": 4}

{"repo": "A/p", "file": "p/m.py", "target": "p.m.C.k", "tests": ["tests/t.py::test_k"]}
{"repo": "A/p", "file": "p/m.py", "line": 9, "ground_truth": "x = 1"}
"#;
        let tasks = parse(text).unwrap();
        assert_eq!(tasks.len(), 3);
        let Task::Function(f) = &tasks[0] else {
            panic!()
        };
        assert_eq!(f.body_position, Some([5, 7]));
        assert_eq!(f.indent, Some(4));
        assert_eq!(f.file_in_project(), "p/m.py");
        assert_eq!(
            f.dependency.kinds(),
            vec![DepKind::IntraFile, DepKind::CrossFile]
        );
        assert_eq!(f.name(), "f");
        let Task::Function(n) = &tasks[1] else {
            panic!()
        };
        assert_eq!(n.completion_path, "A/p/p/m.py");
        assert_eq!(n.body_position, None);
        assert_eq!(n.dependency.kinds(), vec![DepKind::None]);
        let Task::Line(l) = &tasks[2] else { panic!() };
        assert_eq!(l.id, "A/p/p/m.py:9");
    }

    #[test]
    fn malformed_records_name_file_and_line() {
        let bad = [
            (
                "{\"namespace\": \"a\", \"project_path\": \"p\"}\n",
                "line 1",
            ),
            ("\n{nope\n", "not JSON"),
            ("{\"x\": 1}", "unrecognised"),
            (
                "{\"repo\": \"p\", \"file\": \"m.py\", \"target\": \"m.f\", \"tests\": []}",
                "no tests",
            ),
            (
                "{\"repo\": \"../p\", \"file\": \"m.py\", \"target\": \"m.f\", \"tests\": [\"t\"]}",
                "without `..`",
            ),
        ];
        for (text, want) in bad {
            let msg = parse(text).unwrap_err().to_string();
            assert!(msg.starts_with("t.jsonl:"), "{msg}");
            assert!(msg.contains(want) || msg.contains("missing field"), "{msg}");
        }
        let msg = parse("\n{nope\n").unwrap_err().to_string();
        assert!(msg.starts_with("t.jsonl:2: not JSON"), "{msg}");
        let dup =
            "{\"repo\": \"p\", \"file\": \"m.py\", \"target\": \"m.f\", \"tests\": [\"t\"]}\n";
        let msg = parse(&format!("{dup}{dup}")).unwrap_err().to_string();
        assert_eq!(msg, "t.jsonl:2: duplicate task `m.f`");
    }
}
