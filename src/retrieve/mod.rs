//! Context retrievers: each reads the repository only through a masked view.

pub mod dense;
pub mod dyretriever;
