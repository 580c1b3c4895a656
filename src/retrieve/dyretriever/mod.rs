//! DyRetriever (DyCoder paper, section 3.1 and Algorithm 1): the LLM picks entry-point
//! functions from the repository tree, then walks the dependency graph hop by hop — select a
//! candidate, visit it (read its code), expand it (the LLM names its callees; only names that
//! resolve to visible definitions survive) — and finally extracts the most useful functions.
//! The partial graph lives only for the call. Every answer that must name something is
//! constrained to the candidates at decode time.
//!
//! Beyond the paper, for small models (each switchable): the entry points start from the
//! target's class and file neighbours and the best dense hits before the LLM's picks
//! (`anchored`); `expand` can read the visited function's parsed call sites instead of asking
//! the LLM (`ExpandMode`); `extract` over a long trajectory sees signatures, not bodies.

mod prompts;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde::Serialize;

use crate::llm::{Constraint, GenerateRequest, IdentPattern, Llm, LlmError, Message, Prompt};
use crate::repo::mask::{display_name, MaskedView};
use crate::repo::{Def, FnId, Import, Lang, TreeOptions, Unresolved};

/// Where `expand` gets the callees of a visited function.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ExpandMode {
    /// The LLM names them (the paper).
    Llm,
    /// The parsed call sites, resolved by the symbol table: exact, no LLM call.
    #[default]
    Static,
    /// Both, deduplicated.
    Both,
}

#[derive(Debug, Clone)]
pub struct DyOptions {
    /// Select/visit/expand rounds (the paper's maxHop).
    pub max_hop: usize,
    /// Walk the graph; off: the entry points are the result (the paper's ablation).
    pub multihop: bool,
    pub max_entry_files: usize,
    pub max_entry_functions: usize,
    /// Functions kept by the extract step (the paper's top-k related functions).
    pub top_k: usize,
    /// Callee names the expand step may propose.
    pub max_callees: usize,
    /// Characters of the repository tree shown for entry-file selection.
    pub tree_budget: usize,
    /// Longer function code is cut in prompts (and the cut is marked).
    pub max_code_chars: usize,
    /// New tokens per call.
    pub max_new_tokens: usize,
    pub expand: ExpandMode,
    /// Entry points start with the target's class and file neighbours and the seeds (dense
    /// hits); off: the LLM's picks alone (the paper).
    pub anchored: bool,
    /// Neighbours of the target (same class, then same file) among the entry points.
    pub neighbours: usize,
    /// Seeds (dense hits) among the entry points.
    pub seeds: usize,
    /// A trajectory longer than this is shown to `extract` as signatures with their first
    /// docstring line.
    pub extract_full_code: usize,
}

impl Default for DyOptions {
    fn default() -> Self {
        Self {
            max_hop: 10,
            multihop: true,
            max_entry_files: 3,
            max_entry_functions: 3,
            top_k: 5,
            max_callees: 12,
            tree_budget: 6000,
            max_code_chars: 3000,
            max_new_tokens: 64,
            expand: ExpandMode::default(),
            anchored: true,
            neighbours: 3,
            seeds: 2,
            extract_full_code: 6,
        }
    }
}

impl ExpandMode {
    pub fn name(self) -> &'static str {
        match self {
            ExpandMode::Llm => "llm",
            ExpandMode::Static => "static",
            ExpandMode::Both => "both",
        }
    }
}

impl DyOptions {
    /// The paper's walk: the LLM's own entry points and callee names.
    pub fn paper() -> Self {
        Self {
            expand: ExpandMode::Llm,
            anchored: false,
            ..Self::default()
        }
    }
}

/// One LLM call's accounting.
#[derive(Debug, Clone, Serialize)]
pub struct CallStat {
    pub step: &'static str,
    pub prompt_tokens: usize,
    pub cached_prompt_tokens: usize,
    pub generated_tokens: usize,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub name: String,
    pub candidate: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Dropped {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hop {
    pub candidates: Vec<String>,
    pub selected: String,
    pub proposed: Vec<String>,
    pub kept: Vec<Kept>,
    pub dropped: Vec<Dropped>,
}

/// What one expand step proposed, kept and dropped.
struct Expansion {
    proposed: Vec<String>,
    kept: Vec<Kept>,
    dropped: Vec<Dropped>,
}

/// Everything the walk did, for `--json` traces.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DyTrace {
    pub entry_files: Vec<String>,
    pub entry_functions: Vec<String>,
    pub hops: Vec<Hop>,
    pub trajectory: Vec<String>,
    pub extracted: Vec<String>,
    pub calls: Vec<CallStat>,
}

impl DyTrace {
    pub fn prompt_tokens(&self) -> usize {
        self.calls.iter().map(|c| c.prompt_tokens).sum()
    }
    pub fn cached_tokens(&self) -> usize {
        self.calls.iter().map(|c| c.cached_prompt_tokens).sum()
    }
    pub fn generated_tokens(&self) -> usize {
        self.calls.iter().map(|c| c.generated_tokens).sum()
    }
}

#[derive(Debug)]
pub struct DyResult {
    /// The extracted functions, most useful first.
    pub functions: Vec<FnId>,
    pub trace: DyTrace,
}

#[derive(Debug, thiserror::Error)]
pub enum DyError {
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("the model answered {answer:?}, which is not valid JSON for the {step} step")]
    Unparsable { step: &'static str, answer: String },
}

/// The walk's state: names shown to the model and the functions they stand for.
struct Walk<'v, 'r> {
    view: &'v MaskedView<'r>,
    llm: &'v mut dyn Llm,
    system: String,
    opts: &'v DyOptions,
    trace: DyTrace,
    ids: HashMap<String, FnId>,
}

/// Runs DyRetriever for the view's target. `target` is its signature with the docstring;
/// `seeds` are functions found by similarity, best first (entry points when `anchored`).
pub fn retrieve(
    llm: &mut dyn Llm,
    view: &MaskedView,
    target: &str,
    target_path: &str,
    seeds: &[FnId],
    opts: &DyOptions,
) -> Result<DyResult, DyError> {
    let mut walk = Walk {
        view,
        llm,
        system: prompts::system(target),
        opts,
        trace: DyTrace::default(),
        ids: HashMap::new(),
    };
    let mut entries = Vec::new();
    if opts.anchored {
        let anchors = neighbours(view, target_path, opts.neighbours)
            .into_iter()
            .chain(seeds.iter().copied().take(opts.seeds));
        for id in anchors {
            let name = walk.name_of(id);
            if !entries.contains(&name) {
                entries.push(name);
            }
        }
    }
    for name in walk.entry_points(target_path)? {
        if !entries.contains(&name) {
            entries.push(name);
        }
    }
    walk.trace.entry_functions = entries.clone();
    let trajectory = if opts.multihop {
        walk.multi_hop(entries)?
    } else {
        entries
    };
    walk.trace.trajectory = trajectory.clone();
    let extracted = walk.extract(&trajectory)?;
    walk.trace.extracted = extracted.clone();
    let functions = extracted
        .iter()
        .filter_map(|n| walk.ids.get(n).copied())
        .collect();
    Ok(DyResult {
        functions,
        trace: walk.trace,
    })
}

impl Walk<'_, '_> {
    /// Related files (plus the target's own), then entry functions among theirs.
    fn entry_points(&mut self, target_path: &str) -> Result<Vec<String>, DyError> {
        let files: Vec<String> = self
            .view
            .files()
            .filter(|f| f.lang.is_some())
            .map(|f| f.path.to_string())
            .collect();
        let tree = self.view.tree(TreeOptions {
            budget: self.opts.tree_budget,
            ..TreeOptions::default()
        });
        let mut chosen = self.ask_subset(
            "entry_files",
            prompts::entry_files(&tree, self.opts.max_entry_files),
            files,
            self.opts.max_entry_files,
        )?;
        if !chosen.iter().any(|f| f == target_path) {
            chosen.push(target_path.to_string());
        }
        self.trace.entry_files = chosen.clone();

        let mut mapping = String::new();
        let mut candidates = Vec::new();
        for path in &chosen {
            let names: Vec<String> = self
                .view
                .functions_in(path)
                .into_iter()
                .map(|id| self.name_of(id))
                .collect();
            if names.is_empty() {
                continue;
            }
            let short: Vec<&str> = names
                .iter()
                .map(|n| n.split_once("::").map_or(n.as_str(), |(_, f)| f))
                .collect();
            mapping.push_str(&format!("{path}: {}\n", short.join(", ")));
            candidates.extend(names);
        }
        self.ask_subset(
            "entry_functions",
            prompts::entry_functions(&mapping, self.opts.max_entry_functions),
            candidates,
            self.opts.max_entry_functions,
        )
    }

    /// Algorithm 1: select → visit → expand, `max_hop` times or until no candidate is left.
    fn multi_hop(&mut self, entries: Vec<String>) -> Result<Vec<String>, DyError> {
        let mut candidates = entries;
        let mut visited: HashSet<String> = HashSet::new();
        let mut trajectory = Vec::new();
        for _ in 0..self.opts.max_hop {
            if candidates.is_empty() {
                break;
            }
            let listed = candidates.clone();
            let selected = self.ask_one(
                "select",
                prompts::select(&trajectory, &candidates),
                candidates.clone(),
            )?;
            candidates.retain(|c| c != &selected);
            visited.insert(selected.clone());
            trajectory.push(selected.clone());
            let Some(&id) = self.ids.get(&selected) else {
                continue;
            };
            let Expansion {
                proposed,
                kept,
                dropped,
            } = self.expand(id)?;
            for k in &kept {
                if !visited.contains(&k.candidate) && !candidates.contains(&k.candidate) {
                    candidates.push(k.candidate.clone());
                }
            }
            self.trace.hops.push(Hop {
                candidates: listed,
                selected,
                proposed,
                kept,
                dropped,
            });
        }
        Ok(trajectory)
    }

    /// The callees of `id` — named by the LLM, read from its parsed call sites, or both; each
    /// survives only if it resolves to a visible function of the repository (a class stands
    /// for its constructor).
    fn expand(&mut self, id: FnId) -> Result<Expansion, DyError> {
        let view = self.view;
        let mut proposed = Vec::new();
        if self.opts.expand != ExpandMode::Llm {
            for call in &view.repository().function(id).calls {
                let name = call.callee.strip_prefix("new ").unwrap_or(&call.callee);
                if !matches!(name, "this" | "super") && !proposed.iter().any(|p| p == name) {
                    proposed.push(name.to_string());
                }
            }
        }
        if self.opts.expand != ExpandMode::Static {
            let path = view.file_path(view.function_file(id)).to_string();
            let code = self.code_of(id);
            let lang = view
                .file_symbols(&path)
                .and_then(|s| s.lang)
                .unwrap_or(Lang::Python);
            let imports = render_imports(view.imports_of(&path), lang);
            let answer = self.ask(
                "expand",
                prompts::expand(&path, &imports, &code),
                Constraint::IdentArray {
                    pattern: IdentPattern::default(),
                    max_items: self.opts.max_callees,
                },
            )?;
            for name in parse_array("expand", &answer)? {
                if !proposed.contains(&name) {
                    proposed.push(name);
                }
            }
        }
        let resolver = view.resolver();
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for name in &proposed {
            let defs = match resolver.resolve_name(id, name) {
                Ok(defs) => defs,
                Err(why) => {
                    dropped.push(Dropped {
                        name: name.clone(),
                        reason: reason(&why),
                    });
                    continue;
                }
            };
            let resolved: Vec<FnId> = defs.iter().filter_map(|d| self.function_for(*d)).collect();
            let functions: Vec<FnId> = resolved.iter().copied().filter(|f| *f != id).collect();
            if functions.is_empty() {
                let reason = if resolved.is_empty() {
                    "resolves to no visible function"
                } else {
                    "the function itself"
                };
                dropped.push(Dropped {
                    name: name.clone(),
                    reason: reason.into(),
                });
            }
            for f in functions {
                kept.push(Kept {
                    name: name.clone(),
                    candidate: self.name_of(f),
                });
            }
        }
        Ok(Expansion {
            proposed,
            kept,
            dropped,
        })
    }

    /// The top-k of the trajectory; a trajectory of at most k functions is kept whole.
    fn extract(&mut self, trajectory: &[String]) -> Result<Vec<String>, DyError> {
        if trajectory.len() <= self.opts.top_k {
            return Ok(trajectory.to_vec());
        }
        let brief = trajectory.len() > self.opts.extract_full_code;
        let listing: Vec<(String, String)> = trajectory
            .iter()
            .filter_map(|n| {
                let id = *self.ids.get(n)?;
                let shown = if brief {
                    self.summary_of(id)
                } else {
                    self.code_of(id)
                };
                Some((n.clone(), shown))
            })
            .collect();
        self.ask_subset(
            "extract",
            prompts::extract(&listing, self.opts.top_k),
            trajectory.to_vec(),
            self.opts.top_k,
        )
    }

    fn function_for(&self, def: Def) -> Option<FnId> {
        match def {
            Def::Function(f) => self.view.function(f).map(|_| f),
            Def::Class(c) => {
                let class = self.view.class(c)?;
                let ctor = |q: &String| {
                    let name = q.rsplit('.').next().unwrap_or(q);
                    name == "__init__" || name == class.name
                };
                let qualname = class.methods.iter().find(|q| ctor(q))?;
                self.view
                    .resolver()
                    .lookup_qualname(qualname)
                    .into_iter()
                    .find_map(|d| match d {
                        Def::Function(f) => Some(f),
                        Def::Class(_) => None,
                    })
            }
        }
    }

    /// `path::Class.method`: unique enough to show and to map back (overloads keep the first).
    fn name_of(&mut self, id: FnId) -> String {
        let view = self.view;
        let name = format!(
            "{}::{}",
            view.file_path(view.function_file(id)),
            display_name(view.repository(), id)
        );
        self.ids.entry(name.clone()).or_insert(id);
        name
    }

    /// Signature and the docstring's first line: what `extract` reads of a long trajectory.
    fn summary_of(&self, id: FnId) -> String {
        let signature = self.view.signature_text(id).unwrap_or_default();
        let doc = self
            .view
            .function(id)
            .and_then(|f| f.docstring.as_deref())
            .and_then(|d| d.lines().map(str::trim).find(|l| !l.is_empty()))
            .map(|l| format!("\n    # {l}"))
            .unwrap_or_default();
        format!("{signature}{doc}")
    }

    fn code_of(&self, id: FnId) -> String {
        let code = self.view.function_code(id).unwrap_or_default();
        match code.char_indices().nth(self.opts.max_code_chars) {
            Some((cut, _)) => format!("{}\n    ... (cut)", &code[..cut]),
            None => code.into_owned(),
        }
    }

    fn ask_subset(
        &mut self,
        step: &'static str,
        question: String,
        items: Vec<String>,
        max_items: usize,
    ) -> Result<Vec<String>, DyError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let answer = self.ask(step, question, Constraint::Subset { items, max_items })?;
        parse_array(step, &answer)
    }

    fn ask_one(
        &mut self,
        step: &'static str,
        question: String,
        items: Vec<String>,
    ) -> Result<String, DyError> {
        self.ask(step, question, Constraint::OneOf(items))
    }

    fn ask(
        &mut self,
        step: &'static str,
        question: String,
        constraint: Constraint,
    ) -> Result<String, DyError> {
        let mut request = GenerateRequest::new(Prompt::Chat(vec![
            Message::system(self.system.clone()),
            Message::user(question),
        ]));
        request.max_new_tokens = self.opts.max_new_tokens;
        request.constraint = Some(constraint);
        let started = Instant::now();
        let response = self.llm.generate(&request)?;
        self.trace.calls.push(CallStat {
            step,
            prompt_tokens: response.prompt_tokens,
            cached_prompt_tokens: response.cached_prompt_tokens,
            generated_tokens: response.generated_tokens,
            seconds: started.elapsed().as_secs_f64(),
        });
        Ok(response.text)
    }
}

fn parse_array(step: &'static str, answer: &str) -> Result<Vec<String>, DyError> {
    serde_json::from_str::<Vec<String>>(answer).map_err(|_| DyError::Unparsable {
        step,
        answer: answer.to_string(),
    })
}

fn reason(why: &Unresolved) -> String {
    match why {
        Unresolved::External { module, .. } => format!("outside the repository ({module})"),
        Unresolved::NotFound { .. } => "not defined in the repository".into(),
        Unresolved::Module { .. } => "a module, not a function".into(),
        Unresolved::Ambiguous { candidates, .. } => {
            format!("ambiguous ({} definitions)", candidates.len())
        }
    }
}

/// The file's imports as source lines, for the expand prompt.
fn render_imports(imports: &[Import], lang: Lang) -> String {
    let mut out = String::new();
    for imp in imports.iter().filter(|i| i.scope.is_none()) {
        let alias = imp
            .alias
            .as_ref()
            .map(|a| format!(" as {a}"))
            .unwrap_or_default();
        let line = match lang {
            Lang::Java => {
                let kw = if imp.is_static {
                    "import static"
                } else {
                    "import"
                };
                let name = match (&imp.name, imp.is_wildcard) {
                    (_, true) => ".*".to_string(),
                    (Some(n), false) => format!(".{n}"),
                    (None, false) => String::new(),
                };
                format!("{kw} {}{name};", imp.module)
            }
            Lang::Python => {
                let module = format!("{}{}", ".".repeat(imp.level), imp.module);
                match (&imp.name, imp.is_wildcard) {
                    (_, true) => format!("from {module} import *"),
                    (Some(n), false) => format!("from {module} import {n}{alias}"),
                    (None, false) => format!("import {module}{alias}"),
                }
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("(none)\n");
    }
    out
}

/// Visible functions nearest to the target: its class's methods first, then the rest of its
/// file, each by distance in lines from where the target is (the end of the file for a new
/// function).
fn neighbours(view: &MaskedView, target_path: &str, max: usize) -> Vec<FnId> {
    let repo = view.repository();
    let at = match view.hole() {
        Some((_, span)) => span.start_line,
        None => usize::MAX,
    };
    let class = view.target().and_then(|t| repo.function(t).class.clone());
    let mut found: Vec<(bool, usize, FnId)> = view
        .functions_in(target_path)
        .into_iter()
        .filter_map(|id| {
            let f = view.function(id)?;
            let other_class = class.is_none() || f.class != class;
            Some((other_class, f.span.start_line.abs_diff(at), id))
        })
        .collect();
    found.sort();
    found.into_iter().take(max).map(|(_, _, id)| id).collect()
}
