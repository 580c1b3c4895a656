//! An indexed repository: the files the walk kept, their symbols (parsed in parallel, reused from
//! the cache when the content hash matches), their text, and what went wrong along the way.

use super::cache::{content_hash, CacheRecord, Lookup, SymbolCache};
use super::diagnostic::{Diagnostic, DiagnosticKind};
use super::ids::{ClassId, Def, FileId, FnId};
use super::lang;
use super::model::{Class, FileSymbols, Function, Import, Lang};
use super::table::SymbolTable;
use super::walk::{self, WalkedFile};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("repository path {0} does not exist")]
    Missing(PathBuf),
    #[error("repository path {0} is a file, not a folder: give the repository's root folder")]
    NotADirectory(PathBuf),
    /// The OS error is in the message, not chained, so `{:#}` prints it once.
    #[error("cannot read repository path {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error(
        "the cache path {path} is a symbolic link to {target}, outside the repository: \
         repohop does not write its cache there. Remove the link (the cache is rebuilt), or \
         give --cache-dir to put the cache in a folder of your choice"
    )]
    CacheOutside { path: PathBuf, target: String },
}

/// How to index.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Files larger than this are skipped with a diagnostic.
    pub max_file_size: u64,
    /// Where the symbol cache lives; `None`: `<repo>/.repohop`.
    pub cache_dir: Option<PathBuf>,
    /// Read and write the symbol cache.
    pub use_cache: bool,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            max_file_size: walk::DEFAULT_MAX_FILE_SIZE,
            cache_dir: None,
            use_cache: true,
        }
    }
}

/// One file the walk kept.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Repository-relative, `/`-separated.
    pub path: String,
    pub size: u64,
    pub lang: Option<Lang>,
    /// Parsed files only: sha256 of the bytes (hex), the key of every per-file cache.
    pub hash: Option<String>,
    /// Parsed files only: their text (decoded lossily if need be) and symbols.
    pub text: Option<String>,
    pub symbols: Option<FileSymbols>,
}

/// Counts and timings of one `Repository::open`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexStats {
    pub files: usize,
    /// Files with a language front end.
    pub source_files: usize,
    /// Source files parsed in this run (not found in the cache).
    pub parsed: usize,
    /// Source files whose symbols came from the cache.
    pub cached: usize,
    pub functions: usize,
    pub classes: usize,
    pub imports: usize,
    pub files_with_parse_errors: usize,
    pub skipped: usize,
    pub source_bytes: u64,
    pub elapsed_ms: f64,
}

#[derive(Debug)]
pub struct Repository {
    root: PathBuf,
    cache_dir: PathBuf,
    files: Vec<SourceFile>,
    by_path: HashMap<String, FileId>,
    fns: Vec<(FileId, u32)>,
    classes: Vec<(FileId, u32)>,
    /// Per file: its functions' ids, in file order.
    file_fns: Vec<Vec<FnId>>,
    file_classes: Vec<Vec<ClassId>>,
    table: SymbolTable,
    diagnostics: Vec<Diagnostic>,
    stats: IndexStats,
}

/// What happened to one walked file in the parallel phase.
enum Outcome {
    /// `symbols: None`: take them from the cache. (Boxed: most files come from the cache.)
    Parsed {
        text: String,
        symbols: Option<Box<FileSymbols>>,
        hash: String,
        module: String,
    },
    Listed,
    Skipped,
}

impl Repository {
    /// Walks, parses (in parallel, reusing cached symbols whose content hash matches) and builds
    /// the symbol table.
    pub fn open(root: &Path, opts: &IndexOptions) -> Result<Repository, RepoError> {
        Self::open_with_progress(root, opts, &|_, _| {})
    }

    /// As [`Repository::open`], calling `progress(done, total)` as files are processed.
    pub fn open_with_progress(
        root: &Path,
        opts: &IndexOptions,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Repository, RepoError> {
        let start = Instant::now();
        let root = canonical_root(root)?;
        let cache_dir = cache_dir(&root, opts)?;
        let walked = walk::walk(&root, opts.max_file_size, std::slice::from_ref(&cache_dir));
        let mut diagnostics = walked.diagnostics;
        let (mut cache, cache_diag) = if opts.use_cache {
            SymbolCache::load(&cache_dir)
        } else {
            (SymbolCache::empty(&cache_dir), None)
        };
        diagnostics.extend(cache_diag);

        let outcomes = process_all(&walked.files, &cache, progress);
        let mut kept = collect(walked.files, outcomes, &mut cache, &mut diagnostics);
        if opts.use_cache && cache.needs_write(kept.stats.parsed) {
            save_cache(&cache, &kept, &mut diagnostics);
        }
        diagnostics.sort_by(|a, b| a.path.cmp(&b.path));
        kept.stats.skipped = diagnostics.iter().filter(|d| d.is_skip()).count();

        let mut repo = Repository::from_files(root, cache_dir, kept.files, diagnostics);
        repo.stats = IndexStats {
            files: repo.files.len(),
            functions: repo.fns.len(),
            classes: repo.classes.len(),
            imports: repo.symbols_iter().map(|s| s.imports.len()).sum(),
            files_with_parse_errors: repo.symbols_iter().filter(|s| s.parse_errors > 0).count(),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
            ..kept.stats
        };
        Ok(repo)
    }

    /// A repository of in-memory `(path, text)` files, parsed as [`Repository::open`] parses
    /// walked ones but without the file system or the symbol cache (the fuzz targets use it:
    /// no disk traffic per input). Files no front end parses are listed without text.
    pub fn from_sources(files: &[(&str, &str)]) -> Repository {
        let mut cache = SymbolCache::empty(Path::new(".repohop"));
        Self::from_sources_cached(files, &mut cache)
    }

    /// As [`Repository::from_sources`], taking each file's symbols from `cache` where it has a
    /// usable entry (checked as [`Repository::open`] checks it; a corrupt one is a
    /// diagnostic and the file is parsed).
    pub fn from_sources_cached(files: &[(&str, &str)], cache: &mut SymbolCache) -> Repository {
        let packages = walk::package_dirs(
            files
                .iter()
                .map(|(p, _)| *p)
                .filter(|p| lang::for_path(p).is_some_and(|fe| fe.lang() == Lang::Python)),
        );
        let mut kept = Vec::with_capacity(files.len());
        let mut diagnostics = Vec::new();
        for (path, text) in files {
            let Some(fe) = lang::for_path(path) else {
                kept.push(SourceFile {
                    path: path.to_string(),
                    size: text.len() as u64,
                    lang: None,
                    hash: None,
                    text: None,
                    symbols: None,
                });
                continue;
            };
            let module = match fe.lang() {
                Lang::Python => walk::python_module(path, &packages),
                Lang::Java => String::new(),
            };
            let hash = content_hash(text.as_bytes());
            let symbols = match cache.lookup(path, &hash, &module, text) {
                Lookup::Hit => cache.take(path),
                Lookup::Miss => None,
                Lookup::Corrupt(why) => {
                    diagnostics.push(Diagnostic::new(*path, DiagnosticKind::Cache, why));
                    None
                }
            }
            .unwrap_or_else(|| fe.parse(path, &module, text));
            kept.push(SourceFile {
                path: path.to_string(),
                size: text.len() as u64,
                lang: Some(fe.lang()),
                hash: Some(hash),
                text: Some(text.to_string()),
                symbols: Some(symbols),
            });
        }
        let mut repo = Repository::from_files(
            PathBuf::from("."),
            PathBuf::from(".repohop"),
            kept,
            diagnostics,
        );
        repo.stats.files = repo.files.len();
        repo.stats.functions = repo.fns.len();
        repo.stats.classes = repo.classes.len();
        repo
    }

    /// The repository of the kept `files`: its definitions numbered and its symbol table built.
    fn from_files(
        root: PathBuf,
        cache_dir: PathBuf,
        files: Vec<SourceFile>,
        diagnostics: Vec<Diagnostic>,
    ) -> Repository {
        let mut repo = Repository {
            root,
            cache_dir,
            by_path: files
                .iter()
                .enumerate()
                .map(|(i, f)| (f.path.clone(), FileId(i as u32)))
                .collect(),
            files,
            fns: Vec::new(),
            classes: Vec::new(),
            file_fns: Vec::new(),
            file_classes: Vec::new(),
            table: SymbolTable::default(),
            diagnostics,
            stats: IndexStats::default(),
        };
        repo.number_definitions();
        repo.table = SymbolTable::build(
            repo.function_ids().map(|id| (id, repo.function(id))),
            repo.class_ids().map(|id| (id, repo.class(id))),
            repo.files.iter().enumerate().filter_map(|(i, f)| {
                let module = f.symbols.as_ref()?.module.as_str();
                Some((FileId(i as u32), module))
            }),
        );
        repo
    }

    fn number_definitions(&mut self) {
        for (i, f) in self.files.iter().enumerate() {
            let fid = FileId(i as u32);
            let mut fn_ids = Vec::new();
            let mut class_ids = Vec::new();
            if let Some(s) = &f.symbols {
                for j in 0..s.functions.len() {
                    fn_ids.push(FnId(self.fns.len() as u32));
                    self.fns.push((fid, j as u32));
                }
                for j in 0..s.classes.len() {
                    class_ids.push(ClassId(self.classes.len() as u32));
                    self.classes.push((fid, j as u32));
                }
            }
            self.file_fns.push(fn_ids);
            self.file_classes.push(class_ids);
        }
    }

    fn symbols_iter(&self) -> impl Iterator<Item = &FileSymbols> {
        self.files.iter().filter_map(|f| f.symbols.as_ref())
    }

    /// The canonical root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder of the persistent caches (`<repo>/.repohop` unless `--cache-dir`); other
    /// caches (embeddings) live next to the symbol cache.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Every file the walk kept (parsed or only listed), sorted by path.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    pub fn file(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    pub fn file_id(&self, path: &str) -> Option<FileId> {
        self.by_path.get(path).copied()
    }

    /// Text of a parsed file.
    pub fn file_text(&self, path: &str) -> Option<&str> {
        self.file_id(path)
            .and_then(|id| self.file(id).text.as_deref())
    }

    pub fn file_symbols(&self, id: FileId) -> Option<&FileSymbols> {
        self.file(id).symbols.as_ref()
    }

    pub fn function_ids(&self) -> impl Iterator<Item = FnId> + '_ {
        (0..self.fns.len() as u32).map(FnId)
    }

    pub fn class_ids(&self) -> impl Iterator<Item = ClassId> + '_ {
        (0..self.classes.len() as u32).map(ClassId)
    }

    /// Every function and method, in path then file order.
    pub fn functions(&self) -> impl Iterator<Item = &Function> + '_ {
        self.function_ids().map(|id| self.function(id))
    }

    pub fn classes(&self) -> impl Iterator<Item = &Class> + '_ {
        self.class_ids().map(|id| self.class(id))
    }

    pub fn function(&self, id: FnId) -> &Function {
        let (f, j) = self.fns[id.0 as usize];
        &self.files[f.0 as usize]
            .symbols
            .as_ref()
            .expect("numbered from parsed files")
            .functions[j as usize]
    }

    pub fn class(&self, id: ClassId) -> &Class {
        let (f, j) = self.classes[id.0 as usize];
        &self.files[f.0 as usize]
            .symbols
            .as_ref()
            .expect("numbered from parsed files")
            .classes[j as usize]
    }

    pub fn function_file(&self, id: FnId) -> FileId {
        self.fns[id.0 as usize].0
    }

    pub fn class_file(&self, id: ClassId) -> FileId {
        self.classes[id.0 as usize].0
    }

    /// The functions of one file, in file order.
    pub fn functions_in(&self, file: FileId) -> &[FnId] {
        &self.file_fns[file.0 as usize]
    }

    pub fn classes_in(&self, file: FileId) -> &[ClassId] {
        &self.file_classes[file.0 as usize]
    }

    pub fn imports_of(&self, path: &str) -> &[Import] {
        self.file_id(path)
            .and_then(|id| self.file_symbols(id))
            .map(|s| s.imports.as_slice())
            .unwrap_or(&[])
    }

    /// The whole definition of a function (decorators / annotations, signature, body).
    pub fn function_code(&self, id: FnId) -> &str {
        let f = self.function(id);
        self.slice(self.function_file(id), f.span.start_byte, f.span.end_byte)
    }

    /// Decorators / annotations through the end of the header (`def f(a):`, `void f(int a)`).
    pub fn signature_text(&self, id: FnId) -> &str {
        let f = self.function(id);
        self.slice(
            self.function_file(id),
            f.signature.start_byte,
            f.signature.end_byte,
        )
    }

    /// The body (for Python, docstring included), from its first statement.
    pub fn body_text(&self, id: FnId) -> &str {
        let f = self.function(id);
        self.slice(self.function_file(id), f.body.start_byte, f.body.end_byte)
    }

    /// The whole definition of a class.
    pub fn class_code(&self, id: ClassId) -> &str {
        let c = self.class(id);
        self.slice(self.class_file(id), c.span.start_byte, c.span.end_byte)
    }

    /// Bytes `start..end` of a parsed file's text; empty when out of range.
    pub fn slice(&self, file: FileId, start: usize, end: usize) -> &str {
        self.file(file)
            .text
            .as_deref()
            .and_then(|t| t.get(start..end))
            .unwrap_or("")
    }

    pub fn symbol_table(&self) -> &SymbolTable {
        &self.table
    }

    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    pub fn stats(&self) -> &IndexStats {
        &self.stats
    }

    /// `path:line` of a definition, for messages.
    pub fn location(&self, def: Def) -> String {
        match def {
            Def::Function(id) => {
                let f = self.function(id);
                format!("{}:{}", f.path, f.span.start_line)
            }
            Def::Class(id) => {
                let c = self.class(id);
                format!("{}:{}", c.path, c.span.start_line)
            }
        }
    }

    pub fn qualname(&self, def: Def) -> &str {
        match def {
            Def::Function(id) => &self.function(id).qualname,
            Def::Class(id) => &self.class(id).qualname,
        }
    }
}

/// The root folder, canonical; an error when it is missing, not a folder, or cannot be listed
/// (a root that cannot be listed is an error, not an empty repository).
fn canonical_root(root: &Path) -> Result<PathBuf, RepoError> {
    let meta = std::fs::metadata(root).map_err(|err| {
        if err.kind() == std::io::ErrorKind::NotFound {
            RepoError::Missing(root.to_path_buf())
        } else {
            RepoError::Io {
                path: root.to_path_buf(),
                err,
            }
        }
    })?;
    if !meta.is_dir() {
        return Err(RepoError::NotADirectory(root.to_path_buf()));
    }
    let io_error = |err| RepoError::Io {
        path: root.to_path_buf(),
        err,
    };
    std::fs::read_dir(root).map_err(io_error)?;
    root.canonicalize().map_err(io_error)
}

/// The cache folder: `--cache-dir` (relative to the working folder) or `<root>/.repohop`, the
/// latter checked to stay inside the repository.
fn cache_dir(root: &Path, opts: &IndexOptions) -> Result<PathBuf, RepoError> {
    Ok(match &opts.cache_dir {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => std::env::current_dir()
            .map(|c| c.join(d))
            .unwrap_or_else(|_| d.clone()),
        None => {
            let dir = root.join(".repohop");
            check_default_cache_dir(root, &dir)?;
            dir
        }
    })
}

/// Reads, checks and parses every walked file in parallel (or takes its symbols from the
/// cache), in walk order.
fn process_all(
    files: &[WalkedFile],
    cache: &SymbolCache,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<(Outcome, Vec<Diagnostic>)> {
    let packages = walk::package_dirs(
        files
            .iter()
            .filter(|f| f.lang == Some(Lang::Python))
            .map(|f| f.path.as_str()),
    );
    let total = files.len();
    let done = AtomicUsize::new(0);
    files
        .par_iter()
        .map(|file| {
            let r = process(file, &packages, cache);
            progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
            r
        })
        .collect()
}

/// The files kept from the walk, with the counts so far.
struct Kept {
    files: Vec<SourceFile>,
    stats: IndexStats,
    /// Parsed files (index in `files`) and the module name each was parsed with: the symbol
    /// cache's records.
    keys: Vec<(usize, String)>,
}

/// The walked files with their outcomes: the skipped ones dropped, the parsed ones given their
/// symbols (parsed, or taken out of `cache`), a diagnostic for each file with syntax errors.
fn collect(
    walked: Vec<WalkedFile>,
    outcomes: Vec<(Outcome, Vec<Diagnostic>)>,
    cache: &mut SymbolCache,
    diagnostics: &mut Vec<Diagnostic>,
) -> Kept {
    let mut kept = Kept {
        files: Vec::with_capacity(walked.len()),
        stats: IndexStats::default(),
        keys: Vec::new(),
    };
    for (file, (outcome, diags)) in walked.into_iter().zip(outcomes) {
        diagnostics.extend(diags);
        match outcome {
            Outcome::Skipped => {}
            Outcome::Listed => kept.files.push(SourceFile {
                path: file.path,
                size: file.size,
                lang: None,
                hash: None,
                text: None,
                symbols: None,
            }),
            Outcome::Parsed {
                text,
                symbols,
                hash,
                module,
            } => {
                kept.stats.source_files += 1;
                kept.stats.source_bytes += file.size;
                let symbols = match symbols {
                    Some(s) => {
                        kept.stats.parsed += 1;
                        *s
                    }
                    None => {
                        kept.stats.cached += 1;
                        // `lookup` said yes and paths are unique, so this always hits; parsing
                        // again is the safe answer if it ever does not.
                        match (cache.take(&file.path), lang::for_path(&file.path)) {
                            (Some(s), _) => s,
                            (None, Some(fe)) => fe.parse(&file.path, &module, &text),
                            (None, None) => continue,
                        }
                    }
                };
                if symbols.parse_errors > 0 {
                    diagnostics.push(Diagnostic::new(
                        &file.path,
                        DiagnosticKind::SyntaxErrors,
                        format!(
                            "{} syntax error(s); kept the {} function(s) and {} class(es) that \
                             parsed",
                            symbols.parse_errors,
                            symbols.functions.len(),
                            symbols.classes.len()
                        ),
                    ));
                }
                kept.keys.push((kept.files.len(), module));
                kept.files.push(SourceFile {
                    path: file.path,
                    size: file.size,
                    lang: file.lang,
                    hash: Some(hash),
                    text: Some(text),
                    symbols: Some(symbols),
                });
            }
        }
    }
    kept
}

/// Writes the symbols of every parsed file to the cache; a failure is a diagnostic.
fn save_cache(cache: &SymbolCache, kept: &Kept, diagnostics: &mut Vec<Diagnostic>) {
    let records = kept.keys.iter().filter_map(|(i, module)| {
        let f = &kept.files[*i];
        match (&f.hash, &f.symbols) {
            (Some(hash), Some(symbols)) => Some(CacheRecord {
                path: &f.path,
                hash,
                module,
                symbols,
            }),
            _ => None,
        }
    });
    if let Err(d) = cache.write(records) {
        diagnostics.push(d);
    }
}

/// The default cache folder stays inside the repository: a `.repohop` that is a symbolic link
/// leading outside it (or nowhere) is refused, and so is such a link among its entries (the
/// symbol cache file, the `vectors` and `slices` folders of the embeddings, anything else put
/// there), so that indexing and embedding a repository never write elsewhere. (`--cache-dir` is
/// the way to put the cache elsewhere on purpose.)
fn check_default_cache_dir(root: &Path, dir: &Path) -> Result<(), RepoError> {
    check_link_stays_inside(root, dir)?;
    // Unreadable or missing: nothing is in it to write through (the cache reports the rest).
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        check_link_stays_inside(root, &entry.path())?;
    }
    Ok(())
}

/// A cache path that is a symbolic link must lead to a place inside `root` (not `root` itself).
fn check_link_stays_inside(root: &Path, path: &Path) -> Result<(), RepoError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_symlink() {
        return Ok(());
    }
    let target = std::fs::read_link(path)
        .map(|t| t.display().to_string())
        .unwrap_or_else(|_| "an unreadable target".into());
    match path.canonicalize() {
        Ok(real) if real.starts_with(root) && real != root => Ok(()),
        _ => Err(RepoError::CacheOutside {
            path: path.to_path_buf(),
            target,
        }),
    }
}

/// Reads, checks and parses one walked file (or takes its symbols from the cache).
fn process(
    file: &WalkedFile,
    packages: &std::collections::HashSet<String>,
    cache: &SymbolCache,
) -> (Outcome, Vec<Diagnostic>) {
    let Some(front_end) = lang::for_path(&file.path) else {
        return match walk::probe_binary(file) {
            Ok(false) => (Outcome::Listed, vec![]),
            Ok(true) => (Outcome::Skipped, vec![walk::binary(&file.path)]),
            Err(d) => (Outcome::Skipped, vec![d]),
        };
    };
    let source = match walk::read_source(file) {
        Ok(s) => s,
        Err(d) => return (Outcome::Skipped, vec![d]),
    };
    let mut diags = Vec::new();
    if source.lossy {
        diags.push(Diagnostic::new(
            &file.path,
            DiagnosticKind::NonUtf8,
            "not valid UTF-8: invalid bytes replaced by U+FFFD, then parsed",
        ));
    }
    if source.bytes.is_empty() && !file.path.ends_with("__init__.py") {
        diags.push(Diagnostic::new(
            &file.path,
            DiagnosticKind::Empty,
            "empty file: no symbols",
        ));
    }
    let module = match front_end.lang() {
        Lang::Python => walk::python_module(&file.path, packages),
        Lang::Java => String::new(),
    };
    let hash = content_hash(&source.bytes);
    let symbols = match cache.lookup(&file.path, &hash, &module, &source.text) {
        Lookup::Hit => None,
        Lookup::Miss => Some(Box::new(front_end.parse(&file.path, &module, &source.text))),
        Lookup::Corrupt(why) => {
            diags.push(Diagnostic::new(
                &file.path,
                DiagnosticKind::Cache,
                format!("the symbol cache's entry does not fit the file ({why}); re-parsed it"),
            ));
            Some(Box::new(front_end.parse(&file.path, &module, &source.text)))
        }
    };
    (
        Outcome::Parsed {
            text: source.text,
            symbols,
            hash,
            module,
        },
        diags,
    )
}
