//! A repository's own vectors, in its cache folder (`<cache>/vectors` for its functions,
//! `<cache>/slices` for SimpleRAG's windows): what `repohop index --embed` and `repohop search`
//! bring up to date, and where a generation session keeps them unless told otherwise
//! ([`super::session::VectorPlace::Repository`]).

use std::path::PathBuf;

use super::pipeline::Corpus;
use crate::embed::Embedder;
use crate::index::vectors::{IndexError, UpdateReport, VectorIndex};
use crate::repo::Repository;

/// The folder of `repo`'s vectors of `corpus`.
pub fn repository_dir(repo: &Repository, corpus: Corpus) -> PathBuf {
    repo.cache_dir().join(corpus.cache_name())
}

/// `repo`'s vectors of `corpus`, brought up to date with `embedder`: only texts whose hash is
/// not cached are embedded ([`VectorIndex::update`]).
pub fn update(
    repo: &Repository,
    corpus: Corpus,
    embedder: &dyn Embedder,
) -> Result<(VectorIndex, UpdateReport), IndexError> {
    VectorIndex::update(&repository_dir(repo, corpus), embedder, &corpus.items(repo))
}
