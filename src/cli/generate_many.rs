//! `repohop generate --targets FILE.jsonl [--concurrency N]`: many targets of one repository,
//! a JSON line per result as each finishes; with N above 1, N pipelines run at once on one
//! engine that decodes their answers together.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use repohop::generate::session::{Session, SessionRun};
use repohop::generate::Target;
use repohop::llm::{CandleLlm, Engine, SharedLlm};
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, FnId, Repository};
use serde::Deserialize;
use serde_json::json;

use super::generate::{llm_options, new_target_text, session_options, GenerateArgs, ModelTestsRun};

/// One line of the targets file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    /// A function of the repository to regenerate.
    target: Option<String>,
    /// Or a new function: its signature (and docstring), for `file`.
    signature: Option<String>,
    file: Option<String>,
}

pub fn run(args: &GenerateArgs, repo: &Repository, file: &Path) -> Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    // Every line is checked before any model loads: a typo on line 90 costs nothing.
    let mut specs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let spec: Spec = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not a target object", file.display(), i + 1))?;
        let whole = matches!(
            (&spec.target, &spec.signature, &spec.file),
            (Some(_), None, None) | (None, Some(_), Some(_))
        );
        if !whole {
            bail!(
                "{} line {}: give either \"target\" or \"signature\" with \"file\"",
                file.display(),
                i + 1
            );
        }
        specs.push((i + 1, spec));
    }
    if specs.is_empty() {
        bail!("{}: no targets", file.display());
    }
    let engine = match args.remote.connect()? {
        Some(remote) => Some(Engine::Remote(remote)),
        None if args.concurrency > 1 => {
            let llm = CandleLlm::load(&args.model, &llm_options(args))?;
            Some(Engine::Local(SharedLlm::spawn(llm)))
        }
        None => None,
    };
    let first = Session::load(session_options(args, engine))?;
    let mut sessions = vec![first];
    for _ in 1..args.concurrency.min(specs.len()) {
        sessions.push(sessions[0].fork().context("the engine can't be shared")?);
    }
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let stdout = Mutex::new(());
    std::thread::scope(|scope| {
        for mut session in sessions {
            let (specs, next, finished, failed, stdout) =
                (&specs, &next, &finished, &failed, &stdout);
            scope.spawn(move || {
                while let Some((line, spec)) = specs.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let t = Instant::now();
                    let out = match one(&mut session, repo, spec, args) {
                        Ok(mut v) => {
                            v["line"] = json!(line);
                            v
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            json!({"line": line, "error": format!("{e:#}")})
                        }
                    };
                    let done = finished.fetch_add(1, Ordering::SeqCst) + 1;
                    let _guard = stdout.lock();
                    println!("{out}");
                    eprintln!(
                        "[{done}/{}] line {line}: {} ({:.1} s) · elapsed {:.0} s",
                        specs.len(),
                        if out.get("error").is_some() {
                            "error"
                        } else {
                            "generated"
                        },
                        t.elapsed().as_secs_f64(),
                        started.elapsed().as_secs_f64()
                    );
                }
            });
        }
    });
    let failed = failed.into_inner();
    if failed > 0 {
        bail!(
            "{failed} of {} targets failed (see their lines)",
            specs.len()
        );
    }
    Ok(())
}

/// One target's run, as the JSON line printed for it.
fn one(
    session: &mut Session,
    repo: &Repository,
    spec: &Spec,
    args: &GenerateArgs,
) -> Result<serde_json::Value> {
    let (target, id): (Target, Option<FnId>) = match (&spec.target, &spec.signature, &spec.file) {
        (Some(t), _, _) => {
            let id = resolve_target(repo, t)?;
            (Target::of(repo, id)?, Some(id))
        }
        (None, Some(signature), Some(file)) => (new_target_text(repo, file, signature)?, None),
        _ => bail!("give either \"target\" or \"signature\" with \"file\""),
    };
    let view = MaskedView::new(repo, id, false);
    let tests = ModelTestsRun::new(args, repo, id)?;
    let SessionRun {
        run, indexing_s, ..
    } = session.run(repo, &view, &target, tests.as_ref().map(|t| t as _))?;
    let g = &run.generation;
    let r = &g.response;
    let (tokens_in, tokens_out) = run.generation_tokens();
    Ok(json!({
        "target": id.map_or(target.name.clone(), |id| repo.function(id).qualname.clone()),
        "path": target.path,
        "function": g.completion.function,
        "finish_reason": r.finish_reason,
        "context": run.context.iter().map(|c| &c.qualname).collect::<Vec<_>>(),
        "grounding": run.grounding,
        "steps": run.steps,
        "timings": {
            "embedding_index_s": indexing_s,
            "similarity_s": run.similarity_s,
            "dyretriever_s": run.dyretriever_s,
            "generation_s": run.generation_s,
        },
        "tokens": {
            "generation": {"in": tokens_in, "out": tokens_out, "cached": run.generation_cached()},
            "dyretriever": {"in": run.dyretriever.prompt_tokens(), "out": run.dyretriever.generated_tokens()},
        },
    }))
}
