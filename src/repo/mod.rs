//! The repository model: walking, parsing, symbol table, masking and the tree view.

pub mod diagnostic;
pub mod lang;
pub mod mask;
pub mod model;
pub mod repository;
pub mod symbols;
pub mod tree;
pub mod walk;
pub mod write;

pub use diagnostic::{Diagnostic, DiagnosticKind};
pub use mask::{resolve_target, MaskedView, TargetError};
pub use model::*;
pub use repository::{ClassId, Def, FileId, FnId, IndexOptions, IndexStats, RepoError, Repository};
pub use symbols::{ImportTarget, Resolver, Unresolved};
pub use tree::TreeOptions;
