//! Running untrusted code: a private copy of the project, a scrubbed environment, a timeout
//! that kills the whole process group, an address-space limit, and (where the kernel allows a
//! mount namespace) the source tree mounted read-only for the child.

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Entries never copied: VCS data, our index, bytecode caches.
const SKIP: [&str; 3] = [".git", ".repohop", "__pycache__"];

/// Copies the project tree `src` into `dst` (created), skipping [`SKIP`]; symlinks stay links.
pub fn copy_project(src: &Path, dst: &Path) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let name = entry.file_name();
        if SKIP.iter().any(|s| name.as_bytes() == s.as_bytes()) {
            continue;
        }
        let (from, to) = (entry.path(), dst.join(&name));
        let ty = entry.file_type()?;
        if ty.is_dir() {
            copy_project(&from, &to)?;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from)?, &to)?;
        } else if ty.is_file() {
            fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// Limits for one child process.
#[derive(Debug, Clone)]
pub struct Limits {
    pub timeout: Duration,
    /// RLIMIT_AS in bytes; `None` leaves it unlimited.
    pub memory_bytes: Option<u64>,
    /// Paths the child sees read-only (bind-mounted in a private mount namespace).
    pub read_only: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    Cancelled,
}

/// Runs `program args` in `cwd` with only `env`, stdout and stderr both to `log`, under
/// `limits`. On timeout or when `cancel` is set, the whole process group is killed.
/// Any process the child left behind is killed as well.
pub fn run_limited(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limits: &Limits,
    log: &Path,
    cancel: &AtomicBool,
) -> io::Result<Exit> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let guard = ChildSetup::new(limits.memory_bytes, &limits.read_only)?;
    // SAFETY: the closure only makes raw syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || guard.apply());
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id() as libc::pid_t;
    let deadline = Instant::now() + limits.timeout;
    let mut pause = Duration::from_millis(5);
    let exit = loop {
        if let Some(status) = child.try_wait()? {
            break match (status.code(), status.signal()) {
                (Some(c), _) => Exit::Code(c),
                (None, Some(s)) => Exit::Signal(s),
                (None, None) => Exit::Code(-1),
            };
        }
        let stop = if cancel.load(Ordering::SeqCst) {
            Some(Exit::Cancelled)
        } else if Instant::now() >= deadline {
            Some(Exit::TimedOut)
        } else {
            None
        };
        if let Some(stop) = stop {
            kill_group(pgid);
            child.wait()?;
            break stop;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    kill_group(pgid);
    Ok(exit)
}

fn kill_group(pgid: libc::pid_t) {
    // SAFETY: plain syscall; ESRCH (group already gone) is fine.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Whether this kernel lets us mount the source tree read-only for children; checked once.
pub fn read_only_guard_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let Ok(setup) = ChildSetup::new(None, &[PathBuf::from("/")]) else {
            return false;
        };
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "exit 0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: as in run_limited.
        unsafe {
            cmd.pre_exec(move || setup.apply());
        }
        cmd.status().map(|s| s.success()).unwrap_or(false)
    })
}

/// What the child does between fork and exec; every allocation happens before the fork.
struct ChildSetup {
    memory_bytes: Option<u64>,
    read_only: Vec<CString>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl ChildSetup {
    fn new(memory_bytes: Option<u64>, read_only: &[PathBuf]) -> io::Result<Self> {
        let read_only = read_only
            .iter()
            .map(|p| {
                CString::new(p.as_os_str().as_bytes())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
            })
            .collect::<io::Result<_>>()?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(ChildSetup {
            memory_bytes,
            read_only,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        })
    }

    fn apply(&self) -> io::Result<()> {
        if let Some(bytes) = self.memory_bytes {
            let lim = libc::rlimit {
                rlim_cur: bytes as libc::rlim_t,
                rlim_max: bytes as libc::rlim_t,
            };
            // SAFETY: plain syscall on a stack value.
            if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if !self.read_only.is_empty() {
            self.mount_read_only()?;
        }
        Ok(())
    }

    /// A private mount namespace (inside a user namespace when not root) where each guarded
    /// path is a read-only bind mount of itself.
    fn mount_read_only(&self) -> io::Result<()> {
        // SAFETY: raw syscalls on buffers prepared before the fork.
        unsafe {
            if libc::geteuid() == 0 {
                check(libc::unshare(libc::CLONE_NEWNS))?;
            } else {
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", &self.uid_map)?;
                write_proc(c"/proc/self/gid_map", &self.gid_map)?;
            }
            let none = std::ptr::null();
            check(libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for p in &self.read_only {
                check(libc::mount(
                    p.as_ptr(),
                    p.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    none,
                    p.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                    std::ptr::null(),
                ))?;
            }
        }
        Ok(())
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// # Safety
/// Raw open/write/close on a NUL-terminated path; no allocation.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = libc::write(fd, data.as_ptr().cast(), data.len());
    libc::close(fd);
    if n != data.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The last `max` bytes of a file, cut at a character boundary.
pub fn tail(path: &Path, max: usize) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = bytes.len().saturating_sub(max);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.trim_start_matches('\u{FFFD}').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(timeout_ms: u64) -> Limits {
        Limits {
            timeout: Duration::from_millis(timeout_ms),
            memory_bytes: Some(1 << 30),
            read_only: vec![],
        }
    }

    fn sh(script: &str, limits: &Limits, dir: &Path) -> (Exit, String) {
        let log = dir.join("log");
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let never = AtomicBool::new(false);
        let exit = run_limited(
            Path::new("/bin/sh"),
            &["-c".to_string(), script.to_string()],
            dir,
            &env,
            limits,
            &log,
            &never,
        )
        .unwrap();
        (exit, fs::read_to_string(&log).unwrap())
    }

    #[test]
    fn exit_codes_env_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let (exit, out) = sh("echo $PATH $HOME; exit 3", &limits(5000), dir.path());
        assert_eq!(exit, Exit::Code(3));
        assert_eq!(out, "/usr/bin:/bin\n");
        let t = Instant::now();
        // The background sleeper shares the group and dies with it.
        let (exit, _) = sh("sleep 30 & sleep 30", &limits(200), dir.path());
        assert_eq!(exit, Exit::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn copies_without_vcs_and_caches() {
        let src = tempfile::tempdir().unwrap();
        for d in [".git", "pkg/__pycache__", "pkg/sub"] {
            fs::create_dir_all(src.path().join(d)).unwrap();
        }
        fs::write(src.path().join("pkg/a.py"), "x").unwrap();
        fs::write(src.path().join("pkg/sub/b.py"), "y").unwrap();
        fs::write(src.path().join("pkg/__pycache__/a.pyc"), "z").unwrap();
        fs::write(src.path().join(".git/HEAD"), "h").unwrap();
        let dst = tempfile::tempdir().unwrap();
        copy_project(src.path(), &dst.path().join("c")).unwrap();
        let c = dst.path().join("c");
        assert_eq!(fs::read_to_string(c.join("pkg/sub/b.py")).unwrap(), "y");
        assert!(c.join("pkg/a.py").is_file());
        assert!(!c.join(".git").exists());
        assert!(!c.join("pkg/__pycache__").exists());
    }

    #[test]
    fn read_only_guard_blocks_writes() {
        if !read_only_guard_available() {
            eprintln!("mount namespaces unavailable here; guard not exercised");
            return;
        }
        let guarded = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        fs::write(guarded.path().join("f"), "keep").unwrap();
        let mut l = limits(5000);
        l.read_only = vec![guarded.path().to_path_buf()];
        let script = format!(
            "echo gone > {0}/f; rm -f {0}/f; echo ok > out",
            guarded.path().display()
        );
        let (exit, _) = sh(&script, &l, work.path());
        assert_eq!(exit, Exit::Code(0));
        assert_eq!(
            fs::read_to_string(guarded.path().join("f")).unwrap(),
            "keep"
        );
        assert_eq!(fs::read_to_string(work.path().join("out")).unwrap(), "ok\n");
    }
}
