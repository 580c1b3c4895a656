//! Persistent caches under `<repo>/.repohop/` (or `--cache-dir`), keyed by file content hash,
//! written atomically, rebuilt whenever they cannot be trusted.

pub mod symbols;
pub mod vectors;
