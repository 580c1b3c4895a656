//! One module per command family; each exposes its clap arguments and a `run`.

pub mod eval;
pub mod models;
