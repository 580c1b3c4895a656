//! The symbol cache: each source file's symbols keyed by the sha256 of its bytes (and the module
//! name the walker gave it, which depends on other files), so a re-index parses only files that
//! changed or appeared.
//!
//! One file, `symbols.json`: a first line holding a JSON header (format, version, repohop
//! version), so an outdated cache is recognised without parsing the rest, then one JSON object
//! mapping each path to its entry. Anything unreadable, corrupt or from another version is
//! reported and rebuilt, never trusted; so is an entry whose locations do not fit its file
//! ([`check_symbols`]), even when its content hash matches.

use super::diagnostic::{Diagnostic, DiagnosticKind};
use super::model::{FileSymbols, Span};
use crate::fsutil::{AtomicFile, AtomicOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "symbols.json";
const FORMAT: &str = "repohop-symbols";
/// Bump when `FileSymbols` or what the front ends extract changes.
pub const VERSION: u32 = 1;

/// sha256 of a file's bytes, hex.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    repohop: String,
}

#[derive(Deserialize)]
struct Entry {
    hash: String,
    module: String,
    symbols: FileSymbols,
}

#[derive(Serialize)]
struct EntryRef<'a> {
    hash: &'a str,
    module: &'a str,
    symbols: &'a FileSymbols,
}

/// What one file contributes to the cache when it is written.
pub struct CacheRecord<'a> {
    pub path: &'a str,
    pub hash: &'a str,
    /// The module name the file was parsed with (part of the key).
    pub module: &'a str,
    pub symbols: &'a FileSymbols,
}

#[derive(Debug)]
pub struct SymbolCache {
    file: PathBuf,
    entries: HashMap<String, (String, String, FileSymbols)>,
    /// Whether the file on disk was usable as is (false: missing, corrupt or outdated).
    trusted: bool,
}

impl SymbolCache {
    /// A cache with nothing in it, to be written to `dir`.
    pub fn empty(dir: &Path) -> Self {
        Self {
            file: dir.join(FILE_NAME),
            entries: HashMap::new(),
            trusted: false,
        }
    }

    /// Loads `dir/symbols.json`. A missing file is an empty cache; a corrupt or outdated one is an
    /// empty cache plus a diagnostic saying it will be rebuilt.
    pub fn load(dir: &Path) -> (Self, Option<Diagnostic>) {
        let cache = Self::empty(dir);
        match crate::fsutil::read_no_follow(&cache.file) {
            Ok(bytes) => Self::from_bytes(dir, &bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (cache, None),
            Err(e) => {
                let d = cache.diag(format!("cannot read the symbol cache ({e}); rebuilding it"));
                (cache, Some(d))
            }
        }
    }

    /// The cache of `dir` from the bytes of its file, as [`SymbolCache::load`] reads them.
    pub fn from_bytes(dir: &Path, bytes: &[u8]) -> (Self, Option<Diagnostic>) {
        let mut cache = Self::empty(dir);
        let (head, body) = match bytes.iter().position(|&b| b == b'\n') {
            Some(i) => (&bytes[..i], &bytes[i + 1..]),
            None => (bytes, &[][..]),
        };
        let header: Header = match serde_json::from_slice(head) {
            Ok(h) => h,
            Err(e) => {
                let d = cache.diag(format!("symbol cache is corrupt ({e}); rebuilding it"));
                return (cache, Some(d));
            }
        };
        if header.format != FORMAT || header.version != VERSION || header.repohop != crate_version()
        {
            let d = cache.diag(format!(
                "symbol cache is format {:?} version {} from repohop {}, expected {FORMAT:?} \
                 version {VERSION} from repohop {}; rebuilding it",
                header.format,
                header.version,
                header.repohop,
                crate_version()
            ));
            return (cache, Some(d));
        }
        match serde_json::from_slice::<HashMap<String, Entry>>(body) {
            Ok(entries) => {
                cache.entries = entries
                    .into_iter()
                    .map(|(p, e)| (p, (e.hash, e.module, e.symbols)))
                    .collect();
                cache.trusted = true;
                (cache, None)
            }
            Err(e) => {
                let d = cache.diag(format!("symbol cache is corrupt ({e}); rebuilding it"));
                (cache, Some(d))
            }
        }
    }

    fn diag(&self, what: String) -> Diagnostic {
        Diagnostic::new(self.file.display().to_string(), DiagnosticKind::Cache, what)
    }

    /// Whether cached symbols exist for this path, content and module name.
    pub fn contains(&self, path: &str, hash: &str, module: &str) -> bool {
        self.entries
            .get(path)
            .is_some_and(|(h, m, _)| h == hash && m == module)
    }

    /// Whether the cached symbols of a file can be used for `text` (whose hash is `hash`): the
    /// entry must match the path, content and module name, and every location in it must fall
    /// inside `text` ([`check_symbols`]). A matching hash does not vouch for the rest of an
    /// entry: a repository may ship its own `.repohop/`, and a file can be edited by hand.
    pub fn lookup(&self, path: &str, hash: &str, module: &str, text: &str) -> Lookup {
        match self.entries.get(path) {
            Some((h, m, symbols)) if h == hash && m == module => {
                match check_symbols(symbols, path, text) {
                    Ok(()) => Lookup::Hit,
                    Err(why) => Lookup::Corrupt(why),
                }
            }
            _ => Lookup::Miss,
        }
    }

    /// Moves the cached symbols of a path out (after [`SymbolCache::lookup`] found a hit).
    pub fn take(&mut self, path: &str) -> Option<FileSymbols> {
        self.entries.remove(path).map(|(_, _, s)| s)
    }

    /// Whether the cache must be written: it was not trusted, files were parsed, or cached files
    /// disappeared (entries left after every hit was taken).
    pub fn needs_write(&self, parsed: usize) -> bool {
        !self.trusted || parsed > 0 || !self.entries.is_empty()
    }

    /// Writes the cache atomically ([`crate::fsutil::AtomicFile`]).
    pub fn write<'a>(
        &self,
        records: impl IntoIterator<Item = CacheRecord<'a>>,
    ) -> Result<(), Diagnostic> {
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let fail = |what: String| self.diag(what);
        std::fs::create_dir_all(dir).map_err(|e| {
            fail(format!(
                "cannot create the cache folder ({e}); cache not saved"
            ))
        })?;
        let header = Header {
            format: FORMAT.to_string(),
            version: VERSION,
            repohop: crate_version().to_string(),
        };
        let entries: BTreeMap<&str, EntryRef> = records
            .into_iter()
            .map(|r| {
                (
                    r.path,
                    EntryRef {
                        hash: r.hash,
                        module: r.module,
                        symbols: r.symbols,
                    },
                )
            })
            .collect();
        // Under the usual mode of a new file (0666 less the umask): the cache is as readable as
        // the repository.
        let mut tmp = AtomicFile::create(&self.file, &AtomicOptions::default()).map_err(|e| {
            fail(format!(
                "cannot create the cache file ({e}); cache not saved"
            ))
        })?;
        {
            let mut w = std::io::BufWriter::new(tmp.file());
            serde_json::to_writer(&mut w, &header)
                .and_then(|()| w.write_all(b"\n").map_err(serde_json::Error::io))
                .and_then(|()| serde_json::to_writer(&mut w, &entries))
                .map_err(|e| fail(format!("cannot write the cache ({e}); cache not saved")))?;
            w.flush()
                .map_err(|e| fail(format!("cannot write the cache ({e}); cache not saved")))?;
        }
        tmp.commit().map_err(|e| {
            fail(format!(
                "cannot replace the cache file ({e}); cache not saved"
            ))
        })?;
        Ok(())
    }
}

/// What [`SymbolCache::lookup`] found for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing for this content and module name: parse the file.
    Miss,
    /// Usable symbols: take them with [`SymbolCache::take`].
    Hit,
    /// An entry for this content whose locations do not fit it (why): parse the file.
    Corrupt(String),
}

/// Checks that symbols can belong to `text`, the file at `path`: every byte range lies within
/// the text, on character boundaries, start ≤ end; every line range within its lines, start ≤
/// end; every path is `path`. Slicing the text with any span of symbols that pass cannot panic.
pub fn check_symbols(symbols: &FileSymbols, path: &str, text: &str) -> Result<(), String> {
    // A final newline starts one more (empty) line.
    let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
    let span = |what: &str, s: &Span| -> Result<(), String> {
        let bytes_ok = s.start_byte <= s.end_byte
            && s.end_byte <= text.len()
            && text.is_char_boundary(s.start_byte)
            && text.is_char_boundary(s.end_byte);
        let lines_ok = 1 <= s.start_line && s.start_line <= s.end_line && s.end_line <= lines;
        if bytes_ok && lines_ok {
            Ok(())
        } else {
            Err(format!(
                "{what} has bytes {}..{} and lines {}-{}, outside the file ({} bytes, {lines} \
                 lines) or not on character boundaries",
                s.start_byte,
                s.end_byte,
                s.start_line,
                s.end_line,
                text.len()
            ))
        }
    };
    let line = |what: &str, l: usize| -> Result<(), String> {
        if (1..=lines).contains(&l) {
            Ok(())
        } else {
            Err(format!(
                "{what} is on line {l}, outside the file ({lines} lines)"
            ))
        }
    };
    let same_path = |what: &str, p: &str| -> Result<(), String> {
        if p == path {
            Ok(())
        } else {
            Err(format!("{what} belongs to {p}"))
        }
    };
    same_path("the entry", &symbols.path)?;
    for f in &symbols.functions {
        let what = format!("function {}", f.qualname);
        same_path(&what, &f.path)?;
        span(&what, &f.span)?;
        span(&format!("the signature of {what}"), &f.signature)?;
        span(&format!("the body of {what}"), &f.body)?;
        for c in &f.calls {
            line(&format!("a call in {what}"), c.line)?;
        }
    }
    for c in &symbols.classes {
        let what = format!("class {}", c.qualname);
        same_path(&what, &c.path)?;
        span(&what, &c.span)?;
    }
    for i in &symbols.imports {
        line(&format!("the import of {}", i.module), i.line)?;
    }
    Ok(())
}

fn crate_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
