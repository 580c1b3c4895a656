//! Tokenization in parallel, and packing of token sequences into padded batches: sequences are
//! sorted by length and grouped under a budget of padded tokens, so short texts travel in large
//! batches, long ones in small ones, and little compute goes to padding.

use std::path::Path;

use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::EmbedError;

/// Load `tokenizer.json` with its own padding switched off (we pad per batch) and truncation
/// at `max_tokens` (special tokens included, as the reference implementations count).
pub fn load_tokenizer(path: &Path, max_tokens: usize) -> Result<Tokenizer, EmbedError> {
    let bad = |reason: String| EmbedError::BadFile {
        path: path.into(),
        reason,
    };
    let mut tok = crate::llm::read_tokenizer(path).map_err(|e| match e {
        crate::llm::LlmError::Load { reason, .. } => bad(reason),
        other => bad(other.to_string()),
    })?;
    tok.with_padding(None);
    tok.with_truncation(Some(TruncationParams {
        max_length: max_tokens,
        strategy: TruncationStrategy::LongestFirst,
        stride: 0,
        direction: TruncationDirection::Right,
    }))
    .map_err(|e| bad(format!("cannot truncate at {max_tokens} tokens: {e}")))?;
    Ok(tok)
}

/// One tokenized text.
#[derive(Debug, Clone)]
pub struct Tokens {
    pub ids: Vec<u32>,
    /// The text was longer than the model's maximum and was cut.
    pub truncated: bool,
}

/// Tokenize all texts (with `prompt` prepended) in parallel.
pub fn tokenize(
    tok: &Tokenizer,
    model: &str,
    texts: &[&str],
    prompt: Option<&str>,
) -> Result<Vec<Tokens>, EmbedError> {
    texts
        .par_iter()
        .enumerate()
        .map(|(index, text)| {
            let input = match prompt {
                Some(p) => format!("{p}{text}"),
                None => (*text).to_string(),
            };
            let enc = tok.encode(input, true).map_err(|e| EmbedError::Tokenize {
                model: model.into(),
                index,
                reason: e.to_string(),
            })?;
            if enc.get_ids().is_empty() {
                return Err(EmbedError::EmptyText { index });
            }
            Ok(Tokens {
                truncated: !enc.get_overflowing().is_empty(),
                ids: enc.get_ids().to_vec(),
            })
        })
        .collect()
}

/// Group text indices into batches: longest first, each batch's `rows × longest` at most
/// `budget` (a single sequence always fits).
pub fn plan(tokens: &[Tokens], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(tokens[i].ids.len()));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut longest = 0;
    for i in order {
        let len = tokens[i].ids.len();
        let width = longest.max(len);
        if !current.is_empty() && (current.len() + 1) * width > budget {
            batches.push(std::mem::take(&mut current));
            longest = 0;
        }
        longest = longest.max(len);
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// A padded batch, row-major `rows × len`.
pub struct Batch {
    pub rows: usize,
    pub len: usize,
    pub ids: Vec<u32>,
    pub mask: Vec<bool>,
}

impl Batch {
    pub fn pack(tokens: &[Tokens], members: &[usize], pad_id: u32, left_pad: bool) -> Self {
        let len = members
            .iter()
            .map(|&i| tokens[i].ids.len())
            .max()
            .unwrap_or(0);
        let rows = members.len();
        let mut ids = vec![pad_id; rows * len];
        let mut mask = vec![false; rows * len];
        for (r, &i) in members.iter().enumerate() {
            let t = &tokens[i].ids;
            let start = r * len + if left_pad { len - t.len() } else { 0 };
            ids[start..start + t.len()].copy_from_slice(t);
            mask[start..start + t.len()].fill(true);
        }
        Self {
            rows,
            len,
            ids,
            mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(lens: &[usize]) -> Vec<Tokens> {
        lens.iter()
            .map(|&n| Tokens {
                ids: (1..=n as u32).collect(),
                truncated: false,
            })
            .collect()
    }

    #[test]
    fn plan_respects_budget_and_sorts_by_length() {
        let t = toks(&[3, 10, 5, 10, 2, 7]);
        let plan = plan(&t, 20);
        assert_eq!(plan, vec![vec![1, 3], vec![5, 2], vec![0, 4]]);
        for b in &plan {
            let w = b.iter().map(|&i| t[i].ids.len()).max().unwrap();
            assert!(b.len() * w <= 20);
        }
        // A sequence longer than the budget still gets its own batch.
        assert_eq!(super::plan(&toks(&[30, 1]), 20), vec![vec![0], vec![1]]);
    }

    #[test]
    fn pack_pads_left_or_right() {
        let t = toks(&[3, 1]);
        let right = Batch::pack(&t, &[0, 1], 0, false);
        assert_eq!(right.ids, vec![1, 2, 3, 1, 0, 0]);
        let left = Batch::pack(&t, &[0, 1], 9, true);
        assert_eq!(left.ids, vec![1, 2, 3, 9, 9, 1]);
        assert_eq!(left.mask, vec![true, true, true, false, false, true]);
    }
}
