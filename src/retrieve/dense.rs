//! Dense similarity retrieval (DyCoder paper, section 3.2): cosine between the embedded query
//! (the target's signature and docstring) and every function the masked view shows.

use std::collections::HashMap;

use super::FunctionHit;
use crate::embed::{text, EmbedError, Embedder, TextKind};
use crate::index::vectors::{IndexError, Item, Row, VectorIndex};
use crate::repo::mask::MaskedView;
use crate::repo::model::Function;
use crate::repo::{FnId, Repository};

/// The stable key of a function's row: path, qualified name and first line.
pub fn function_key(f: &Function) -> String {
    format!("{}::{}@{}", f.path, f.qualname, f.span.start_line)
}

/// Every function of the repository as an item to embed. Test files are included: masks apply
/// at query time, so one matrix serves every target.
pub fn function_items(repo: &Repository) -> Vec<Item> {
    repo.function_ids()
        .map(|id| {
            let f = repo.function(id);
            Item {
                key: function_key(f),
                qualname: f.qualname.clone(),
                path: f.path.clone(),
                start_line: f.span.start_line as u32,
                text: text::function_text(repo.function_code(id)),
            }
        })
        .filter(|it| !it.text.trim().is_empty())
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum DenseError {
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// The `k` visible functions most similar to `query`, best first.
pub fn top_k(
    view: &MaskedView,
    embedder: &dyn Embedder,
    index: &VectorIndex,
    query: &str,
    k: usize,
) -> Result<Vec<FunctionHit>, DenseError> {
    let visible: HashMap<String, FnId> = view
        .functions()
        .map(|(id, f)| (function_key(f), id))
        .collect();
    let q = embedder.embed(&[query], TextKind::Query)?;
    let hits = index.search(q.row(0), k, &|r: &Row| visible.contains_key(&r.key))?;
    Ok(hits
        .iter()
        .filter_map(|h| {
            visible
                .get(&h.row.key)
                .map(|&id| FunctionHit { id, score: h.score })
        })
        .collect())
}
