//! The one way repohop replaces a file: atomically and durably, never through a symbolic link.
//!
//! A temporary file is created next to the destination (`O_CREAT | O_EXCL | O_NOFOLLOW`, so a
//! link planted at its name is never followed), written, flushed to disk, renamed over the
//! destination, and the folder is flushed so the rename survives a crash. The temporary file is
//! removed on any failure; the destination is either the old file or the new one, never half of
//! either. A destination that is a symbolic link is refused: renaming over it would replace the
//! link, and writing through it would write outside where the caller meant to.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How [`AtomicFile`] creates the new file.
#[derive(Debug, Clone, Default)]
pub struct AtomicOptions {
    /// Give the new file the mode (and, where permitted, the owner and group) of this existing
    /// file, typically the destination being replaced. `None`: a new file's usual mode (0666
    /// less the umask).
    pub keep_metadata_of: Option<PathBuf>,
    /// Create the destination's folder (and its parents) when missing.
    pub create_dirs: bool,
}

/// A file being written in place of `dest`; [`AtomicFile::commit`] puts it there, dropping it
/// without committing removes it.
#[derive(Debug)]
pub struct AtomicFile {
    dest: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
}

impl AtomicFile {
    /// Starts a replacement of `dest`. Fails when `dest` is a symbolic link or its folder cannot
    /// hold a new file.
    pub fn create(dest: &Path, opts: &AtomicOptions) -> io::Result<AtomicFile> {
        refuse_symlink(dest)?;
        let dir = parent(dest);
        if opts.create_dirs {
            std::fs::create_dir_all(dir)?;
        }
        let name = dest
            .file_name()
            .ok_or_else(|| invalid(format!("{} names no file", dest.display())))?
            .to_string_lossy();
        // Short enough that a long destination name still leaves room for the suffix.
        let stem: String = name.chars().take(64).collect();
        let mut attempt = 0;
        let (tmp, file) = loop {
            let tmp = dir.join(format!(".{stem}.{:016x}.tmp", rand::random::<u64>()));
            match open_new(&tmp) {
                Ok(file) => break (tmp, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let mut out = AtomicFile {
            dest: dest.to_path_buf(),
            tmp,
            file: Some(file),
        };
        if let Some(like) = &opts.keep_metadata_of {
            out.copy_metadata(like)?;
        }
        Ok(out)
    }

    /// The file being written.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("present until commit")
    }

    /// Flushes the new file to disk and renames it over the destination, then flushes the
    /// folder. On failure the temporary file is removed and the destination is untouched.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("present until commit");
        file.sync_all()?;
        drop(file);
        // Checked again: a link may have been planted while the file was written. `rename`
        // replaces a link rather than following it, so this only keeps the refusal consistent.
        refuse_symlink(&self.dest)?;
        #[cfg(test)]
        fail_rename_for_tests()?;
        std::fs::rename(&self.tmp, &self.dest)?;
        self.tmp = PathBuf::new();
        sync_dir(parent(&self.dest));
        Ok(())
    }

    #[cfg(unix)]
    fn copy_metadata(&mut self, like: &Path) -> io::Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(like)?;
        let file = self.file();
        let mine = file.metadata()?;
        if (mine.uid(), mine.gid()) != (meta.uid(), meta.gid()) {
            std::os::unix::fs::fchown(&*file, Some(meta.uid()), Some(meta.gid())).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot give the new file the owner of {} (uid {}, gid {}): {e}",
                        like.display(),
                        meta.uid(),
                        meta.gid()
                    ),
                )
            })?;
        }
        // After the owner: changing the owner clears set-user-id and set-group-id bits.
        file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))
    }

    #[cfg(not(unix))]
    fn copy_metadata(&mut self, like: &Path) -> io::Result<()> {
        let meta = std::fs::metadata(like)?;
        self.file().set_permissions(meta.permissions())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.file.take();
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Replaces `dest` with `bytes` atomically (see the module documentation), creating its folder
/// when missing; a new file gets the usual mode (0666 less the umask).
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(
        dest,
        bytes,
        &AtomicOptions {
            create_dirs: true,
            ..AtomicOptions::default()
        },
    )
}

/// [`write_atomic`] with options.
pub fn write_atomic_with(dest: &Path, bytes: &[u8], opts: &AtomicOptions) -> io::Result<()> {
    let mut f = AtomicFile::create(dest, opts)?;
    f.file().write_all(bytes)?;
    f.commit()
}

/// An error when `path` is a symbolic link (dangling or not), which the caller was to write
/// through.
pub fn refuse_symlink(path: &Path) -> io::Result<()> {
    refuse_link_to(path, "write")
}

/// An error when `path` is a symbolic link (dangling or not), saying the caller refuses to
/// `verb` through it.
pub fn refuse_link_to(path: &Path, verb: &str) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(link_error(path, verb)),
        _ => Ok(()),
    }
}

/// Reads a whole cache file, refusing a symbolic link at `path`: a cache file planted as a link
/// (say in a repository's `.repohop/`) would otherwise be read from wherever it points.
pub fn read_no_follow(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    let mut file = o
        .open(path)
        .map_err(|e| match refuse_link_to(path, "read") {
            Err(link) => link,
            Ok(()) => e,
        })?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn link_error(path: &Path, verb: &str) -> io::Error {
    invalid(format!(
        "{} is a symbolic link{}; refusing to {verb} through it (remove the link first)",
        path.display(),
        std::fs::read_link(path)
            .map(|t| format!(" to {}", t.display()))
            .unwrap_or_default()
    ))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn open_new(path: &Path) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    o.open(path)
}

/// Flushes a folder's entries (the rename) to disk. Best effort: the new file is in place
/// whatever happens here, and some file systems cannot flush a folder.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
thread_local! {
    static FAIL_RENAME: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Makes the commit on this thread after the next `n` ones fail just before its rename (tests of
/// the clean-up).
#[cfg(test)]
pub(crate) fn fail_next_rename_after(n: usize) {
    FAIL_RENAME.with(|f| f.set(Some(n)));
}

#[cfg(test)]
fn fail_rename_for_tests() -> io::Result<()> {
    match FAIL_RENAME.with(|f| f.get()) {
        Some(0) => {
            FAIL_RENAME.with(|f| f.set(None));
            Err(io::Error::other("rename failed (test)"))
        }
        Some(n) => {
            FAIL_RENAME.with(|f| f.set(Some(n - 1)));
            Ok(())
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_and_replaces() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("sub/a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(names(&t.path().join("sub")), ["a.txt"]);
    }

    #[cfg(unix)]
    #[test]
    fn refuses_a_symlink_destination_and_leaves_its_target_alone() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside.txt");
        std::fs::write(&outside, b"keep").unwrap();
        let link = t.path().join("link.txt");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let err = write_atomic(&link, b"evil").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(names(t.path()), ["link.txt", "outside.txt"]);
    }

    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let t = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty folder fails.
        let dest = t.path().join("d");
        std::fs::create_dir(&dest).unwrap();
        std::fs::write(dest.join("x"), b"x").unwrap();
        assert!(write_atomic(&dest, b"data").is_err());
        assert_eq!(names(t.path()), ["d"]);
        // So does the injected failure, and the old file stays.
        let p = t.path().join("f");
        std::fs::write(&p, b"old").unwrap();
        fail_next_rename_after(0);
        assert!(write_atomic(&p, b"new").is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(names(t.path()), ["d", "f"]);
    }

    #[cfg(unix)]
    #[test]
    fn keeps_the_mode_of_the_file_it_replaces() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("script.py");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o555)).unwrap();
        let opts = AtomicOptions {
            keep_metadata_of: Some(p.clone()),
            create_dirs: false,
        };
        write_atomic_with(&p, b"new", &opts).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o555);
    }
}
