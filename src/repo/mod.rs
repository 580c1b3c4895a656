//! The repository model: walking, parsing, symbol table, masking and the tree view.

pub mod cache;
pub mod diagnostic;
pub mod ids;
pub mod lang;
pub mod mask;
pub mod model;
pub mod pystr;
pub mod repository;
pub mod symbols;
pub mod table;
pub mod tree;
pub mod walk;
pub mod write;

pub use diagnostic::{Diagnostic, DiagnosticKind};
pub use ids::{ClassId, Def, FileId, FnId};
pub use mask::{resolve_target, MaskedView, TargetError};
pub use model::*;
pub use repository::{IndexOptions, IndexStats, RepoError, Repository};
pub use symbols::{ImportTarget, Resolver, Unresolved};
pub use table::SymbolTable;
pub use tree::TreeOptions;

/// A repository of `files` (path, text) in a fresh temporary folder, indexed without a cache:
/// the setup of unit tests that need a small repository.
#[cfg(test)]
pub(crate) fn temp_repository(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("a file path")).expect("folders");
        std::fs::write(p, text).expect("file");
    }
    let opts = IndexOptions {
        use_cache: false,
        ..IndexOptions::default()
    };
    let repo = Repository::open(dir.path(), &opts).expect("index");
    (dir, repo)
}
