//! Choosing the next token from logits: argmax, or temperature + top-p sampling, optionally
//! restricted to the tokens a constraint allows.

use rand::rngs::StdRng;
use rand::Rng;

/// Index of the largest logit among those `allowed` accepts, checking `allowed` only for
/// logits that beat the best so far (so a strict constraint costs one check per improvement).
pub fn argmax_where(logits: &[f32], mut allowed: impl FnMut(u32) -> bool) -> Option<u32> {
    let mut best: Option<(u32, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) && allowed(i as u32) {
            best = Some((i as u32, v));
        }
    }
    best.map(|(i, _)| i)
}

/// Samples from `softmax(logits / temperature)` cut to the top-p nucleus, over `candidates`.
pub fn sample(
    logits: &[f32],
    candidates: &[u32],
    temperature: f32,
    top_p: f32,
    rng: &mut StdRng,
) -> Option<u32> {
    if candidates.is_empty() {
        return None;
    }
    let t = temperature.max(1e-5);
    let max = candidates
        .iter()
        .map(|&i| logits[i as usize])
        .fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(u32, f32)> = candidates
        .iter()
        .map(|&i| (i, ((logits[i as usize] - max) / t).exp()))
        .collect();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f32 = probs.iter().map(|p| p.1).sum();
    let mut kept = 0.0;
    let mut cut = probs.len();
    for (n, p) in probs.iter().enumerate() {
        kept += p.1 / total;
        if kept >= top_p.clamp(0.0, 1.0) {
            cut = n + 1;
            break;
        }
    }
    probs.truncate(cut);
    let mass: f32 = probs.iter().map(|p| p.1).sum();
    let mut r = rng.random::<f32>() * mass;
    for &(i, p) in &probs {
        if r < p {
            return Some(i);
        }
        r -= p;
    }
    probs.last().map(|p| p.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn argmax_where_skips_rejected_tokens() {
        let logits = [0.1, 3.0, 2.0, -1.0];
        assert_eq!(argmax_where(&logits, |_| true), Some(1));
        assert_eq!(argmax_where(&logits, |i| i != 1), Some(2));
        assert_eq!(argmax_where(&logits, |_| false), None);
    }

    #[test]
    fn top_p_small_keeps_only_the_best() {
        let mut rng = StdRng::seed_from_u64(7);
        let logits = [0.0, 5.0, 1.0];
        for _ in 0..20 {
            assert_eq!(sample(&logits, &[0, 1, 2], 1.0, 0.1, &mut rng), Some(1));
        }
    }
}
