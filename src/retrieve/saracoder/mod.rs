//! SaraCoder (line completion) and the baselines it is measured against (RepoCoder's windows,
//! GraphCoder's slices): retrieval, ranking and the imported entities. Parameters the paper
//! leaves open are arguments with documented defaults.

pub mod eaid;
pub mod rank;
pub mod retrieval;
pub mod store;

pub use rank::{dsed, jaccard, mmr, tokens, Dsed, GAMMA, LAMBDA};
pub use retrieval::{
    cut_before, retrieve, Codebase, Cursor, Options, Pick, Rank, Retrieval, RetrieveError, Snippet,
    Units,
};
pub use store::StoreReport;
