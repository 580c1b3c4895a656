//! Measurements for `repohop bench ...` and the benches of `llm` and `search`: medians of
//! several runs, wall-clock and CPU seconds.

use anyhow::Result;
use std::time::Instant;

/// The median of some measurements (NaN when there are none).
pub fn median(xs: &[f64]) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// Wall-clock seconds of each run, and the median CPU seconds (all threads) per run when the
/// platform reports them: on a loaded machine CPU time is the steadier figure.
pub struct Runs {
    pub wall: Vec<f64>,
    pub cpu: Option<f64>,
}

pub fn time_runs(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<Runs> {
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    for _ in 0..runs {
        let c = cpu_seconds();
        let t = Instant::now();
        f()?;
        wall.push(t.elapsed().as_secs_f64());
        if let (Some(a), Some(b)) = (c, cpu_seconds()) {
            cpu.push(b - a);
        }
    }
    let cpu = (cpu.len() == runs).then(|| median(&cpu));
    Ok(Runs { wall, cpu })
}

/// User + system CPU time of this process (all threads), from /proc/self/stat (Linux; clock
/// ticks of 1/100 s).
pub fn cpu_seconds() -> Option<f64> {
    proc_stat_seconds(11)
}

/// User + system CPU time of this process's finished (waited-for) children.
pub fn children_cpu_seconds() -> Option<f64> {
    proc_stat_seconds(13)
}

/// The sum of two consecutive clock-tick fields of /proc/self/stat, `first` counted from the
/// field after the command name, in seconds.
fn proc_stat_seconds(first: usize) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let a: f64 = fields.get(first)?.parse().ok()?;
    let b: f64 = fields.get(first + 1)?.parse().ok()?;
    Some((a + b) / 100.0)
}

/// Starts a new peak-RSS window for this process (Linux: writing 5 to /proc/self/clear_refs);
/// false where the platform can't.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident memory of this process in MiB (VmHWM), since it began or since
/// [`reset_peak_rss`].
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}
