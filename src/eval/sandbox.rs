//! Running untrusted code.
//!
//! Every test process runs in its own user, mount, PID, IPC and (unless allowed) network
//! namespace where the whole file system is read-only except the trees the caller names
//! (the task's copy of the project, its home and temp folders), `/tmp` is private
//! (`eval::private_tmp`), `/proc` shows only the sandbox's processes, and no capability is
//! left that could undo a mount. Where the kernel refuses namespaces the same process tree
//! runs without them, and [`availability`] says why.
//!
//! The process tree, all set up between `fork` and `exec` with raw syscalls on data prepared
//! before the fork:
//!
//! ```text
//! evaluator ── C: new session, namespaces, read-only mounts; blocks every signal, waits
//!              └─ G: PID 1 of the new PID namespace; mounts /proc, reaps, reports H's status
//!                 └─ H: no capabilities, rlimits, no_new_privs; execs the test command
//! ```
//!
//! C is the only process the evaluator knows; it exits with H's status (or dies of H's
//! signal). When G exits the kernel kills everything left in the namespace, so descendants
//! that started their own session die too. `getppid()` in H is G (PID 1), which a signal from
//! inside cannot kill; the evaluator is not even addressable. Killing C (timeout, cancel)
//! kills G through `PR_SET_PDEATHSIG`, and with it the namespace.
//!
//! Without namespaces, C forks H directly, is a child subreaper and kills what H leaves
//! behind; the evaluator then stays reachable by a determined test (through `/proc`).

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::private_tmp::TmpPlan;

/// Entries never copied: VCS data, our index, bytecode caches.
const SKIP: [&str; 3] = [".git", ".repohop", "__pycache__"];

/// Copies the project tree `src` into `dst` (created), skipping [`SKIP`]. A symlink whose
/// target resolves inside `src` becomes a relative link to the same place inside `dst`; one
/// that resolves outside `src`, or not at all, is left out.
pub fn copy_project(src: &Path, dst: &Path) -> io::Result<()> {
    let root = src.canonicalize()?;
    copy_tree(&root, &root, dst, 0)
}

fn copy_tree(root: &Path, src: &Path, dst: &Path, depth: usize) -> io::Result<()> {
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
            copy_tree(root, &from, &to, depth + 1)?;
        } else if ty.is_symlink() {
            // Resolved from the real tree: only links that stay inside it are kept.
            let Ok(real) = from.canonicalize() else {
                continue;
            };
            let Ok(inside) = real.strip_prefix(root) else {
                continue;
            };
            let mut target = PathBuf::new();
            for _ in 0..depth {
                target.push("..");
            }
            target.push(inside);
            if target.as_os_str().is_empty() {
                target.push(".");
            }
            std::os::unix::fs::symlink(&target, &to)?;
        } else if ty.is_file() {
            fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// Replaces the regular file `rel` under `root` with `data`, never following a symlink: every
/// folder on the way and the file itself are opened with `O_NOFOLLOW`, and `..` or an
/// absolute path is refused. The file must exist (it was copied from the project).
pub fn write_no_follow(root: &Path, rel: &Path, data: &[u8]) -> io::Result<()> {
    write_at(root, rel, data, false)
}

/// [`write_no_follow`], creating the file when it is missing (a file the harness adds, such as
/// the model's tests).
pub fn create_no_follow(root: &Path, rel: &Path, data: &[u8]) -> io::Result<()> {
    write_at(root, rel, data, true)
}

fn write_at(root: &Path, rel: &Path, data: &[u8], create: bool) -> io::Result<()> {
    let refuse = |why: &str| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{}: {why}", rel.display()),
        )
    };
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            Component::CurDir => Err(refuse("`.` in the path")),
            _ => Err(refuse("not a plain relative path")),
        })
        .collect::<io::Result<_>>()?;
    let Some((file, dirs)) = parts.split_last() else {
        return Err(refuse("empty path"));
    };
    let cstr = |p: &std::ffi::OsStr| {
        CString::new(p.as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let root_c = CString::new(root.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: plain syscalls on NUL-terminated strings; each fd is owned right away.
    let mut dir = unsafe { owned(libc::open(root_c.as_ptr(), dir_flags)) }?;
    for d in dirs {
        let name = cstr(d)?;
        // SAFETY: openat(2) on an fd we own and a NUL-terminated name; the result is owned.
        let next = unsafe { owned(libc::openat(dir.as_raw_fd(), name.as_ptr(), dir_flags)) };
        dir = next.map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => refuse(&format!(
                "`{}` is a symlink or not a folder",
                d.to_string_lossy()
            )),
            _ => e,
        })?;
    }
    let name = cstr(file)?;
    let mut flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    if create {
        flags |= libc::O_CREAT;
    }
    let mode: libc::c_uint = 0o644;
    // SAFETY: as above (the mode is read only with O_CREAT).
    let fd = unsafe { owned(libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode)) }.map_err(
        |e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("is a symlink"),
            Some(libc::ENOENT) => refuse("missing from the copy (a symlink leaving the project?)"),
            _ => e,
        },
    )?;
    let mut f = File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(refuse("not a regular file"));
    }
    f.set_len(0)?;
    f.write_all(data)
}

/// # Safety
/// `fd` is a fresh descriptor (or negative with errno set) that nothing else owns.
unsafe fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the caller hands over a fresh descriptor that nothing else owns or closes.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where task copies are made: `/var/tmp` when it is a writable folder, so that the sandbox can
/// give each test a private `/tmp` without hiding the copy; else the system temp folder.
pub fn work_base() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    let writable = std::ffi::CString::new("/var/tmp")
        // SAFETY: access(2) on a NUL-terminated path.
        .map(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
        .unwrap_or(false);
    if var_tmp.is_dir() && writable {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Limits for one child process.
#[derive(Debug, Clone)]
pub struct Limits {
    pub timeout: Duration,
    /// RLIMIT_AS in bytes; `None` leaves it unlimited.
    pub memory_bytes: Option<u64>,
    /// RLIMIT_FSIZE in bytes (also bounds the log); `None` leaves it unlimited.
    pub file_size_bytes: Option<u64>,
    /// The trees the child may write; in the sandbox everything else is read-only.
    pub writable: Vec<PathBuf>,
    /// Keep the host's network; otherwise the child gets a network namespace with only `lo`.
    pub network: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    Cancelled,
}

/// How test processes are isolated on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// User (when `user`), mount, PID, IPC and network namespaces.
    Namespaces { user: bool },
    /// None available: a new session, rlimits, a subreaper; nothing read-only.
    Unsandboxed,
}

/// What [`availability`] found.
#[derive(Debug, Clone)]
pub struct Availability {
    pub isolation: Isolation,
    /// Why namespaces are not used, when they aren't.
    pub reason: Option<String>,
}

impl Availability {
    pub fn sandboxed(&self) -> bool {
        matches!(self.isolation, Isolation::Namespaces { .. })
    }
}

/// Probes once per process (by running `/bin/sh -c 'exit 0'` through the full setup) which
/// isolation this kernel allows: a user namespace first, then, as root, namespaces without one.
/// `REPOHOP_NO_NAMESPACES=1` in the environment skips the probe and uses none (to exercise
/// the fallback).
pub fn availability() -> &'static Availability {
    static AVAILABLE: OnceLock<Availability> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        if std::env::var_os("REPOHOP_NO_NAMESPACES").is_some_and(|v| v == "1") {
            return Availability {
                isolation: Isolation::Unsandboxed,
                reason: Some("REPOHOP_NO_NAMESPACES=1".into()),
            };
        }
        let mut reasons = Vec::new();
        let mut modes = vec![Isolation::Namespaces { user: true }];
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            modes.push(Isolation::Namespaces { user: false });
        }
        for mode in modes {
            match probe(mode) {
                Ok(()) => {
                    return Availability {
                        isolation: mode,
                        reason: None,
                    }
                }
                Err(e) => reasons.push(e),
            }
        }
        Availability {
            isolation: Isolation::Unsandboxed,
            reason: Some(reasons.join("; ")),
        }
    })
}

/// Says once per process, on stderr, that tests run without a sandbox and why.
pub fn warn_unsandboxed() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let a = availability();
    if a.sandboxed() || WARNED.swap(true, Ordering::SeqCst) {
        return;
    }
    eprintln!(
        "repohop: WARNING: test processes run without a sandbox ({}): they can write outside \
         their copy of the project, reach the network and signal the evaluator. Use \
         --require-sandbox to refuse instead.",
        a.reason.as_deref().unwrap_or("namespaces unavailable")
    );
}

fn probe(mode: Isolation) -> Result<(), String> {
    let name = match mode {
        Isolation::Namespaces { user: true } => "user namespaces",
        _ => "namespaces without a user namespace",
    };
    let limits = Limits {
        timeout: Duration::from_secs(20),
        memory_bytes: None,
        file_size_bytes: None,
        writable: vec![],
        network: false,
    };
    let never = AtomicBool::new(false);
    let args = ["-c".to_string(), "exit 0".to_string()];
    match run_in(
        mode,
        Path::new("/bin/sh"),
        &args,
        Path::new("/"),
        &[],
        &limits,
        Stdio::null(),
        Stdio::null(),
        &never,
    ) {
        Ok(Exit::Code(0)) => Ok(()),
        Ok(other) => Err(format!("{name}: probe ended with {other:?}")),
        Err(e) => Err(format!("{name}: {e}")),
    }
}

/// Runs `program args` in `cwd` with only `env`, stdout and stderr both to `log`, under
/// `limits`, in the sandbox [`availability`] found. On timeout or when `cancel` is set, the
/// whole process tree is killed; so is anything the child left behind.
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
    let mode = availability().isolation;
    run_in(
        mode,
        program,
        args,
        cwd,
        env,
        limits,
        out.into(),
        err.into(),
        cancel,
    )
}

#[allow(clippy::too_many_arguments)]
fn run_in(
    mode: Isolation,
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limits: &Limits,
    stdout: Stdio,
    stderr: Stdio,
    cancel: &AtomicBool,
) -> io::Result<Exit> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let setup = ChildSetup::new(mode, limits, cwd, program)?;
    // SAFETY: the closure only makes raw syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || setup.apply());
    }
    let mut child = cmd.spawn()?;
    // C leads its own session and process group.
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

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 1;

/// `struct ifreq` with the flags member of the union.
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// `capset(2)`'s header (version 3) and one of its two data words.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The namespace half of the setup.
struct NsPlan {
    user: bool,
    network: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    writable: Vec<CString>,
    /// A private /tmp (none when a writable tree holds /tmp itself).
    tmp: Option<TmpPlan>,
    cwd: CString,
}

/// What the child does between fork and exec; every allocation happens before the fork.
struct ChildSetup {
    ns: Option<NsPlan>,
    evaluator: libc::pid_t,
    memory_bytes: Option<u64>,
    file_size_bytes: Option<u64>,
}

pub(super) fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

impl ChildSetup {
    fn new(mode: Isolation, limits: &Limits, cwd: &Path, program: &Path) -> io::Result<Self> {
        // SAFETY: getuid/getgid/getpid cannot fail.
        let (uid, gid, pid) = unsafe { (libc::getuid(), libc::getgid(), libc::getpid()) };
        let ns = match mode {
            Isolation::Unsandboxed => None,
            Isolation::Namespaces { user } => {
                let writable = limits
                    .writable
                    .iter()
                    .map(|p| p.canonicalize())
                    .collect::<io::Result<Vec<_>>>()?;
                Some(NsPlan {
                    user,
                    network: limits.network,
                    uid_map: format!("{uid} {uid} 1").into_bytes(),
                    gid_map: format!("{gid} {gid} 1").into_bytes(),
                    tmp: TmpPlan::new(program, &writable)?,
                    writable: writable
                        .iter()
                        .map(|p| c_path(p))
                        .collect::<io::Result<_>>()?,
                    cwd: c_path(&std::path::absolute(cwd)?)?,
                })
            }
        };
        Ok(ChildSetup {
            ns,
            evaluator: pid,
            memory_bytes: limits.memory_bytes,
            file_size_bytes: limits.file_size_bytes,
        })
    }

    /// Runs in C. Returns only in H (then std execs the program) or with an error before the
    /// first fork (then `spawn` reports it).
    fn apply(&self) -> io::Result<()> {
        // SAFETY: raw syscalls on buffers prepared before the fork; no allocation.
        unsafe {
            check(libc::setsid())?;
            prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != self.evaluator {
                libc::_exit(1);
            }
            set_limit(libc::RLIMIT_CORE, Some(0))?;
            if let Some(ns) = &self.ns {
                ns.enter()?;
            } else {
                prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
            }
            // C and G keep capabilities in the sandbox's user namespace: not dumpable, so the
            // test (same uid, no capabilities) cannot ptrace them or read their /proc files.
            prctl(libc::PR_SET_DUMPABLE, 0);
            let mut pipe = [-1; 2];
            check(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC))?;
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::fork();
            if pid < 0 {
                let e = io::Error::last_os_error();
                libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                return Err(e);
            }
            if pid > 0 {
                // C: wait, then leave with H's status.
                libc::close(pipe[1]);
                close_all_but(pipe[0]);
                let mut status = wait_for(pid);
                if self.ns.is_some() {
                    let mut buf = [0u8; 4];
                    if libc::read(pipe[0], buf.as_mut_ptr().cast(), 4) == 4 {
                        status = i32::from_ne_bytes(buf);
                    }
                } else {
                    kill_orphans();
                }
                mirror(status);
            }
            libc::close(pipe[0]);
            prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if self.ns.is_none() {
                // H directly under C.
                libc::close(pipe[1]);
                return self.become_test(&old, false);
            }
            // G: PID 1 of the new namespace.
            mount_proc();
            let h = libc::fork();
            if h < 0 {
                fail(b"repohop sandbox: fork failed\n");
            }
            if h == 0 {
                libc::close(pipe[1]);
                prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                return self.become_test(&old, true);
            }
            close_all_but(pipe[1]);
            loop {
                let mut st = 0;
                let r = libc::waitpid(-1, &mut st, 0);
                if r == h {
                    let bytes = st.to_ne_bytes();
                    libc::write(pipe[1], bytes.as_ptr().cast(), 4);
                    libc::_exit(0);
                }
                if r < 0 && *libc::__errno_location() != libc::EINTR {
                    libc::_exit(126);
                }
            }
        }
    }

    /// H: signals back, limits, and no capability survives the exec.
    ///
    /// # Safety
    /// Only between fork and exec.
    unsafe fn become_test(&self, old: &libc::sigset_t, sandboxed: bool) -> io::Result<()> {
        // SAFETY: raw syscalls on values prepared before the fork and on stack values; no
        // allocation (the caller runs between fork and exec).
        unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
            // Descriptors the evaluator inherited without close-on-exec don't reach the test.
            const CLOSE_RANGE_CLOEXEC: libc::c_ulong = 1 << 2;
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_ulong,
                libc::c_uint::MAX as libc::c_ulong,
                CLOSE_RANGE_CLOEXEC,
            );
            set_limit(libc::RLIMIT_AS, self.memory_bytes)?;
            set_limit(libc::RLIMIT_FSIZE, self.file_size_bytes)?;
            check(prctl(libc::PR_SET_NO_NEW_PRIVS, 1))?;
            prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            );
            // An empty bounding set (and the empty inheritable set a new user namespace starts
            // with) leaves even uid 0 without capabilities after exec: nothing can unmount.
            for cap in 0..64 {
                if prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong) != 0 {
                    let errno = *libc::__errno_location();
                    if errno == libc::EINVAL {
                        break;
                    }
                    if sandboxed {
                        fail(b"repohop sandbox: cannot drop capabilities\n");
                    }
                }
            }
            // Nothing inheritable either (a root evaluator may have it set), nor kept now.
            let header = CapHeader {
                version: 0x2008_0522,
                pid: 0,
            };
            let data = [CapData::default(); 2];
            let rc = libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr());
            if rc != 0 && sandboxed {
                fail(b"repohop sandbox: cannot clear capabilities\n");
            }
            Ok(())
        }
    }
}

impl NsPlan {
    /// In C: unshare, map ids, make everything read-only but the writable trees.
    ///
    /// # Safety
    /// Only between fork and exec.
    unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated strings and byte buffers prepared before the
        // fork; no allocation (the caller runs between fork and exec).
        unsafe {
            let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
            if self.user {
                flags |= libc::CLONE_NEWUSER;
            }
            if !self.network {
                flags |= libc::CLONE_NEWNET;
            }
            check(libc::unshare(flags))?;
            if self.user {
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
            let ro = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            mount_setattr(c"/", &ro)?;
            let rw = MountAttr {
                attr_set: 0,
                attr_clr: MOUNT_ATTR_RDONLY,
                propagation: 0,
                userns_fd: 0,
            };
            for p in &self.writable {
                check(libc::mount(
                    p.as_ptr(),
                    p.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                mount_setattr(p, &rw)?;
            }
            // Python's multiprocessing wants a writable /dev/shm; best effort.
            libc::mount(
                c"tmpfs".as_ptr(),
                c"/dev/shm".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=67108864,mode=1777".as_ptr().cast(),
            );
            if let Some(tmp) = &self.tmp {
                tmp.mount()?;
            }
            // The old working directory is on the read-only mount; enter the writable bind.
            check(libc::chdir(self.cwd.as_ptr()))?;
            if !self.network {
                loopback_up();
            }
            Ok(())
        }
    }
}

/// # Safety
/// Raw syscall on a NUL-terminated path and a stack value.
unsafe fn mount_setattr(path: &std::ffi::CStr, attr: &MountAttr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and `attr` a live `struct mount_attr` of the size
    // passed; the kernel only reads them.
    unsafe {
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD as libc::c_long,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_ulong,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>() as libc::c_ulong,
        );
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// In G: a procfs of the new PID namespace on /proc, else an empty tmpfs over it (the host's
/// /proc would show the evaluator's process and working directory).
///
/// # Safety
/// Only between fork and exec.
unsafe fn mount_proc() {
    // SAFETY: mount(2) on static NUL-terminated strings; no allocation (the caller runs
    // between fork and exec).
    unsafe {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            flags,
            std::ptr::null(),
        ) == 0
        {
            return;
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            c"/proc".as_ptr(),
            c"tmpfs".as_ptr(),
            flags | libc::MS_RDONLY,
            c"size=4096".as_ptr().cast(),
        ) == 0
        {
            return;
        }
        fail(b"repohop sandbox: cannot hide the host's /proc\n");
    }
}

/// Brings `lo` up in the new network namespace; best effort.
///
/// # Safety
/// Only between fork and exec.
unsafe fn loopback_up() {
    // SAFETY: socket/ioctl/close on a descriptor we own and a live `struct ifreq`; no
    // allocation (the caller runs between fork and exec).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return;
        }
        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        req.name[0] = b'l';
        req.name[1] = b'o';
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) == 0 {
            req.flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
        }
        libc::close(fd);
    }
}

/// Writes `msg` to the log (stderr) and exits with 125.
///
/// # Safety
/// Only between fork and exec.
unsafe fn fail(msg: &[u8]) -> ! {
    // SAFETY: write(2) of a live buffer with its length, then _exit(2); both async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(125);
    }
}

/// Closes every descriptor from 3 up except `keep` (std's exec-error pipe among them: the
/// evaluator's `spawn` returns once H has exec'd and nothing else holds it).
///
/// # Safety
/// Only between fork and exec.
unsafe fn close_all_but(keep: libc::c_int) {
    // SAFETY: closes only descriptors of this process, which is about to exec; nothing
    // here uses them afterwards.
    unsafe {
        let ranges = [(3, keep - 1), (keep + 1, libc::c_int::MAX)];
        for (lo, hi) in ranges {
            if lo > hi {
                continue;
            }
            if libc::syscall(
                libc::SYS_close_range,
                lo as libc::c_ulong,
                hi as libc::c_uint as libc::c_ulong,
                0 as libc::c_ulong,
            ) != 0
            {
                for fd in lo..hi.min(4096) {
                    libc::close(fd);
                }
            }
        }
    }
}

/// # Safety
/// Only between fork and exec.
unsafe fn wait_for(pid: libc::pid_t) -> libc::c_int {
    // SAFETY: waitpid(2) into a stack value; errno is this thread's.
    unsafe {
        loop {
            let mut st = 0;
            let r = libc::waitpid(pid, &mut st, 0);
            if r == pid {
                return st;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                return 1 << 8;
            }
        }
    }
}

/// Leaves with `status`: its exit code, or death by its signal.
///
/// # Safety
/// Only between fork and exec.
unsafe fn mirror(status: libc::c_int) -> ! {
    // SAFETY: signal, mask and exit syscalls on stack values; async-signal-safe.
    unsafe {
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(1);
    }
}

/// Without a PID namespace: C is a subreaper, so whatever H left running (in its own session
/// too) became C's child; kill and reap it, round after round.
///
/// # Safety
/// Only between fork and exec.
unsafe fn kill_orphans() {
    // SAFETY: open/read/close into stack buffers of the sizes passed (the path is
    // NUL-terminated: `path` is zeroed and holds at most 16 + 10 + 9 bytes), then
    // kill/waitpid; no allocation (the caller runs between fork and exec).
    unsafe {
        // "/proc/self/task/<pid>/children"
        let mut path = [0u8; 64];
        let mut n = 0;
        for b in b"/proc/self/task/" {
            path[n] = *b;
            n += 1;
        }
        let mut digits = [0u8; 12];
        let mut d = 0;
        let mut pid = libc::getpid();
        while pid > 0 {
            digits[d] = b'0' + (pid % 10) as u8;
            pid /= 10;
            d += 1;
        }
        while d > 0 {
            d -= 1;
            path[n] = digits[d];
            n += 1;
        }
        for b in b"/children" {
            path[n] = *b;
            n += 1;
        }
        for _round in 0..1000 {
            let mut found = false;
            let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                let mut buf = [0u8; 4096];
                let len = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::close(fd);
                let mut cur: libc::pid_t = 0;
                for &b in buf.iter().take(len.max(0) as usize) {
                    if b.is_ascii_digit() {
                        cur = cur * 10 + (b - b'0') as libc::pid_t;
                    } else if cur > 0 {
                        libc::kill(cur, libc::SIGKILL);
                        found = true;
                        cur = 0;
                    }
                }
                if cur > 0 {
                    libc::kill(cur, libc::SIGKILL);
                    found = true;
                }
            }
            let mut reaped = false;
            loop {
                let r = libc::waitpid(
                    -1,
                    std::ptr::null_mut(),
                    if found { 0 } else { libc::WNOHANG },
                );
                if r <= 0 {
                    break;
                }
                reaped = true;
            }
            if !found && !reaped {
                return;
            }
        }
    }
}

/// `prctl(op, arg, 0, 0, 0)` with every argument the width the kernel reads.
///
/// # Safety
/// Plain syscall.
unsafe fn prctl(op: libc::c_int, arg: libc::c_ulong) -> libc::c_int {
    // SAFETY: prctl(2) with plain integer arguments, each the width the kernel reads.
    unsafe {
        let zero: libc::c_ulong = 0;
        libc::prctl(op, arg, zero, zero, zero)
    }
}

/// # Safety
/// Plain syscall on a stack value.
unsafe fn set_limit(resource: libc::__rlimit_resource_t, bytes: Option<u64>) -> io::Result<()> {
    // SAFETY: setrlimit(2) reads a live stack value.
    unsafe {
        let Some(bytes) = bytes else {
            return Ok(());
        };
        let lim = libc::rlimit {
            rlim_cur: bytes as libc::rlim_t,
            rlim_max: bytes as libc::rlim_t,
        };
        check(libc::setrlimit(resource, &lim))
    }
}

pub(super) fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// # Safety
/// Raw open/write/close on a NUL-terminated path; no allocation.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open(2) of a NUL-terminated path; write(2) of a live buffer with its
    // length; the descriptor is ours to close.
    unsafe {
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
}

/// The last `max` bytes of a file, cut at a character boundary; reads only those bytes, however
/// large the file is.
pub fn tail(path: &Path, max: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max as u64);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::with_capacity(max.min(len as usize));
    if f.take(max as u64).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    text.trim_start_matches('\u{FFFD}').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(timeout_ms: u64) -> Limits {
        Limits {
            timeout: Duration::from_millis(timeout_ms),
            memory_bytes: Some(1 << 30),
            file_size_bytes: None,
            writable: vec![],
            network: false,
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

    /// Whether the namespace tests can run; without namespaces they fail under
    /// `REPOHOP_REQUIRE_SANDBOX=1` and are skipped (with the reason) otherwise.
    fn sandbox_here() -> bool {
        let a = availability();
        if a.sandboxed() {
            return true;
        }
        let why = a.reason.clone().unwrap_or_default();
        if std::env::var("REPOHOP_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
            panic!("REPOHOP_REQUIRE_SANDBOX=1 but namespaces are unavailable: {why}");
        }
        eprintln!("SKIPPED: namespaces unavailable here ({why})");
        false
    }

    #[test]
    fn exit_codes_env_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = limits(5000);
        l.writable = vec![dir.path().to_path_buf()];
        let (exit, out) = sh("echo $PATH $HOME; exit 3", &l, dir.path());
        assert_eq!(exit, Exit::Code(3));
        assert_eq!(out, "/usr/bin:/bin\n");
        let (exit, _) = sh("kill -SEGV $$", &l, dir.path());
        assert_eq!(exit, Exit::Signal(libc::SIGSEGV));
        let t = Instant::now();
        // The background sleeper dies with the tree.
        l.timeout = Duration::from_millis(200);
        let (exit, _) = sh("sleep 30 & sleep 30", &l, dir.path());
        assert_eq!(exit, Exit::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn copies_without_vcs_caches_and_links_that_leave() {
        let src = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        for d in [".git", "pkg/__pycache__", "pkg/sub"] {
            fs::create_dir_all(src.path().join(d)).unwrap();
        }
        fs::write(src.path().join("pkg/a.py"), "x").unwrap();
        fs::write(src.path().join("pkg/sub/b.py"), "y").unwrap();
        fs::write(src.path().join("pkg/__pycache__/a.pyc"), "z").unwrap();
        fs::write(src.path().join(".git/HEAD"), "h").unwrap();
        let link = |target: &Path, at: &str| {
            std::os::unix::fs::symlink(target, src.path().join(at)).unwrap()
        };
        link(Path::new("../a.py"), "pkg/sub/up.py");
        link(&src.path().join("pkg/sub"), "pkg/abs_sub");
        link(&outside.path().join("secret"), "pkg/secret");
        link(outside.path(), "pkg/out_dir");
        link(Path::new("../../../../../../../etc"), "pkg/etc");
        link(Path::new("nowhere"), "pkg/dangling");
        let dst = tempfile::tempdir().unwrap();
        copy_project(src.path(), &dst.path().join("c")).unwrap();
        let c = dst.path().join("c");
        assert_eq!(fs::read_to_string(c.join("pkg/sub/b.py")).unwrap(), "y");
        assert!(c.join("pkg/a.py").is_file());
        assert!(!c.join(".git").exists());
        assert!(!c.join("pkg/__pycache__").exists());
        // Links inside the project point into the copy.
        assert_eq!(
            fs::read_link(c.join("pkg/sub/up.py")).unwrap(),
            Path::new("../../pkg/a.py")
        );
        assert_eq!(fs::read_to_string(c.join("pkg/sub/up.py")).unwrap(), "x");
        assert_eq!(
            fs::read_link(c.join("pkg/abs_sub")).unwrap(),
            Path::new("../pkg/sub")
        );
        // Links leaving it are not copied.
        for gone in ["pkg/secret", "pkg/out_dir", "pkg/etc", "pkg/dangling"] {
            assert!(fs::symlink_metadata(c.join(gone)).is_err(), "{gone}");
        }
    }

    #[test]
    fn writes_refuse_symlinks_on_the_way() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir_all(r.join("pkg")).unwrap();
        fs::write(r.join("pkg/m.py"), "old").unwrap();
        fs::write(outside.path().join("m.py"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.path().join("m.py"), r.join("pkg/link.py")).unwrap();
        std::os::unix::fs::symlink(outside.path(), r.join("dirlink")).unwrap();
        write_no_follow(r, Path::new("pkg/m.py"), b"new").unwrap();
        assert_eq!(fs::read_to_string(r.join("pkg/m.py")).unwrap(), "new");
        for bad in [
            "pkg/link.py",
            "dirlink/m.py",
            "../x",
            "/etc/passwd",
            "pkg/none.py",
        ] {
            assert!(
                write_no_follow(r, Path::new(bad), b"evil").is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            fs::read_to_string(outside.path().join("m.py")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn tail_reads_the_end_at_a_character_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        // Sparse; the integration test `evaluator_reads_only_the_tail_of_a_huge_log` measures.
        let f = File::create(&p).unwrap();
        f.set_len(256 << 20).unwrap();
        let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all("é tail end".as_bytes()).unwrap();
        // The last 10 bytes start inside `é`.
        assert_eq!(tail(&p, 10), " tail end");
        assert_eq!(tail(&p, 11), "é tail end");
        assert_eq!(tail(&dir.path().join("none"), 10), "");
    }

    #[test]
    fn sandbox_leaves_only_the_writable_trees_writable() {
        if !sandbox_here() {
            return;
        }
        let guarded = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        fs::write(guarded.path().join("f"), "keep").unwrap();
        let mut l = limits(10_000);
        l.writable = vec![work.path().to_path_buf()];
        let script = format!(
            "echo gone > {0}/f; rm -f {0}/f; echo ok > out; \
             test -e /proc/{1} && echo visible; echo pid=$$ ppid=$PPID",
            guarded.path().display(),
            std::process::id()
        );
        let (exit, log) = sh(&script, &l, work.path());
        assert_eq!(exit, Exit::Code(0), "{log}");
        assert_eq!(
            fs::read_to_string(guarded.path().join("f")).unwrap(),
            "keep"
        );
        assert_eq!(fs::read_to_string(work.path().join("out")).unwrap(), "ok\n");
        // Only the sandbox's processes: the shell is PID 2 under the namespace's init.
        assert!(log.contains("pid=2 ppid=1"), "{log}");
        assert!(!log.contains("visible"), "{log}");
    }
}
