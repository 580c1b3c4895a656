//! One module per command family; each exposes its clap arguments and a `run`.

pub mod bench;
pub mod check;
pub mod eval;
pub mod generate;
pub mod llm;
pub mod models;
pub mod repo;
pub mod search;
