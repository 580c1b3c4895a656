//! SaraCoder (line completion): the ranking parts of its hierarchical feature optimisation over
//! code-context-graph slices. Parameters the paper leaves open are arguments with documented
//! defaults.

pub mod eaid;
pub mod rank;
pub mod retrieval;

pub use rank::{dsed, jaccard, mmr, tokens, Dsed, GAMMA, LAMBDA};
pub use retrieval::{cut_before, retrieve, Codebase, Options, Pick, Retrieval, Snippet};
