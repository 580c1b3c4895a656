//! The embedding index: vectors under `<repo>/.repohop/` (or `--cache-dir`), keyed by content
//! hash, written atomically, rebuilt whenever they cannot be trusted. (The symbol cache, which
//! the repository model reads and writes itself, is [`crate::repo::cache`].)

pub mod vectors;
