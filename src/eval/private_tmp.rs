//! The sandbox's private `/tmp`.
//!
//! Tests write fixed paths under `/tmp` (DevEval's bplustree writes
//! `/tmp/bplustree-testfile.index`), and the host's `/tmp` holds other tasks' files, so each
//! test process gets an empty tmpfs there. What the child must still reach through `/tmp` is
//! carried over from the host's: the trees it may write (task copies made under `/tmp`) and the
//! entries its program is reached through (a venv made under `/tmp`, or a link to one), each
//! mounted at its own path with the access it had (read-only but for the writable trees).

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::sandbox::{c_path as c, check};

/// Where the host's `/tmp` is attached inside the new tmpfs while its entries are bound.
const STAGING: &CStr = c"/tmp/.repohop-host";
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;

/// One host entry the private `/tmp` keeps, at the same path.
#[derive(Debug, PartialEq)]
enum Kept {
    /// A directory or file, bound (recursively) from the host's `/tmp`.
    Bound {
        at: CString,
        from: CString,
        dir: bool,
    },
    /// A symbolic link, made again with the same target.
    Link { at: CString, target: CString },
}

/// Everything the child needs to build its `/tmp`, prepared before the fork.
#[derive(Debug)]
pub(super) struct TmpPlan {
    /// Folders to create in the tmpfs, parents first: the ancestors of the kept entries.
    dirs: Vec<CString>,
    kept: Vec<Kept>,
}

impl TmpPlan {
    /// The plan for a child running `program` that may write `writable` (canonical paths), or
    /// `None` when a writable tree holds `/tmp` itself (the host's stays).
    pub(super) fn new(program: &Path, writable: &[PathBuf]) -> io::Result<Option<TmpPlan>> {
        let tmp = Path::new("/tmp");
        if writable.iter().any(|w| tmp.starts_with(w)) {
            return Ok(None);
        }
        let mut entries: Vec<PathBuf> = writable
            .iter()
            .filter(|w| w.starts_with(tmp))
            .cloned()
            .chain(tmp_entries_reaching(program))
            .collect();
        entries.sort();
        entries.dedup();
        // A tree bound whole carries what lies inside it.
        let mut outer: Vec<PathBuf> = Vec::new();
        for e in entries {
            if !outer.iter().any(|o| e.starts_with(o)) {
                outer.push(e);
            }
        }
        let mut dirs = Vec::new();
        let mut kept = Vec::new();
        for at in &outer {
            let rel = at.strip_prefix(tmp).expect("kept entries lie under /tmp");
            let mut ancestor = tmp.to_path_buf();
            for part in rel.parent().into_iter().flat_map(Path::components) {
                ancestor.push(part);
                let d = c(&ancestor)?;
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
            let Ok(meta) = at.symlink_metadata() else {
                continue;
            };
            kept.push(if meta.file_type().is_symlink() {
                Kept::Link {
                    at: c(at)?,
                    target: c(&std::fs::read_link(at)?)?,
                }
            } else {
                Kept::Bound {
                    at: c(at)?,
                    from: c(&Path::new(OsStr::from_bytes(STAGING.to_bytes())).join(rel))?,
                    dir: meta.is_dir(),
                }
            });
        }
        Ok(Some(TmpPlan { dirs, kept }))
    }

    /// Covers `/tmp` with an empty tmpfs and puts the kept entries back.
    ///
    /// # Safety
    /// Only between fork and exec, in a new mount namespace whose mounts are private.
    pub(super) unsafe fn mount(&self) -> io::Result<()> {
        let binds = self.kept.iter().any(|k| matches!(k, Kept::Bound { .. }));
        // SAFETY: raw syscalls on NUL-terminated strings prepared before the fork; the
        // descriptor is ours and closed on every path.
        unsafe {
            // The host's /tmp, taken before the tmpfs hides it.
            let host = if binds {
                let fd = libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    c"/tmp".as_ptr(),
                    OPEN_TREE_CLONE
                        | libc::O_CLOEXEC as libc::c_uint
                        | libc::AT_RECURSIVE as libc::c_uint,
                );
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                fd as libc::c_int
            } else {
                -1
            };
            let mounted = libc::mount(
                c"tmpfs".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=268435456,mode=1777".as_ptr().cast(),
            );
            if mounted != 0 {
                let e = io::Error::last_os_error();
                if host >= 0 {
                    libc::close(host);
                }
                return Err(e);
            }
            let staging = STAGING;
            if host >= 0 {
                let moved = if libc::mkdir(staging.as_ptr(), 0o700) == 0 {
                    libc::syscall(
                        libc::SYS_move_mount,
                        host,
                        c"".as_ptr(),
                        libc::AT_FDCWD,
                        staging.as_ptr(),
                        MOVE_MOUNT_F_EMPTY_PATH,
                    )
                } else {
                    -1
                };
                let e = io::Error::last_os_error();
                libc::close(host);
                if moved != 0 {
                    return Err(e);
                }
            }
            for d in &self.dirs {
                if libc::mkdir(d.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST
                {
                    return Err(io::Error::last_os_error());
                }
            }
            for k in &self.kept {
                match k {
                    Kept::Link { at, target } => {
                        check(libc::symlink(target.as_ptr(), at.as_ptr()))?
                    }
                    Kept::Bound { at, from, dir } => {
                        if *dir {
                            check(libc::mkdir(at.as_ptr(), 0o755))?;
                        } else {
                            let fd = libc::open(
                                at.as_ptr(),
                                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                                0o600,
                            );
                            check(fd)?;
                            libc::close(fd);
                        }
                        // The clone keeps each mount's flags: read-only stays read-only, the
                        // writable trees stay writable.
                        check(libc::mount(
                            from.as_ptr(),
                            at.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ))?;
                    }
                }
            }
            if host >= 0 {
                check(libc::umount2(staging.as_ptr(), libc::MNT_DETACH))?;
                check(libc::rmdir(staging.as_ptr()))?;
            }
            Ok(())
        }
    }
}

/// The entries right under `/tmp` that reaching `path` goes through, following each link on
/// the way as the kernel does (at most 40).
fn tmp_entries_reaching(path: &Path) -> Vec<PathBuf> {
    let tmp = Path::new("/tmp");
    let mut found = Vec::new();
    let Ok(absolute) = std::path::absolute(path) else {
        return found;
    };
    // The components still to walk, last first.
    let parts = |p: &Path| -> Vec<PathBuf> {
        p.components()
            .rev()
            .map(|c| PathBuf::from(c.as_os_str()))
            .collect()
    };
    let mut pending = parts(&absolute);
    let mut links = 0;
    let mut resolved = PathBuf::from("/");
    while let Some(part) = pending.pop() {
        match part.components().next() {
            Some(Component::RootDir) => resolved = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                resolved.pop();
            }
            Some(Component::Normal(name)) => {
                resolved.push(name);
                if resolved.parent() == Some(tmp) && !found.contains(&resolved) {
                    found.push(resolved.clone());
                }
                let Ok(target) = std::fs::read_link(&resolved) else {
                    continue;
                };
                links += 1;
                if links > 40 {
                    break;
                }
                resolved.pop();
                pending.extend(parts(&target));
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn under_tmp() -> tempfile::TempDir {
        tempfile::Builder::new().tempdir_in("/tmp").unwrap()
    }

    #[test]
    fn every_tmp_entry_on_the_way_to_a_program_is_found() {
        let (a, b, c) = (under_tmp(), under_tmp(), under_tmp());
        let c_name = c.path().file_name().unwrap().to_str().unwrap();
        std::fs::create_dir_all(c.path().join("r")).unwrap();
        std::fs::write(c.path().join("r/prog"), "").unwrap();
        // a/p -> b (absolute); b/q -> ../<c>/r (relative, through `..`).
        symlink(b.path(), a.path().join("p")).unwrap();
        symlink(format!("../{c_name}/r"), b.path().join("q")).unwrap();
        let found = tmp_entries_reaching(&a.path().join("p/q/prog"));
        assert_eq!(found, [a.path(), b.path(), c.path()]);
        assert!(tmp_entries_reaching(Path::new("/usr/bin/env")).is_empty());
        // A loop ends.
        symlink(a.path().join("loop"), a.path().join("loop")).unwrap();
        assert_eq!(tmp_entries_reaching(&a.path().join("loop/x")), [a.path()]);
    }

    #[test]
    fn the_plan_keeps_outer_trees_links_and_writable_trees() {
        let (venv, work) = (under_tmp(), under_tmp());
        std::fs::create_dir_all(venv.path().join("bin")).unwrap();
        std::fs::write(venv.path().join("bin/python"), "").unwrap();
        let link = work.path().join("py");
        symlink(venv.path().join("bin/python"), &link).unwrap();
        let copy = work.path().join("task/copy");
        std::fs::create_dir_all(&copy).unwrap();
        let inner = venv.path().join("bin");
        let plan = TmpPlan::new(&link, &[copy.clone(), inner])
            .unwrap()
            .unwrap();
        let cs = |p: &Path| c(p).unwrap();
        let staged = |p: &Path| cs(&Path::new("/tmp/.repohop-host").join(p.file_name().unwrap()));
        // The program's way passes both first-level folders (its link in one, the Python in the
        // other): each is bound whole, with the writable trees inside.
        let bound = |p: &Path| Kept::Bound {
            at: cs(p),
            from: staged(p),
            dir: true,
        };
        assert_eq!(plan.kept.len(), 2);
        assert!(plan.kept.contains(&bound(venv.path())) && plan.kept.contains(&bound(work.path())));
        assert!(plan.dirs.is_empty());
        // Only a writable copy deep under /tmp: its parents are made, itself bound.
        let plan = TmpPlan::new(Path::new("/usr/bin/env"), std::slice::from_ref(&copy))
            .unwrap()
            .unwrap();
        assert_eq!(plan.dirs, [cs(work.path()), cs(&work.path().join("task"))]);
        assert_eq!(plan.kept.len(), 1);
        // A link right under /tmp is made again (the folder it leads to is bound).
        let top = Path::new("/tmp").join(format!(
            "{}-link",
            work.path().file_name().unwrap().to_str().unwrap()
        ));
        symlink(venv.path(), &top).unwrap();
        let plan = TmpPlan::new(&top.join("bin/python"), &[]).unwrap().unwrap();
        let _ = std::fs::remove_file(&top);
        assert_eq!(plan.kept.len(), 2);
        assert!(plan.kept.contains(&Kept::Link {
            at: cs(&top),
            target: cs(venv.path())
        }));
        // A writable tree holding /tmp leaves the host's.
        assert!(TmpPlan::new(&link, &[PathBuf::from("/")])
            .unwrap()
            .is_none());
    }
}
