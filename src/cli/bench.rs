//! `repohop bench ...`: throughput figures, medians of several runs, with a peer measured in the
//! same run where one exists.

use anyhow::{Context, Result};
use clap::Subcommand;
use rayon::prelude::*;
use repohop::repo::{lang, walk, IndexOptions, Repository};
use serde_json::json;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::measure::{children_cpu_seconds, median, time_runs, Runs};

#[derive(Subcommand)]
pub enum Cmd {
    /// The local LLM: prefill and decode tokens/s (512-token prompt, 128 new tokens), the
    /// constrained-decoding overhead, and prefix-cache savings.
    Llm(super::llm::BenchLlmArgs),
    /// Embedding throughput on a repository's functions, cold and warm, against
    /// sentence-transformers in the same run; top-k latency on 100k random vectors.
    Embed(super::search::BenchArgs),
    /// Line completion without the LLM: codebase build, retrieval latency per cursor for
    /// vanilla, GraphCoder and SaraCoder (cold and warm), prompt tokens at top-k 1, 4, 10.
    Lines(super::bench_lines::BenchLinesArgs),
    /// Index a generated Python corpus: cold (no cache), warm (no change), parse only, and
    /// Python's `ast` on the same files (benches/ast_parse.py) for the ratio.
    Index {
        /// Approximate number of lines to generate.
        #[arg(long, default_value_t = 100_000)]
        lines: usize,
        /// Runs per measurement (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Index this repository instead of a generated corpus.
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Llm(args) => super::llm::bench(args),
        Cmd::Embed(args) => super::search::bench(args),
        Cmd::Lines(args) => super::bench_lines::bench(args),
        Cmd::Index {
            lines,
            runs,
            repo,
            json,
        } => index(lines, runs.max(1), repo, json),
    }
}

fn index(lines: usize, runs: usize, repo: Option<PathBuf>, as_json: bool) -> Result<()> {
    let tmp;
    let root: PathBuf = match repo {
        Some(r) => r,
        None => {
            tmp = tempfile::tempdir().context("cannot create a temporary folder for the corpus")?;
            generate_corpus(tmp.path(), lines)?;
            tmp.path().to_path_buf()
        }
    };
    let cache = tempfile::tempdir().context("cannot create a temporary cache folder")?;
    let opts = IndexOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    };

    // Cold: no cache file (parse everything, write the cache).
    let mut info = None;
    let cold = time_runs(runs, || {
        let _ = std::fs::remove_file(cache.path().join(repohop::repo::cache::FILE_NAME));
        let r = Repository::open(&root, &opts)?;
        info = Some(r.stats().clone());
        Ok(())
    })?;
    let stats = info.context("no run")?;
    // Warm: the cache from the last cold run, nothing changed.
    let mut warm_parsed = 0;
    let warm = time_runs(runs, || {
        let r = Repository::open(&root, &opts)?;
        warm_parsed += r.stats().parsed;
        Ok(())
    })?;

    // Parse only, from memory, as the Python peer measures.
    let w = walk::walk(&root, walk::DEFAULT_MAX_FILE_SIZE, &[]);
    let packages = walk::package_dirs(w.files.iter().map(|f| f.path.as_str()));
    let sources: Vec<(String, String, String)> = w
        .files
        .iter()
        .filter(|f| f.path.ends_with(".py"))
        .filter_map(|f| {
            let text = std::fs::read_to_string(&f.abs).ok()?;
            Some((
                f.path.clone(),
                walk::python_module(&f.path, &packages),
                text,
            ))
        })
        .collect();
    let py_bytes: usize = sources.iter().map(|s| s.2.len()).sum();
    let py = lang::for_path("x.py").context("no Python front end")?;
    let mut py_functions = 0;
    let parse1 = time_runs(runs, || {
        py_functions = sources
            .iter()
            .map(|(p, m, t)| py.parse(p, m, t).functions.len())
            .sum();
        Ok(())
    })?;
    let parse_par = time_runs(runs, || {
        let n: usize = sources
            .par_iter()
            .map(|(p, m, t)| py.parse(p, m, t).functions.len())
            .sum();
        py_functions = n;
        Ok(())
    })?;

    let ast = python_ast(&root, runs);
    let (cold_m, warm_m, p1_m, pp_m) = (
        median(&cold.wall),
        median(&warm.wall),
        median(&parse1.wall),
        median(&parse_par.wall),
    );
    let mb = stats.source_bytes as f64 / 1e6;
    let fig = |s: f64, runs: &Runs| {
        json!({"median_s": s, "runs_s": runs.wall, "cpu_s": runs.cpu, "mb_per_s": mb / s,
               "functions_per_s": stats.functions as f64 / s})
    };
    let py_fig = |s: f64, runs: &Runs| {
        json!({"median_s": s, "runs_s": runs.wall, "cpu_s": runs.cpu,
               "mb_per_s": py_bytes as f64 / 1e6 / s,
               "functions_per_s": py_functions as f64 / s})
    };
    let ast_ratio = ast
        .as_ref()
        .ok()
        .and_then(|a| a["seconds"].as_f64())
        .map(|s| s / p1_m);
    let out = json!({
        "root": root,
        "threads": rayon::current_num_threads(),
        "files": stats.files, "source_files": stats.source_files, "bytes": stats.source_bytes,
        "lines": count_lines(&sources), "functions": stats.functions, "runs": runs,
        "cold_index": fig(cold_m, &cold),
        "warm_index": fig(warm_m, &warm),
        "load_average": std::fs::read_to_string("/proc/loadavg").ok()
            .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse::<f64>().ok())),
        "warm_files_reparsed": warm_parsed,
        "parse_only_1_thread": py_fig(p1_m, &parse1),
        "parse_only_parallel": py_fig(pp_m, &parse_par),
        "python_ast": match &ast { Ok(v) => v.clone(), Err(e) => json!({"skipped": e.to_string()}) },
        "ast_seconds_over_parse_1_thread": ast_ratio,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "corpus: {} source files, {} lines, {:.2} MB, {} functions ({} threads, median of {runs})",
        stats.source_files, out["lines"], mb, stats.functions, out["threads"]
    );
    let line = |name: &str, s: f64, runs: &Runs, target: &str| {
        let cpu = runs
            .cpu
            .map(|c| format!("{:>7.0} ms CPU", c * 1e3))
            .unwrap_or_default();
        println!(
            "  {name:<24} {:>8.1} ms {cpu}  {:>7.1} MB/s  {:>9.0} functions/s  {target}",
            s * 1e3,
            mb / s,
            stats.functions as f64 / s
        )
    };
    line(
        "cold index (no cache)",
        cold_m,
        &cold,
        "(target < 2000 ms for 100k lines)",
    );
    line("warm index (no change)", warm_m, &warm, "(target < 300 ms)");
    line("parse only, 1 thread", p1_m, &parse1, "");
    line("parse only, parallel", pp_m, &parse_par, "");
    match &ast {
        Ok(a) => {
            let s = a["seconds"].as_f64().unwrap_or(f64::NAN);
            println!(
                "  {:<24} {:>8.1} ms  (python3 benches/ast_parse.py, same files)",
                "python ast",
                s * 1e3
            );
            if let Some(c) = a["cpu_s_per_run_at_most"].as_f64() {
                println!(
                    "  {:<24} {:>8} ms CPU per run at most (whole python process / runs)",
                    "",
                    (c * 1e3).round()
                );
            }
            if let Some(r) = ast_ratio {
                println!("  ratio: python ast takes {r:.2}x the time of repohop's 1-thread parse");
            }
        }
        Err(e) => println!("  python ast: skipped ({e})"),
    }
    if let Some(l) = out["load_average"].as_f64() {
        println!("  load average at the end: {l:.1} (on a loaded machine, compare CPU times and the ratio)");
    }
    if warm_parsed > 0 {
        println!("  warning: warm runs re-parsed {warm_parsed} file(s)");
    }
    Ok(())
}

fn count_lines(sources: &[(String, String, String)]) -> usize {
    sources.iter().map(|s| s.2.lines().count()).sum()
}

/// Runs the peer script; an error says why it was skipped.
fn python_ast(root: &Path, runs: usize) -> Result<serde_json::Value> {
    let script = [
        PathBuf::from("benches/ast_parse.py"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/ast_parse.py"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .context("benches/ast_parse.py not found (run from the repohop source folder)")?;
    let before = children_cpu_seconds();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(root)
        .arg("--runs")
        .arg(runs.to_string())
        .output()
        .context("python3 is not available")?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let mut v: serde_json::Value = serde_json::from_str(&last)
        .with_context(|| format!("unexpected output from {}: {last}", script.display()))?;
    // The whole process (start-up, reading, every run) over the runs: an upper bound on the CPU
    // time of one run, comparable with ours on a loaded machine.
    if let (Some(a), Some(b), Some(o)) = (before, children_cpu_seconds(), v.as_object_mut()) {
        o.insert("cpu_s_per_run_at_most".into(), json!((b - a) / runs as f64));
    }
    Ok(v)
}

/// A deterministic pseudo-random sequence (xorshift64*), so the corpus is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Writes about `lines` lines of Python: packages of modules, each with imports (absolute,
/// relative, lazy), classes with methods calling each other, decorated functions, docstrings.
pub fn generate_corpus(dir: &Path, lines: usize) -> Result<()> {
    const MODULES_PER_PACKAGE: usize = 10;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut written = 0;
    let mut m = 0;
    while written < lines {
        let pkg = m / MODULES_PER_PACKAGE;
        let pdir = dir.join(format!("pkg{pkg:03}"));
        if m % MODULES_PER_PACKAGE == 0 {
            std::fs::create_dir_all(&pdir)?;
            std::fs::write(
                pdir.join("__init__.py"),
                format!("\"\"\"Package {pkg}.\"\"\"\n"),
            )?;
            written += 1;
        }
        let src = module_source(&mut rng, pkg, m % MODULES_PER_PACKAGE);
        written += src.lines().count();
        std::fs::write(
            pdir.join(format!("mod{:02}.py", m % MODULES_PER_PACKAGE)),
            src,
        )
        .with_context(|| format!("cannot write the corpus under {}", dir.display()))?;
        m += 1;
    }
    Ok(())
}

fn module_source(rng: &mut Rng, pkg: usize, module: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\"\"\"Module {module} of package {pkg}: generated for the index benchmark.\"\"\"\n"
    );
    let _ = writeln!(
        s,
        "import os\nimport json as _json\nfrom collections import defaultdict"
    );
    let _ = writeln!(s, "from . import mod{:02}", (module + 1) % 10);
    let _ = writeln!(s, "from .mod{:02} import helper_0\n\n", (module + 3) % 10);
    let _ = writeln!(s, "CONSTANT = {}\n\n", rng.below(1000));
    for c in 0..3 {
        let _ = writeln!(s, "class Widget{c}(object):");
        let _ = writeln!(
            s,
            "    \"\"\"A widget with {} parts.\"\"\"\n",
            rng.below(50)
        );
        let _ = writeln!(s, "    kind = \"w{c}\"\n");
        let _ = writeln!(s, "    def __init__(self, size, name=None):");
        let _ = writeln!(s, "        self.size = size\n        self.name = name or \"w\"\n        self.parts = []\n");
        for k in 0..6 {
            if k % 3 == 0 {
                let _ = writeln!(s, "    @property");
            }
            let _ = writeln!(s, "    def method_{k}(self, x=1, *args, **kwargs):");
            let _ = writeln!(
                s,
                "        \"\"\"Compute step {k}.\n\n        Returns a number.\n        \"\"\""
            );
            let _ = writeln!(s, "        total = 0");
            let _ = writeln!(s, "        for i in range(x + {}):", rng.below(9) + 1);
            let _ = writeln!(
                s,
                "            if i % 2 == 0:\n                total += self.size * i"
            );
            let _ = writeln!(
                s,
                "            else:\n                total -= helper_{}(i)",
                rng.below(8)
            );
            if k > 0 {
                let _ = writeln!(s, "        total += self.method_{}()", rng.below(k));
            }
            let _ = writeln!(s, "        return total\n");
        }
        s.push('\n');
    }
    for h in 0..8 {
        if h % 4 == 1 {
            let _ = writeln!(s, "@staticmethod");
        }
        let _ = writeln!(s, "def helper_{h}(value, scale={}):", rng.below(10));
        let _ = writeln!(s, "    \"\"\"Helper {h}.\"\"\"");
        if h % 3 == 0 {
            let _ = writeln!(s, "    import math");
            let _ = writeln!(s, "    value = math.sqrt(abs(value))");
        }
        let _ = writeln!(s, "    data = defaultdict(list)");
        let _ = writeln!(s, "    for k in range({}):", rng.below(20) + 1);
        let _ = writeln!(s, "        data[k % 3].append(value * scale)");
        let _ = writeln!(
            s,
            "    if os.environ.get(\"DEBUG\"):\n        print(_json.dumps(data))"
        );
        let _ = writeln!(s, "    return sum(len(v) for v in data.values())\n\n");
    }
    s
}
