//! The repository model: walking, parsing, symbol table, masking and the tree view.

pub mod lang;
pub mod model;

pub use model::*;
