//! One tree-sitter front end per language, behind one trait.

use super::model::{FileSymbols, Lang};

/// A language front end: turns one source file into symbols. Parsing never fails: tree-sitter
/// recovers from syntax errors, and the number of error nodes is reported in `parse_errors`.
pub trait Language: Sync {
    fn lang(&self) -> Lang;
    /// File extensions (without the dot) this front end parses.
    fn extensions(&self) -> &'static [&'static str];
    /// `path` is repository-relative; `module` is the dotted module name the walker derived from
    /// the path (Python); Java takes its package from the source instead.
    fn parse(&self, path: &str, module: &str, source: &str) -> FileSymbols;
}
