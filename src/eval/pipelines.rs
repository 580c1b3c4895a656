//! Generation pipelines as evaluation methods: each task's target is found through the
//! repository model and generated from its signature and the task's requirement.

use std::time::Instant;

use serde_json::json;

use super::locate;
use super::method::{Generated, Method, MethodError, MethodInput, Phase};
use super::tasks::{FunctionTask, Requirement};
use crate::generate::{self, GenerateOptions, Target};
use crate::llm::{CandleLlm, LlmOptions};
use crate::repo::resolve_target;

/// The Direct baseline: signature and requirement only, no retrieved context.
pub struct Direct {
    llm: CandleLlm,
    options: GenerateOptions,
}

impl Direct {
    pub fn load(model: &str) -> Result<Self, MethodError> {
        Ok(Self {
            llm: CandleLlm::load(model, &LlmOptions::default())?,
            options: GenerateOptions::default(),
        })
    }
}

impl Method for Direct {
    fn name(&self) -> &str {
        "direct"
    }

    fn generate(&mut self, input: &MethodInput) -> Result<Generated, MethodError> {
        let target = task_target(input)?;
        let started = Instant::now();
        let out = generate::generate(&mut self.llm, &target, &[], &self.options)?;
        Ok(Generated {
            completion: out.completion.body,
            context: None,
            phases: vec![Phase {
                name: "generation".into(),
                seconds: started.elapsed().as_secs_f64(),
                tokens_in: out.response.prompt_tokens as u64,
                tokens_out: out.response.generated_tokens as u64,
            }],
            trace: json!({
                "prompt": out.prompt,
                "raw_answer": out.raw_answer,
                "body_source": out.completion.source,
                "cached_prompt_tokens": out.response.cached_prompt_tokens,
            }),
        })
    }
}

/// The task's target; the benchmark's requirement text, when given, is its specification
/// (as in DevEval's prompts) instead of the docstring in the file.
fn task_target(input: &MethodInput) -> Result<Target, MethodError> {
    let task: &FunctionTask = input.task;
    let repo = locate::open(&input.source_root.join(&task.project_path))?;
    let id = resolve_target(&repo, &task.namespace)?;
    let mut target = Target::of(&repo, id)?;
    if let Some(req) = &task.requirement {
        target.docstring = Some(requirement_text(req));
    }
    Ok(target)
}

fn requirement_text(req: &Requirement) -> String {
    let mut text = req.functionality.trim().to_string();
    if !req.arguments.trim().is_empty() {
        text.push_str("\n\n");
        text.push_str(req.arguments.trim());
    }
    text
}
