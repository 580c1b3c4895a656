//! Generation pipelines as evaluation methods: each task's target is found through the
//! repository model, masked, and generated from its signature and the task's requirement.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use super::locate;
use super::method::{Generated, Method, MethodError, MethodInput, Phase};
use super::tasks::Requirement;
use crate::embed::{self, LocalEmbedder};
use crate::generate::pipeline::{self, Embeddings, Method as Kind, PipelineOptions};
use crate::generate::Target;
use crate::index::vectors::VectorIndex;
use crate::llm::{CandleLlm, LlmOptions};
use crate::repo::mask::MaskedView;
use crate::repo::{resolve_target, Repository};
use crate::retrieve::dense;

/// DyCoder or one of its ablations, on the default (or given) models.
pub struct Pipeline {
    llm: CandleLlm,
    opts: PipelineOptions,
    embedder: Option<LocalEmbedder>,
    /// Vectors per project, built once per run in a private folder.
    vectors: HashMap<PathBuf, VectorIndex>,
    vectors_dir: tempfile::TempDir,
}

impl Pipeline {
    pub fn load(kind: Kind, model: &str) -> Result<Self, MethodError> {
        let embedder = if kind.uses_dense() {
            let device = embed::parse_device("cpu")?;
            Some(embed::load(embed::DEFAULT_MODEL, &device)?)
        } else {
            None
        };
        Ok(Self {
            llm: CandleLlm::load(model, &LlmOptions::default())?,
            opts: PipelineOptions::new(kind),
            embedder,
            vectors: HashMap::new(),
            vectors_dir: tempfile::tempdir()?,
        })
    }

    fn vectors_for(&mut self, project: &PathBuf, repo: &Repository) -> Result<(), MethodError> {
        let Some(embedder) = &self.embedder else {
            return Ok(());
        };
        if !self.vectors.contains_key(project) {
            let dir = self.vectors_dir.path().join(self.vectors.len().to_string());
            let (index, _) = VectorIndex::update(&dir, embedder, &dense::function_items(repo))?;
            self.vectors.insert(project.clone(), index);
        }
        Ok(())
    }
}

impl Method for Pipeline {
    fn name(&self) -> &str {
        self.opts.method.name()
    }

    fn generate(&mut self, input: &MethodInput) -> Result<Generated, MethodError> {
        let task = input.task;
        let project = input.source_root.join(&task.project_path);
        let repo: Arc<Repository> = locate::open(&project)?;
        let id = resolve_target(&repo, &task.namespace)?;
        let mut target = Target::of(&repo, id)?;
        if let Some(req) = &task.requirement {
            target.docstring = Some(requirement_text(req));
        }
        let started = std::time::Instant::now();
        self.vectors_for(&project, &repo)?;
        let indexing_s = started.elapsed().as_secs_f64();

        let view = MaskedView::new(&repo, Some(id), false);
        let embeddings = match (&self.embedder, self.vectors.get(&project)) {
            (Some(embedder), Some(index)) => Some(Embeddings { embedder, index }),
            _ => None,
        };
        let run = pipeline::run(
            &mut self.llm,
            &view,
            &target,
            embeddings.as_ref(),
            &self.opts,
        )?;
        let dy = &run.dyretriever;
        let r = &run.generation.response;
        let mut phases = vec![Phase {
            name: "indexing".into(),
            seconds: indexing_s,
            ..Phase::default()
        }];
        if self.opts.method.uses_dense() {
            phases.push(Phase {
                name: "dense".into(),
                seconds: run.dense_s,
                ..Phase::default()
            });
        }
        if self.opts.method.uses_dyretriever() {
            phases.push(Phase {
                name: "dyretriever".into(),
                seconds: run.dyretriever_s,
                tokens_in: dy.prompt_tokens() as u64,
                tokens_out: dy.generated_tokens() as u64,
            });
        }
        phases.push(Phase {
            name: "generation".into(),
            seconds: run.generation_s,
            tokens_in: r.prompt_tokens as u64,
            tokens_out: r.generated_tokens as u64,
        });
        let context = (self.opts.method != Kind::Direct)
            .then(|| run.context.iter().map(|c| c.qualname.clone()).collect());
        Ok(Generated {
            completion: run.generation.completion.body.clone(),
            context,
            phases,
            trace: json!({
                "context": run.context.iter().map(|c| json!({
                    "qualname": c.qualname, "path": c.path, "source": c.source,
                })).collect::<Vec<_>>(),
                "dyretriever": dy,
                "dense": run.dense,
                "prompt": run.generation.prompt,
                "raw_answer": run.generation.raw_answer,
                "cached_prompt_tokens": dy.cached_tokens() + r.cached_prompt_tokens,
            }),
        })
    }
}

fn requirement_text(req: &Requirement) -> String {
    let mut text = req.functionality.trim().to_string();
    if !req.arguments.trim().is_empty() {
        text.push_str("\n\n");
        text.push_str(req.arguments.trim());
    }
    text
}
