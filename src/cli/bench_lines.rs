//! `repohop bench lines`: what line completion costs besides the LLM, on a real repository:
//! codebase build time, retrieval latency per cursor for each method (cold, then with the
//! codebase's vectors warm), and prompt tokens at several `top_k` (SaraCoder's Table 9).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use repohop::embed::{self, Embedder};
use repohop::eval::sample::{cursors, draw};
use repohop::generate::line::line_prompt;
use repohop::graph::SliceLimits;
use repohop::llm::{CandleLlm, Llm, LlmOptions, Prompt};
use repohop::repo::model::Lang;
use repohop::repo::{IndexOptions, Repository};
use repohop::retrieve::saracoder::eaid::eaid;
use repohop::retrieve::saracoder::{cut_before, retrieve, Codebase, Options, Rank, Units};
use serde_json::json;

use super::args::EmbedArgs;
use super::measure::{median, time_runs};

#[derive(Args)]
pub struct BenchLinesArgs {
    /// The repository (Python and Java files take part).
    #[arg(long)]
    repo: PathBuf,
    /// Cursors drawn from it (RepoEval style, half cross-file).
    #[arg(long, default_value_t = 50)]
    cursors: usize,
    /// Runs per measurement (medians are reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    embed: EmbedArgs,
    /// The model whose tokenizer counts prompt tokens.
    #[arg(long, default_value = repohop::models::DEFAULT_GENERATOR)]
    model: String,
    #[arg(long)]
    json: bool,
}

fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

pub fn bench(args: BenchLinesArgs) -> Result<()> {
    let runs = args.runs.max(1);
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(&args.repo, &opts)
        .with_context(|| format!("cannot index {}", args.repo.display()))?;
    let source_lines: usize = repo
        .files()
        .iter()
        .filter(|f| f.lang.is_some())
        .filter_map(|f| f.text.as_deref())
        .map(|t| t.lines().count())
        .sum();
    let tasks = draw(cursors(&repo, "repo"), args.cursors, 0.5, 1);
    anyhow::ensure!(
        !tasks.is_empty(),
        "{}: no cursor inside a function body",
        args.repo.display()
    );
    let limits = SliceLimits::default();
    let mut builds = serde_json::Map::new();
    for (name, units) in [("slices", Units::Slices), ("windows", Units::Windows)] {
        let r = time_runs(runs, || {
            Codebase::build(&repo, units, &limits);
            Ok(())
        })?;
        builds.insert(name.into(), json!(1e3 * median(&r.wall)));
    }
    let slices = Codebase::build(&repo, Units::Slices, &limits);
    let windows = Codebase::build(&repo, Units::Windows, &limits);
    let device = embed::parse_device(&args.embed.device)?;
    let embedder = embed::load(&args.embed.embed_model, &device)?;
    let cursor_texts: Vec<(&str, &str)> = tasks
        .iter()
        .map(|t| {
            let text = repo
                .file_id(&t.file)
                .and_then(|f| repo.file(f).text.as_deref())
                .unwrap_or_default();
            (t.file.as_str(), cut_before(text, t.line))
        })
        .collect();

    // Where SaraCoder's time goes, per cursor (warm): the cursor's own units, each layer, EAID.
    let mut stages: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    // One pass of a method over every cursor: per-cursor milliseconds.
    let mut pass = |codebase: &Codebase, rank: Rank, with_eaid: bool| -> Result<Vec<f64>> {
        let o = Options {
            rank,
            ..Options::default()
        };
        let e = (rank == Rank::Hfop).then_some(&embedder as &dyn Embedder);
        let mut ms = Vec::with_capacity(cursor_texts.len());
        for (t, (path, unfinished)) in tasks.iter().zip(&cursor_texts) {
            let started = Instant::now();
            let cursor = codebase.cursor(path, unfinished);
            let built = started.elapsed().as_secs_f64() * 1e3;
            let r = retrieve(&cursor, e, &o)?;
            let before_eaid = Instant::now();
            if with_eaid {
                eaid(&repo, path, t.line);
            }
            ms.push(started.elapsed().as_secs_f64() * 1e3);
            if with_eaid {
                let eaid_ms = before_eaid.elapsed().as_secs_f64() * 1e3;
                stages.entry("cursor units").or_default().push(built);
                stages.entry("eaid").or_default().push(eaid_ms);
                for (k, v) in &r.stages_ms {
                    stages.entry(k).or_default().push(*v);
                }
            }
        }
        Ok(ms)
    };
    let mut methods = Vec::new();
    let mut reference = None;
    for (name, codebase, rank, with_eaid) in [
        ("vanilla", &windows, Rank::Jaccard, false),
        ("graphcoder", &slices, Rank::Dsed, false),
        ("saracoder", &slices, Rank::Hfop, true),
    ] {
        let cold = pass(codebase, rank, with_eaid)?;
        let mut warm: Vec<Vec<f64>> = Vec::new();
        for _ in 0..runs {
            warm.push(pass(codebase, rank, with_eaid)?);
        }
        let per_cursor: Vec<f64> = (0..tasks.len())
            .map(|i| median(&warm.iter().map(|r| r[i]).collect::<Vec<_>>()))
            .collect();
        let m = median(&per_cursor);
        let base = *reference.get_or_insert(m);
        methods.push(json!({
            "method": name,
            "cold_median_ms": median(&cold),
            "warm_median_ms": m,
            "warm_p90_ms": percentile(&per_cursor, 0.9),
            "vs_vanilla": m / base,
        }));
    }

    // The last pass was SaraCoder's warm one.
    let breakdown: serde_json::Map<String, serde_json::Value> = stages
        .iter()
        .map(|(k, v)| {
            let last = &v[v.len().saturating_sub(tasks.len())..];
            (k.to_string(), json!(median(last)))
        })
        .collect();
    let llm = CandleLlm::load(&args.model, &LlmOptions::default())?;
    let count = |s: &str| {
        llm.count_tokens(&Prompt::Text(s.to_string()))
            .unwrap_or(s.len() / 3)
    };
    let mut tokens = serde_json::Map::new();
    for top_k in [1, 4, 10] {
        let o = Options {
            top_k,
            ..Options::default()
        };
        let mut n = Vec::new();
        for (t, (path, unfinished)) in tasks.iter().zip(&cursor_texts) {
            let r = retrieve(&slices.cursor(path, unfinished), Some(&embedder), &o)?;
            let x = eaid(&repo, path, t.line);
            let lang = repohop::repo::lang::for_path(path).map_or(Lang::Python, |l| l.lang());
            let p = line_prompt(&r.picks, &x, unfinished, lang, 2048, &count);
            n.push(count(&p.text) as f64);
        }
        tokens.insert(
            format!("top_k_{top_k}"),
            json!(n.iter().sum::<f64>() / n.len() as f64),
        );
    }
    let report = json!({
        "repo": args.repo,
        "source_lines": source_lines,
        "cursors": tasks.len(),
        "runs": runs,
        "codebase_build_ms": builds,
        "codebase_units": {"slices": slices.len(), "windows": windows.len()},
        "retrieval": methods,
        "saracoder_stage_median_ms": breakdown,
        "saracoder_prompt_tokens_mean": tokens,
    });
    if args.json {
        println!("{report}");
        return Ok(());
    }
    println!(
        "{}: {source_lines} source lines, {} cursors, medians of {runs} runs",
        args.repo.display(),
        tasks.len()
    );
    println!(
        "codebase build: slices {:.0} ms ({} units), windows {:.0} ms ({} units)",
        report["codebase_build_ms"]["slices"]
            .as_f64()
            .unwrap_or(f64::NAN),
        slices.len(),
        report["codebase_build_ms"]["windows"]
            .as_f64()
            .unwrap_or(f64::NAN),
        windows.len()
    );
    println!("| method | cold ms/cursor | warm ms/cursor | warm p90 | × vanilla |");
    println!("|---|---:|---:|---:|---:|");
    for m in &methods {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.2} |",
            m["method"].as_str().unwrap_or_default(),
            m["cold_median_ms"].as_f64().unwrap_or(f64::NAN),
            m["warm_median_ms"].as_f64().unwrap_or(f64::NAN),
            m["warm_p90_ms"].as_f64().unwrap_or(f64::NAN),
            m["vs_vanilla"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let stage_line: Vec<String> = breakdown
        .iter()
        .map(|(k, v)| format!("{k} {:.1}", v.as_f64().unwrap_or(f64::NAN)))
        .collect();
    println!(
        "saracoder warm, median ms per stage: {}",
        stage_line.join(", ")
    );
    for (k, v) in &tokens {
        println!(
            "saracoder prompt tokens, {k}: {:.0}",
            v.as_f64().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
