//! `repohop search` (dense retrieval over a repository's functions), the `--embed` part of
//! `repohop index`, and `repohop bench embed` (embedding throughput cold and warm, top-k
//! latency, and the reference Python stack on the same texts in the same run).

use super::measure::median;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::embed::{self, Embedder, LocalEmbedder, TextKind};
use repohop::generate::pipeline::Corpus;
use repohop::generate::vectors;
use repohop::index::vectors::{Item, Row, UpdateReport, VectorIndex};
use repohop::repo::mask::MaskedView;
use repohop::repo::Repository;
use repohop::retrieve::dense::{function_items, function_key};
use serde_json::json;

use super::args::{EmbedArgs, RepoArgs};

#[derive(Args, Debug)]
// `--repo DIR` leaves the first positional empty.
#[command(allow_missing_positional = true)]
pub struct SearchArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// What to look for: code, or a signature plus docstring.
    pub query: String,
    /// How many functions to print.
    #[arg(short = 'k', default_value_t = 10)]
    pub k: usize,
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Print a JSON array of {key, qualname, path, start_line, hash, score}, best first.
    #[arg(long)]
    pub json: bool,
}

/// Loads the embedding model and brings `repo`'s vectors of `corpus` up to date, in its cache
/// folder ([`vectors::update`]).
fn index_embeddings(
    repo: &Repository,
    args: &EmbedArgs,
    corpus: Corpus,
) -> Result<(LocalEmbedder, VectorIndex, UpdateReport)> {
    let device = embed::parse_device(&args.device)?;
    let model = embed::load(&args.embed_model, &device)?;
    let (index, report) = vectors::update(repo, corpus, &model)?;
    if let Some(why) = &report.rebuilt {
        eprintln!("warning: embedding cache was unusable and is rebuilt: {why}");
    }
    Ok((model, index, report))
}

/// `repohop index --embed`: update the vectors, return a summary for the index report.
pub fn index_command(repo: &Repository, args: &EmbedArgs) -> Result<serde_json::Value> {
    let t = Instant::now();
    let (model, index, report) = index_embeddings(repo, args, Corpus::Functions)?;
    Ok(json!({
        "model": model.info(),
        "rows": index.len(),
        "embedded": report.embedded,
        "reused": report.reused,
        "dropped": report.dropped,
        "rebuilt": report.rebuilt,
        "stats": report.stats,
        "seconds": t.elapsed().as_secs_f64(),
        "dir": vectors::repository_dir(repo, Corpus::Functions),
    }))
}

/// `repohop search`.
pub fn search(args: SearchArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let (model, index, _) = index_embeddings(&repo, &args.embed, Corpus::Functions)?;
    let q = model.embed(&[args.query.as_str()], TextKind::Query)?;
    let view = MaskedView::new(&repo, None, false);
    let visible: HashSet<String> = view.functions().map(|(_, f)| function_key(f)).collect();
    let hits = index.search(q.row(0), args.k, &|r: &Row| visible.contains(&r.key))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
        return Ok(());
    }
    for h in &hits {
        println!(
            "{:.4}  {}:{}  {}",
            h.score, h.row.path, h.row.start_line, h.row.qualname
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Embed the functions of this repository (the texts `index --embed` embeds).
    #[arg(long, value_name = "DIR", required_unless_present = "texts")]
    pub repo: Option<PathBuf>,
    /// Or: a JSON file holding a list of texts to embed.
    #[arg(long, value_name = "FILE", conflicts_with = "repo")]
    pub texts: Option<PathBuf>,
    /// Embedding model: built-in alias, model directory, or Hugging Face repo id.
    #[arg(long, default_value = embed::DEFAULT_MODEL)]
    pub embed_model: String,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Padded tokens per forward pass [default: 2048 on the CPU, 8192 on a GPU].
    #[arg(long)]
    pub token_budget: Option<usize>,
    /// Python with sentence-transformers: runs benches/embed_peer.py on the same texts and
    /// device (batches of 32 on the CPU, 128 on a GPU), interleaved with ours, and reports the
    /// ratio.
    #[arg(long, value_name = "PYTHON")]
    pub peer_python: Option<PathBuf>,
    /// Threads for the peer (ours uses rayon's pool: RAYON_NUM_THREADS or all cores).
    #[arg(long, default_value_t = 2)]
    pub peer_threads: usize,
    /// Rows of the random matrix for the top-k latency measurement.
    #[arg(long, default_value_t = 100_000)]
    pub topk_rows: usize,
    #[arg(long)]
    pub json: bool,
}

fn load_texts(path: &Path) -> Result<Vec<String>> {
    let raw =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let texts: Vec<String> = serde_json::from_str(&raw)
        .with_context(|| format!("{}: expected a JSON list of strings", path.display()))?;
    let texts: Vec<String> = texts.into_iter().filter(|t| !t.trim().is_empty()).collect();
    if texts.is_empty() {
        bail!("{}: no non-empty texts to embed", path.display());
    }
    Ok(texts)
}

/// One run of the peer script; its JSON report.
fn run_peer(
    python: &Path,
    texts: &Path,
    model: &Path,
    threads: usize,
    device: &str,
) -> Result<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/embed_peer.py");
    let out = std::process::Command::new(python)
        .arg(&script)
        .args(["--texts", &texts.to_string_lossy()])
        .args(["--model", &model.to_string_lossy()])
        .args(["--threads", &threads.to_string(), "--runs", "1"])
        .args(["--device", device])
        // On a GPU the peer gets batches nearer the tokens ours packs into a pass.
        .args(["--batch-size", if device == "cpu" { "32" } else { "128" }])
        .output()
        .with_context(|| format!("cannot run {} {}", python.display(), script.display()))?;
    if !out.status.success() {
        bail!(
            "peer benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).with_context(|| format!("peer printed no JSON: {line}"))
}

/// Median latency of top-10 queries over `rows` random unit vectors of `dim`.
fn topk_latency_ms(rows: usize, dim: usize) -> Result<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let matrix: Vec<f32> = (0..rows * dim).map(|_| rng.random::<f32>() - 0.5).collect();
    let meta: Vec<Row> = (0..rows)
        .map(|i| Row {
            key: i.to_string(),
            qualname: String::new(),
            path: String::new(),
            start_line: 0,
            hash: String::new(),
        })
        .collect();
    let index = VectorIndex::from_parts("bench", dim, meta, matrix);
    let all = |_: &Row| true;
    let mut times = Vec::new();
    for _ in 0..25 {
        let q: Vec<f32> = (0..dim).map(|_| rng.random::<f32>() - 0.5).collect();
        let t = Instant::now();
        let hits = index.search(&q, 10, &all)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(hits.len() == 10);
    }
    Ok(median(&times))
}

pub fn bench(args: BenchArgs) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let (texts, texts_path) = match (&args.repo, &args.texts) {
        (Some(dir), _) => {
            let opts = repohop::repo::IndexOptions {
                cache_dir: Some(scratch.path().join("symbols")),
                use_cache: false,
                ..Default::default()
            };
            let repo = Repository::open(dir, &opts)
                .with_context(|| format!("cannot index {}", dir.display()))?;
            let texts: Vec<String> = function_items(&repo).into_iter().map(|i| i.text).collect();
            // The peer reads the very same texts.
            let path = scratch.path().join("texts.json");
            std::fs::write(&path, serde_json::to_vec(&texts)?)?;
            (texts, path)
        }
        (None, Some(path)) => (load_texts(path)?, path.clone()),
        (None, None) => bail!("give --repo DIR or --texts FILE"),
    };
    if texts.is_empty() {
        bail!("no functions to embed");
    }
    let device = embed::parse_device(&args.device)?;
    let dir = embed::resolve(&args.embed_model)?;
    let t = Instant::now();
    let mut model = LocalEmbedder::from_dir(&dir, &device)?;
    let load_s = t.elapsed().as_secs_f64();
    let token_budget = args
        .token_budget
        .unwrap_or_else(|| embed::default_token_budget(&device));
    model.set_token_budget(token_budget);
    let items: Vec<Item> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| Item {
            key: i.to_string(),
            qualname: format!("text{i}"),
            path: String::new(),
            start_line: 0,
            text: text.clone(),
        })
        .collect();
    // Warm-up (allocator, thread pool, page faults on the weights).
    let head: Vec<&str> = texts.iter().take(32).map(String::as_str).collect();
    model.embed(&head, embed::TextKind::Document)?;

    let (mut cold, mut warm, mut peer_runs) = (Vec::new(), Vec::new(), Vec::new());
    let mut stats = None;
    let mut peer_info = None;
    for _ in 0..args.runs.max(1) {
        let cache = tempfile::tempdir()?;
        let t = Instant::now();
        let (_, report) = VectorIndex::update(cache.path(), &model, &items)?;
        cold.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let (_, again) = VectorIndex::update(cache.path(), &model, &items)?;
        warm.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            again.embedded == 0,
            "warm re-index embedded {} texts",
            again.embedded
        );
        stats = Some(report.stats);
        if let Some(python) = &args.peer_python {
            let p = run_peer(
                python,
                &texts_path,
                &dir.path,
                args.peer_threads,
                &args.device,
            )?;
            peer_runs.push(p["median_s"].as_f64().unwrap_or(f64::NAN));
            peer_info = Some(p);
        }
    }
    let stats = stats.unwrap_or_default();
    let cold_s = median(&cold);
    let warm_s = median(&warm);
    let topk_ms = topk_latency_ms(args.topk_rows, model.info().dim)?;
    let ours_fps = texts.len() as f64 / cold_s;
    let peer = peer_info.map(|p| {
        let s = median(&peer_runs);
        json!({
            "engine": p["engine"],
            "threads": p["threads"],
            "tokens": p["tokens"],
            "runs_s": peer_runs,
            "median_s": s,
            "functions_per_s": texts.len() as f64 / s,
            "tokens_per_s": p["tokens"].as_f64().unwrap_or(f64::NAN) / s,
            // Time ratio on the same texts (ours embeds each distinct text once).
            "ratio_ours_over_peer": s / cold_s,
            "ratio_tokens_per_s": (stats.tokens as f64 / cold_s)
                / (p["tokens"].as_f64().unwrap_or(f64::NAN) / s),
        })
    });
    let report = json!({
        "model": model.info(),
        "texts": texts.len(),
        "threads": rayon::current_num_threads(),
        "token_budget": token_budget,
        "load_s": load_s,
        "stats": stats,
        "padding_fraction": 1.0 - stats.tokens as f64 / stats.padded_tokens.max(1) as f64,
        "cold": {
            "runs_s": cold,
            "median_s": cold_s,
            "functions_per_s": ours_fps,
            "tokens_per_s": stats.tokens as f64 / cold_s,
        },
        "warm": { "runs_s": warm, "median_s": warm_s },
        "topk": { "rows": args.topk_rows, "dim": model.info().dim, "k": 10, "median_ms": topk_ms },
        "peer": peer,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "model {} ({}-d), {} texts, {} tokens ({} truncated), {} threads, load {:.2}s",
        model.info().name,
        model.info().dim,
        texts.len(),
        stats.tokens,
        stats.truncated,
        rayon::current_num_threads(),
        load_s
    );
    println!(
        "cold index: {:.2}s median of {} → {:.1} functions/s, {:.0} tokens/s (padding {:.1}%)",
        cold_s,
        args.runs,
        ours_fps,
        stats.tokens as f64 / cold_s,
        100.0 * report["padding_fraction"].as_f64().unwrap_or(0.0)
    );
    println!("warm re-index (nothing to embed): {:.1} ms", warm_s * 1e3);
    println!(
        "top-10 over {} × {}: {:.2} ms median",
        args.topk_rows,
        model.info().dim,
        topk_ms
    );
    if let Some(p) = &report["peer"].as_object() {
        println!(
            "peer {}: {:.2}s → {:.1} functions/s; ratio repohop/peer = {:.2}",
            p["engine"].as_str().unwrap_or("?"),
            p["median_s"].as_f64().unwrap_or(f64::NAN),
            p["functions_per_s"].as_f64().unwrap_or(f64::NAN),
            p["ratio_ours_over_peer"].as_f64().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
