//! The codebase on disk, in a folder of the repository's cache, so that a new process (one
//! `repohop complete` per pause in typing) neither rebuilds nor re-embeds what an earlier one
//! did:
//! - `codebase-slices.json` / `codebase-windows.json`: a JSON header line (format, version,
//!   repohop version, units, slice limits), then each source file's graph and units under the
//!   sha256 of its text. Only files whose text changed are built again; the file is rewritten
//!   (atomically) when anything changed.
//! - `line-vectors/`: the embedder vectors of the keys embedded so far, per embedder, keyed by
//!   the key's sha256 (a [`VectorIndex`]).
//!
//! Anything unreadable, corrupt or written with other settings is reported and rebuilt, never
//! trusted.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::retrieval::{file_units, sources, Codebase, FileUnits, Units};
use crate::embed::ModelInfo;
use crate::fsutil::{read_no_follow, refuse_link_to, write_atomic_with, AtomicOptions};
use crate::graph::SliceLimits;
use crate::index::vectors::{IndexError, Row, VectorIndex};
use crate::repo::cache::content_hash;
use crate::repo::Repository;

const FORMAT: &str = "repohop-codebase";
/// Bump when the units, the graphs or their serialisation change (2: docstrings are no
/// statements).
const VERSION: u32 = 2;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    repohop: String,
    units: Units,
    limits: SliceLimits,
}

#[derive(Deserialize)]
struct Entry {
    hash: String,
    #[serde(flatten)]
    file: FileUnits,
}

#[derive(Serialize)]
struct EntryRef<'a> {
    hash: &'a str,
    #[serde(flatten)]
    file: &'a FileUnits,
}

/// What opening a stored codebase did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoreReport {
    pub path: PathBuf,
    /// Files whose units were read back.
    pub reused: usize,
    /// Files built (new, changed, or all of them when the stored codebase was unusable).
    pub built: usize,
    pub written: bool,
    /// Key vectors read back (filled in by whoever reads them, see [`Codebase::load_vectors`]).
    pub vectors_read: usize,
    /// Why the stored codebase or its vectors were not read or not written.
    pub problem: Option<String>,
}

/// The file the codebase of `units` is stored in under `dir`.
pub fn codebase_file(dir: &Path, units: Units) -> PathBuf {
    let name = match units {
        Units::Slices => "slices",
        Units::Windows => "windows",
    };
    dir.join(format!("codebase-{name}.json"))
}

fn header(units: Units, limits: &SliceLimits) -> Header {
    Header {
        format: FORMAT.into(),
        version: VERSION,
        repohop: env!("CARGO_PKG_VERSION").into(),
        units,
        limits: *limits,
    }
}

/// The stored entries of `path` written with `want`'s settings; `Err` says why they are not
/// usable (a missing file is no entries and no problem).
fn read_entries(path: &Path, want: &Header) -> Result<HashMap<String, Entry>, String> {
    let bytes = match read_no_follow(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(format!("unreadable ({e})")),
    };
    let split = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len());
    let got: Header = serde_json::from_slice(&bytes[..split])
        .map_err(|e| format!("not a codebase file: bad header ({e})"))?;
    if got != *want {
        return Err(format!(
            "written by repohop {} (format {} v{}, {:?}, slice limits {:?}); rebuilt for these settings",
            got.repohop, got.format, got.version, got.units, got.limits
        ));
    }
    serde_json::from_slice(&bytes[split..]).map_err(|e| format!("corrupt ({e})"))
}

impl Codebase {
    /// The codebase of `repo` with the stored one in `dir`: files whose text has the stored
    /// hash are read back, the others built; the store is rewritten when anything changed.
    /// Never fails: a store that cannot be read or written is built around and reported.
    pub fn open(
        repo: &Repository,
        units: Units,
        limits: &SliceLimits,
        dir: &Path,
    ) -> (Codebase, StoreReport) {
        let path = codebase_file(dir, units);
        let want = header(units, limits);
        let mut report = StoreReport {
            path: path.clone(),
            ..StoreReport::default()
        };
        // A folder planted as a link would lead reads and writes anywhere.
        let linked = refuse_link_to(dir, "use").err();
        let mut stored = match &linked {
            Some(e) => Err(e.to_string()),
            None => read_entries(&path, &want),
        }
        .unwrap_or_else(|why| {
            report.problem = Some(why);
            HashMap::new()
        });
        let mut files = Vec::new();
        for (file, lang, text) in sources(repo) {
            let hash = content_hash(text.as_bytes());
            let units = match stored.remove(file) {
                Some(e) if e.hash == hash => {
                    report.reused += 1;
                    e.file
                }
                _ => {
                    report.built += 1;
                    file_units(text, lang, units, limits)
                }
            };
            files.push((file, hash, units));
        }
        // Entries left over are files gone from the repository.
        if linked.is_none() && (report.built > 0 || !stored.is_empty() || report.problem.is_some())
        {
            match write_store(&path, &want, &files) {
                Ok(()) => report.written = true,
                Err(e) => {
                    let why = format!("not written ({e})");
                    report.problem = Some(match report.problem.take() {
                        Some(p) => format!("{p}; {why}"),
                        None => why,
                    })
                }
            }
        }
        let codebase = Codebase::assemble(
            units,
            limits,
            files.into_iter().map(|(file, _, units)| (file, units)),
        );
        (codebase, report)
    }

    /// Reads the vectors of keys that earlier processes embedded with the model `info`
    /// describes; returns how many. None stored is `Ok(0)`.
    pub fn load_vectors(&self, dir: &Path, info: &ModelInfo) -> Result<usize, IndexError> {
        refuse_link_to(dir, "read").map_err(|err| IndexError::Io {
            path: dir.into(),
            err,
        })?;
        let dir = dir.join("line-vectors");
        let Some(index) = VectorIndex::load(&dir, &info.id, info.dim)? else {
            return Ok(0);
        };
        let mut cache = self.vector_cache();
        for (i, row) in index.rows().iter().enumerate() {
            let mut key = [0u8; 32];
            if hex::decode_to_slice(&row.key, &mut key).is_ok() {
                cache.insert(key, index.vector(i).to_vec());
            }
        }
        self.stored_vectors.store(cache.len(), Ordering::SeqCst);
        Ok(index.len())
    }

    /// Writes the vectors kept so far, when any were embedded since the last load or save;
    /// returns whether it wrote.
    pub fn save_vectors(&self, dir: &Path, info: &ModelInfo) -> Result<bool, IndexError> {
        let cache = self.vector_cache();
        if cache.len() == self.stored_vectors.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let store = dir;
        let dir = dir.join("line-vectors");
        let io = |err| IndexError::Io {
            path: dir.clone(),
            err,
        };
        refuse_link_to(store, "write").map_err(io)?;
        refuse_link_to(&dir, "write").map_err(io)?;
        std::fs::create_dir_all(&dir).map_err(io)?;
        // Sorted keys: the same vectors make the same files.
        let sorted: BTreeMap<&[u8; 32], &Vec<f32>> = cache.iter().collect();
        let rows = sorted
            .keys()
            .map(|k| Row {
                key: hex::encode(k),
                qualname: String::new(),
                path: String::new(),
                start_line: 0,
                hash: hex::encode(&k[..16]),
            })
            .collect();
        let matrix = sorted.values().flat_map(|v| v.iter().copied()).collect();
        VectorIndex::from_parts(&info.id, info.dim, rows, matrix).save(&dir)?;
        self.stored_vectors.store(cache.len(), Ordering::SeqCst);
        Ok(true)
    }
}

fn write_store(
    path: &Path,
    header: &Header,
    files: &[(&str, String, FileUnits)],
) -> std::io::Result<()> {
    let body: BTreeMap<&str, EntryRef> = files
        .iter()
        .map(|(file, hash, units)| (*file, EntryRef { hash, file: units }))
        .collect();
    let mut bytes = serde_json::to_vec(header)?;
    bytes.push(b'\n');
    serde_json::to_writer(&mut bytes, &body)?;
    let opts = AtomicOptions {
        create_dirs: true,
        ..AtomicOptions::default()
    };
    write_atomic_with(path, &bytes, &opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::IndexOptions;

    fn repo(root: &Path) -> Repository {
        let opts = IndexOptions {
            use_cache: false,
            ..IndexOptions::default()
        };
        Repository::open(root, &opts).unwrap()
    }

    /// Every snippet's place and key, in order: two codebases alike in this are alike.
    fn units_of(c: &Codebase) -> Vec<(String, usize, usize, String)> {
        let cursor = c.cursor("none.py", "");
        cursor
            .candidates()
            .iter()
            .map(|s| (s.path.clone(), s.start_line, s.end_line, s.key.clone()))
            .collect()
    }

    #[test]
    fn a_stored_codebase_is_read_back_and_only_changed_files_rebuilt() {
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.py"), "x = 1\ny = x + 1\n").unwrap();
        std::fs::write(root.path().join("b.py"), "def f(a):\n    return a * 2\n").unwrap();
        let limits = SliceLimits::default();
        let (first, r) = Codebase::open(&repo(root.path()), Units::Slices, &limits, cache.path());
        assert_eq!((r.reused, r.built, r.written), (0, 2, true));
        assert!(r.problem.is_none(), "{:?}", r.problem);

        let (again, r) = Codebase::open(&repo(root.path()), Units::Slices, &limits, cache.path());
        assert_eq!((r.reused, r.built, r.written), (2, 0, false));
        assert_eq!(units_of(&again), units_of(&first));
        let fresh = Codebase::build(&repo(root.path()), Units::Slices, &limits);
        assert_eq!(units_of(&again), units_of(&fresh));

        std::fs::write(root.path().join("b.py"), "def f(a):\n    return a * 3\n").unwrap();
        let (changed, r) = Codebase::open(&repo(root.path()), Units::Slices, &limits, cache.path());
        assert_eq!((r.reused, r.built, r.written), (1, 1, true));
        assert!(units_of(&changed).iter().any(|u| u.3.contains("a * 3")));

        // Other limits, or a damaged file: rebuilt, and said why.
        let other = SliceLimits {
            hops: limits.hops + 1,
            ..limits
        };
        let (_, r) = Codebase::open(&repo(root.path()), Units::Slices, &other, cache.path());
        assert_eq!(r.built, 2);
        assert!(r.problem.unwrap().contains("rebuilt"));
        let file = codebase_file(cache.path(), Units::Slices);
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::write(&file, bytes).unwrap();
        let (_, r) = Codebase::open(&repo(root.path()), Units::Slices, &other, cache.path());
        assert_eq!((r.built, r.written), (2, true));
        assert!(r.problem.unwrap().contains("corrupt"));
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_store_is_neither_read_nor_written_through() {
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.py"), "x = 1\n").unwrap();
        let target = elsewhere.path().join("planted.json");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, codebase_file(cache.path(), Units::Windows)).unwrap();
        let (c, r) = Codebase::open(
            &repo(root.path()),
            Units::Windows,
            &SliceLimits::default(),
            cache.path(),
        );
        assert_eq!(c.len(), 1);
        assert!(!r.written);
        assert!(r.problem.is_some());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");

        // A linked store folder is not used either.
        let linked_dir = cache.path().join("linked");
        std::os::unix::fs::symlink(elsewhere.path(), &linked_dir).unwrap();
        let (c, r) = Codebase::open(
            &repo(root.path()),
            Units::Windows,
            &SliceLimits::default(),
            &linked_dir,
        );
        assert_eq!((c.len(), r.written), (1, false));
        assert!(r.problem.unwrap().contains("link"));
        assert!(!elsewhere.path().join("codebase-windows.json").exists());
    }
}
