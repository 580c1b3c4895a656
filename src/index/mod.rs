//! Persistent indexes over a repository.

pub mod vectors;
