//! Generation pipelines as evaluation methods: each task's target is found through the
//! repository model, masked, and generated from its signature and the task's requirement. The
//! built-in methods (`--method`) and their settings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::locate;
use super::method::{
    Generated, Method, MethodError, MethodInput, NotImplemented, Phase, Reference,
};
use super::runner::TaskTests;
use super::tasks::{FunctionTask, Requirement};
use crate::embed;
use crate::generate::pipeline::{self, ContextItem, Method as Kind, PipelineOptions, Similarity};
use crate::generate::select::Select;
use crate::generate::session::{Session, SessionOptions, SessionRun, VectorPlace};
use crate::generate::{GenerateOptions, LocalContext, PromptFormat, Target};
use crate::llm::{Engine, Llm, LlmOptions};
use crate::repo::lang::outline::{code_names, CodeName};
use crate::repo::mask::MaskedView;
use crate::repo::{resolve_target, FnId, Lang, Repository};
use crate::retrieve::dyretriever::{DyOptions, ExpandMode};

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
    /// Sampled candidates (every task with `review`/`central`; with `first`, when the repaired
    /// answer still has problems).
    pub samples: usize,
    /// Which checked answer is kept.
    pub select: Select,
    /// The embedder (for methods with dense similarity) and its device.
    pub embed_model: String,
    pub embed_device: String,
    /// Where the projects' vectors are kept between runs (never inside the projects).
    pub vectors_dir: PathBuf,
    /// An engine shared by several pipelines running at once, or a server (either instead of
    /// loading `model`).
    pub engine: Option<Engine>,
    /// Reuse computed prompt prefixes (see [`LlmOptions::prefix_reuse`]).
    pub prefix_reuse: bool,
    /// Bound on the KV memory of answers decoded together ([`LlmOptions::kv_budget_bytes`]).
    pub kv_budget_bytes: Option<usize>,
    /// How generation prompts are laid out.
    pub format: PromptFormat,
}

impl Settings {
    pub fn new(model: &str, vectors_dir: &Path) -> Self {
        Self {
            model: model.to_string(),
            local: true,
            expand: ExpandMode::default(),
            paper_walk: false,
            grounding: true,
            samples: pipeline::SAMPLES,
            select: Select::default(),
            embed_model: embed::DEFAULT_MODEL.to_string(),
            embed_device: "cpu".to_string(),
            vectors_dir: vectors_dir.to_path_buf(),
            engine: None,
            prefix_reuse: true,
            kv_budget_bytes: None,
            format: PromptFormat::default(),
        }
    }

    /// The engine options these settings ask for.
    pub fn llm_options(&self) -> LlmOptions {
        LlmOptions {
            prefix_reuse: self.prefix_reuse,
            kv_budget_bytes: self.kv_budget_bytes,
            ..LlmOptions::default()
        }
    }

    /// `name` with a suffix per switch that differs from the default.
    pub fn variant_name(&self, name: &str) -> String {
        let mut out = name.to_string();
        if !self.local {
            out.push_str("-nolocal");
        }
        if self.format != PromptFormat::default() {
            out.push_str(&format!("-{}", self.format.name()));
        }
        if !self.grounding {
            out.push_str("-nogrounding");
        } else if self.samples != pipeline::SAMPLES {
            out.push_str(&format!("-samples{}", self.samples));
        }
        if self.grounding && self.select != Select::default() {
            out.push_str(&format!("-{}", self.select.name()));
        }
        if self.paper_walk {
            out.push_str("-paperwalk");
        }
        if self.expand != ExpandMode::default() {
            out.push_str(&format!("-expand-{}", self.expand.name()));
        }
        if self.embed_model != embed::DEFAULT_MODEL {
            out.push_str(&format!("-embed-{}", file_safe(&self.embed_model)));
        }
        let remote = match &self.engine {
            Some(Engine::Remote(remote)) => Some(remote.name()),
            _ => None,
        };
        out + &generator_suffix(remote, &self.model)
    }
}

/// The run-name suffix of a generator other than the default: the served model's name when
/// `remote` is given, else the local `model`'s. Another generator is another run: its results
/// never resume or merge into the default's.
pub fn generator_suffix(remote: Option<&str>, model: &str) -> String {
    match remote {
        Some(name) => format!("-remote-{}", file_safe(name)),
        None if model != crate::models::DEFAULT_GENERATOR => format!("-model-{}", file_safe(model)),
        None => String::new(),
    }
}

/// Whether the method called `name` generates with the LLM (the others read the reference or
/// write a constant).
pub fn generates(name: &str) -> bool {
    !matches!(name, "reference" | "not-implemented")
}

/// `name` with every character but ASCII letters and digits as `_`.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The method called `name`, configured by `settings` where it generates.
pub fn builtin(name: &str, settings: &Settings) -> Result<Box<dyn Method>, MethodError> {
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
    Ok(Box::new(Pipeline::load(&name, kind, similarity, settings)?))
}

/// DyCoder or one of its ablations, on the default (or given) models.
pub struct Pipeline {
    session: Session,
    /// Name in reports (`dycoder-bm25`: DyCoder with BM25 similarity).
    name: String,
}

impl Pipeline {
    pub fn load(
        name: &str,
        kind: Kind,
        similarity: Similarity,
        settings: &Settings,
    ) -> Result<Self, MethodError> {
        let session = Session::load(SessionOptions {
            model: settings.model.clone(),
            llm: settings.llm_options(),
            engine: settings.engine.clone(),
            embed_model: settings.embed_model.clone(),
            embed_device: settings.embed_device.clone(),
            vectors: VectorPlace::Under(settings.vectors_dir.clone()),
            pipeline: PipelineOptions {
                similarity,
                local: settings.local,
                grounding: settings.grounding,
                samples: settings.samples,
                select: settings.select,
                generation: GenerateOptions {
                    format: settings.format,
                    ..GenerateOptions::default()
                },
                dy: DyOptions {
                    expand: settings.expand,
                    anchored: !settings.paper_walk,
                    ..DyOptions::default()
                },
                ..PipelineOptions::new(kind)
            },
        })?;
        Ok(Self {
            session,
            name: name.to_string(),
        })
    }
}

impl Method for Pipeline {
    fn name(&self) -> &str {
        &self.name
    }

    fn fork(&self) -> Option<Box<dyn Method>> {
        Some(Box::new(Pipeline {
            session: self.session.fork()?,
            name: self.name.clone(),
        }))
    }

    fn generate(&mut self, input: &MethodInput) -> Result<Generated, MethodError> {
        let task = input.task;
        let (repo, id, target) = task_target(task, input.source_root)?;
        let view = MaskedView::new(&repo, Some(id), false);
        let tests = TaskTests {
            task,
            source_root: input.source_root,
            cfg: input.runner,
            cancel: input.cancel,
        };
        let SessionRun {
            run, indexing_s, ..
        } = self.session.run(&repo, &view, &target, Some(&tests))?;
        let opts = &self.session.options;
        let dy = &run.dyretriever;
        let mut phases = vec![Phase {
            name: "indexing".into(),
            seconds: indexing_s,
            ..Phase::default()
        }];
        if opts.method.uses_similarity() {
            phases.push(Phase {
                name: "similarity".into(),
                seconds: run.similarity_s,
                ..Phase::default()
            });
        }
        if opts.method.uses_dyretriever() {
            phases.push(Phase {
                name: "dyretriever".into(),
                seconds: run.dyretriever_s,
                tokens_in: dy.prompt_tokens() as u64,
                tokens_out: dy.generated_tokens() as u64,
            });
        }
        let (tokens_in, tokens_out) = run.generation_tokens();
        phases.push(Phase {
            name: "generation".into(),
            seconds: run.generation_s,
            tokens_in: tokens_in as u64,
            tokens_out: tokens_out as u64,
        });
        let shows_context = opts.method != Kind::Direct || run.generation.local.is_some();
        let context = shows_context.then(|| {
            names_present(
                &view,
                target.lang,
                &run.context,
                run.generation.local.as_ref(),
            )
        });
        let definitions =
            shows_context.then(|| run.context.iter().map(|c| c.qualname.clone()).collect());
        Ok(Generated {
            completion: run.generation.completion.body.clone(),
            context,
            definitions,
            phases,
            trace: json!({
                "context": run.context.iter().map(|c| json!({
                    "qualname": c.qualname, "path": c.path, "source": c.source,
                })).collect::<Vec<_>>(),
                "dyretriever": dy,
                "similar": run.similar,
                "prompt": run.generation.prompt,
                "local": run.generation.local.as_ref().map(|l| json!({
                    "class": l.class, "lines_shown": l.lines_shown, "lines_total": l.lines_total,
                    "usages": l.usages.iter().map(|u| format!("{}:{} ({})", u.path, u.line, u.caller))
                        .collect::<Vec<_>>(),
                })),
                "dropped_context": run.generation.dropped,
                "grounding": run.grounding,
                "steps": run.steps,
                "raw_answer": run.generation.raw_answer,
                "cached_prompt_tokens": dy.cached_tokens() + run.generation_cached(),
            }),
        })
    }
}

/// Qualified names the final context shows, for dependency recall: each item's own name, and
/// the names its code uses in their scope — `self.x` / `this.x` in a method of class `C` is
/// `C.x` (attributes), a name imported into the item's file is the imported definition, and any
/// other identifier in code of module `M` is `M.ident` (module variables, same-file helpers).
/// Names come from the parse tree: words in comments, docstrings and strings don't count. The
/// target's own file counts the same way (its `self.x` as the target's class), on the lines the
/// local view showed, parsed as the whole file: the view's text alone has gaps, and a
/// docstring's first line shown without its end would make the prose after it code. A name
/// merely used is present; that its definition is present is the stricter reading (the items'
/// own names alone, [`Generated::definitions`]).
fn names_present(
    view: &MaskedView,
    lang: Lang,
    context: &[ContextItem],
    local: Option<&LocalContext>,
) -> Vec<String> {
    let mut names: Vec<String> = context.iter().map(|c| c.qualname.clone()).collect();
    let mut add = |path: &str, class: Option<String>, code: &[CodeName]| {
        let Some(symbols) = view.file_symbols(path) else {
            return;
        };
        let imported: HashMap<&str, String> = symbols
            .imports
            .iter()
            .filter_map(|i| {
                let name = i.name.as_deref()?;
                let local = i.alias.as_deref().unwrap_or(name);
                let module = symbols.import_module(i)?;
                let qualname = if module.is_empty() {
                    name.to_string()
                } else {
                    format!("{module}.{name}")
                };
                Some((local, qualname))
            })
            .collect();
        for n in code {
            names.push(match (n.on_self, &class) {
                (true, Some(class)) => format!("{class}.{}", n.name),
                _ => match imported.get(n.name.as_str()) {
                    Some(q) => q.clone(),
                    None => format!("{}.{}", symbols.module, n.name),
                },
            });
        }
    };
    for c in context {
        let class = view
            .functions_in(&c.path)
            .into_iter()
            .filter_map(|id| view.function(id))
            .find(|f| f.span.start_line == c.start_line)
            .and_then(|f| f.class.clone());
        add(&c.path, class, &code_names(lang, &c.code));
    }
    if let Some(l) = local {
        let class = view
            .target()
            .and_then(|id| view.repository().function(id).class.clone());
        // The names of the lines shown, parsed as the whole file: the view's text has gaps.
        let file = view.file_text(&l.path).unwrap_or_default();
        let mut in_view = code_names(lang, file);
        in_view.retain(|n| l.shown_rows.binary_search(&n.row).is_ok());
        add(&l.path, class, &in_view);
    }
    names.sort();
    names.dedup();
    names
}

/// A task's repository, its target's id, and the target as generation sees it: the header
/// from the file, the task's requirement (when it has one) as the specification.
pub fn task_target(
    task: &FunctionTask,
    source_root: &Path,
) -> Result<(Arc<Repository>, FnId, Target), MethodError> {
    let repo: Arc<Repository> = locate::open(&source_root.join(&task.project_path))?;
    let id = resolve_target(&repo, &task.namespace)?;
    let mut target = Target::of(&repo, id)?;
    if let Some(req) = &task.requirement {
        target.docstring = Some(requirement_text(req));
    }
    Ok((repo, id, target))
}

fn requirement_text(req: &Requirement) -> String {
    let mut text = req.functionality.trim().to_string();
    if !req.arguments.trim().is_empty() {
        text.push_str("\n\n");
        text.push_str(req.arguments.trim());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::IndexOptions;

    #[test]
    fn another_generator_names_another_run() {
        let dir = Path::new("vectors");
        let default = Settings::new(crate::models::DEFAULT_GENERATOR, dir);
        assert_eq!(default.variant_name("dense"), "dense");
        let central = Settings {
            select: Select::Central,
            ..Settings::new(crate::models::DEFAULT_GENERATOR, dir)
        };
        assert_eq!(central.variant_name("dense"), "dense-central");
        let first = Settings {
            select: Select::First,
            ..Settings::new(crate::models::DEFAULT_GENERATOR, dir)
        };
        assert_eq!(first.variant_name("dense"), "dense-first");
        let other = Settings {
            local: false,
            ..Settings::new("/models/qwen3-coder-30b.gguf", dir)
        };
        assert_eq!(
            other.variant_name("dycoder"),
            "dycoder-nolocal-model-_models_qwen3_coder_30b_gguf"
        );
        // Line runs take the same suffix; a served model names the run whatever `--model` says.
        assert_eq!(
            generator_suffix(Some("qwen2.5-coder:7b"), crate::models::DEFAULT_GENERATOR),
            "-remote-qwen2_5_coder_7b"
        );
        assert_eq!(generator_suffix(None, crate::models::DEFAULT_GENERATOR), "");
    }

    #[test]
    fn present_names_are_definitions_attributes_imports_and_module_names_in_scope() {
        let dir = tempfile::tempdir().unwrap();
        let pkg = dir.path().join("pkg");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("__init__.py"), "").unwrap();
        std::fs::write(pkg.join("const.py"), "ENDIAN = 'little'\n").unwrap();
        std::fs::write(
            pkg.join("mem.py"),
            "from .const import ENDIAN as E\nlogger = None\n\n\
             class WAL:\n    def __init__(self, fd):\n        self._fd = fd\n\n\
             \x20   def flush(self):\n        # unflushed data stays\n        logger.info(E, 'unflushed')\n        return self._fd\n",
        )
        .unwrap();
        let opts = IndexOptions {
            use_cache: false,
            ..IndexOptions::default()
        };
        let repo = Repository::open(dir.path(), &opts).unwrap();
        let view = MaskedView::new(&repo, None, false);
        let item = context_item(&repo, "pkg.mem.WAL.flush");
        let names = names_present(&view, Lang::Python, &[item], None);
        for want in [
            "pkg.mem.WAL.flush",
            "pkg.mem.WAL._fd",
            "pkg.mem.logger",
            "pkg.const.ENDIAN",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        // Not `pkg.mem._fd`: an attribute belongs to its class.
        assert!(!names.iter().any(|n| n == "pkg.mem._fd"), "{names:?}");
        // Words of comments and strings are not names the code uses.
        assert!(!names.iter().any(|n| n == "pkg.mem.unflushed"), "{names:?}");
    }

    #[test]
    fn the_file_views_names_are_those_of_its_shown_lines_parsed_as_the_whole_file() {
        // Every function's docstring opens on one line and closes on a later one: a view that
        // shows the first line of each and elides the rest pairs one docstring's opening
        // quotes with the next one's, and the prose between reads as code.
        let mut file = String::from("from .const import LIMIT\n");
        for name in [
            "alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta",
        ] {
            file.push_str(&format!(
                "\n\ndef {name}(seq):\n    \"\"\" Return {name} items of sequence\n\n    \
                 Longer prose about {name}.\n    \"\"\"\n    {name}_count = len(seq)\n    \
                 return {name}_count + LIMIT\n"
            ));
        }
        let (_dir, repo) =
            crate::repo::temp_repository(&[("pkg/m.py", &file), ("pkg/const.py", "LIMIT = 1\n")]);
        let id = resolve_target(&repo, "pkg.m.theta").unwrap();
        let view = MaskedView::new(&repo, Some(id), false);
        let target = Target::of(&repo, id).unwrap();
        let local = crate::generate::LocalView::new(&view, &target)
            .unwrap()
            .render_file(700);
        assert!(local.text.contains("Return alpha items"), "{}", local.text);
        assert!(!local.text.contains("about alpha"), "{}", local.text);
        let names = names_present(&view, Lang::Python, &[], Some(&local));
        for want in ["pkg.m.alpha", "pkg.m.beta", "pkg.const.LIMIT"] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        for prose in ["Return", "items", "sequence"] {
            assert!(
                !names.iter().any(|n| n.ends_with(&format!(".{prose}"))),
                "{prose} in {names:?}"
            );
        }
    }

    /// The function `qualname` of `repo` as dense retrieval would give it.
    fn context_item(repo: &Repository, qualname: &str) -> ContextItem {
        let id = resolve_target(repo, qualname).unwrap();
        let f = repo.function(id);
        ContextItem {
            qualname: f.qualname.clone(),
            path: f.path.clone(),
            start_line: f.span.start_line,
            source: "dense",
            code: repo.function_code(id).to_string(),
            id: Some(id),
        }
    }

    #[test]
    fn names_imported_relatively_into_a_package_init_are_the_package_modules() {
        let (_dir, repo) = crate::repo::temp_repository(&[
            (
                "pkg/__init__.py",
                "from .const import ENDIAN\n\ndef order():\n    return ENDIAN\n",
            ),
            ("pkg/const.py", "ENDIAN = 'little'\n"),
        ]);
        let view = MaskedView::new(&repo, None, false);
        let item = context_item(&repo, "pkg.order");
        let names = names_present(&view, Lang::Python, &[item], None);
        // Not `const.ENDIAN`: in `pkg/__init__.py`, `.` is `pkg` itself.
        assert!(names.iter().any(|n| n == "pkg.const.ENDIAN"), "{names:?}");
    }
}
