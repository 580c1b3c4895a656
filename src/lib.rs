//! repohop: offline repository-level code generation (DyCoder) with local models.

pub mod embed;
pub mod eval;
pub mod fsutil;
pub mod generate;
pub mod index;
pub mod llm;
pub mod models;
pub mod repo;
pub mod retrieve;
