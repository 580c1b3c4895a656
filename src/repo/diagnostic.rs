//! Things worth telling the user about a repository: files skipped, decoded lossily, parsed with
//! errors, a cache that could not be trusted. Recorded, never panicked on, never silent.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosticKind {
    /// Skipped: NUL bytes in the first 8 KiB.
    Binary,
    /// Skipped: larger than the size limit.
    TooLarge,
    /// Skipped: a symbolic link that leads back to one of its ancestors.
    SymlinkLoop,
    /// Skipped: a symbolic link leading outside the repository root (the walk never leaves it).
    LinkOutsideRoot,
    /// Skipped: the file or directory could not be read.
    Unreadable,
    /// Indexed: bytes that are not UTF-8 were replaced by U+FFFD before parsing.
    NonUtf8,
    /// Indexed: tree-sitter recovered from syntax errors; what parsed around them is kept.
    SyntaxErrors,
    /// Indexed: an empty source file, no symbols.
    Empty,
    /// The symbol cache was missing pieces, corrupt or from another version, and was rebuilt.
    Cache,
}

/// One recorded event about one path (repository-relative where possible).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub path: String,
    pub kind: DiagnosticKind,
    pub what: String,
}

impl Diagnostic {
    pub fn new(path: impl Into<String>, kind: DiagnosticKind, what: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            kind,
            what: what.into(),
        }
    }

    /// Whether the file was left out of the index (as opposed to indexed with a warning).
    pub fn is_skip(&self) -> bool {
        matches!(
            self.kind,
            DiagnosticKind::Binary
                | DiagnosticKind::TooLarge
                | DiagnosticKind::SymlinkLoop
                | DiagnosticKind::LinkOutsideRoot
                | DiagnosticKind::Unreadable
        )
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.what)
    }
}
