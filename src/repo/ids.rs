//! Ids of a repository's files and definitions: indexes into what [`super::Repository`] holds.

use serde::{Deserialize, Serialize};

/// Index of a file in [`super::Repository::files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId(pub u32);

/// Index of a function or method in [`super::Repository::function_ids`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FnId(pub u32);

/// Index of a class in [`super::Repository::class_ids`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClassId(pub u32);

/// A definition a name can resolve to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum Def {
    Function(FnId),
    Class(ClassId),
}
