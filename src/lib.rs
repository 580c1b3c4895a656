//! repohop: offline repository-level code generation (DyCoder) with local models.

// Every unsafe operation sits in its own `unsafe` block, with a `// SAFETY:` comment saying
// why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod embed;
pub mod eval;
pub mod fsutil;
/// Bodies of the fuzz targets in `fuzz/`, replayed by `tests/fuzz_regressions.rs`.
#[doc(hidden)]
pub mod fuzzing;
pub mod generate;
pub mod gpu;
pub mod graph;
pub mod index;
pub mod llm;
pub mod models;
pub mod repo;
pub mod retrieve;
