//! One module per command family; each exposes its clap arguments and a `run`.

pub mod models;
pub mod search;
