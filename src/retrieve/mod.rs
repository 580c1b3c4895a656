//! Context retrievers: each reads the repository only through a masked view.

pub mod bm25;
pub mod dense;
pub mod dyretriever;
pub mod saracoder;
pub mod slices;

use serde::Serialize;

use crate::repo::FnId;

/// A function found by a similarity retriever, with its score (cosine or BM25).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FunctionHit {
    #[serde(skip)]
    pub id: FnId,
    pub score: f32,
}
