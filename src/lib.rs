//! repohop: offline repository-level code generation (DyCoder, SaraCoder) with local models.

pub mod embed;
pub mod index;
pub mod models;
pub mod repo;
