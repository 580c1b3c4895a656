//! Untrusted bodies run in a throwaway copy: the source tree survives deletion and writes.
//! The sandbox tests each play one attack a generated body could make (see
//! `src/eval/sandbox.rs`); those that need namespaces fail under `REPOHOP_REQUIRE_SANDBOX=1`
//! where the kernel refuses them, and are skipped with the reason otherwise.

mod eval_common;
use eval_common::*;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use repohop::eval::sandbox;

/// Whether namespaces are available; see the module comment.
fn sandbox_here(test: &str) -> bool {
    let a = sandbox::availability();
    if a.sandboxed() {
        return true;
    }
    let why = a.reason.clone().unwrap_or_default();
    if std::env::var("REPOHOP_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
        panic!("{test}: REPOHOP_REQUIRE_SANDBOX=1 but namespaces are unavailable: {why}");
    }
    eprintln!("SKIPPED {test}: namespaces unavailable here ({why})");
    false
}

/// Copies the fixture's `Source_Code` to `dir/Source_Code` (attacks may succeed on broken
/// code: never against the repository's own fixture).
fn fixture_copy(dir: &Path) -> PathBuf {
    let to = dir.join("Source_Code");
    copy_dir(&fixture().join("Source_Code"), &to);
    to.canonicalize().unwrap()
}

/// Runs the eval CLI and returns its output with its peak resident memory in KiB.
// Reaped by `wait4` (for its rusage), which clippy doesn't see.
#[allow(clippy::zombie_processes)]
fn eval_measured(source_root: &Path, out: &Path, extra: &[&str]) -> (Output, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (so, se) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let child = eval_command(source_root, out, extra)
        .stdout(std::fs::File::create(&so).unwrap())
        .stderr(std::fs::File::create(&se).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: plain wait4 on our own child, into stack values.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    let output = Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: std::fs::read(&so).unwrap(),
        stderr: std::fs::read(&se).unwrap(),
    };
    (output, usage.ru_maxrss as u64)
}

#[test]
fn hostile_bodies_leave_the_source_tree_intact() {
    if !sandbox_here("hostile_bodies_leave_the_source_tree_intact") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture_copy(tmp.path());
    let project = src.join("Demo/calc");
    let before = snapshot(&src);
    let p = project.display();
    let file = completions(
        tmp.path(),
        &[
            // Deletes the package in its working directory (the copy), then fails.
            ("calc.ops.add", "import shutil\nshutil.rmtree('calc', ignore_errors=True)\nreturn a + b\n"),
            // Writes into and deletes from the real source tree by absolute path.
            (
                "calc.ops.scale",
                &format!(
                    "import os, shutil\ntry:\n    open('{p}/calc/ops.py', 'w').write('broken')\nexcept OSError:\n    pass\ntry:\n    open('{p}/planted.py', 'w').write('x')\nexcept OSError:\n    pass\nshutil.rmtree('{p}/tests', ignore_errors=True)\nreturn [ratio(v, total) for v in values]\n"
                ),
            ),
        ],
    );
    let run = tmp.path().join("run");
    let s = summary(
        &eval_command(
            &src,
            &run,
            &[
                "--completions",
                file.to_str().unwrap(),
                "--limit",
                "2",
                "--require-sandbox",
            ],
        )
        .output()
        .unwrap(),
    );
    assert_eq!(s["total"], 2);
    assert_eq!(snapshot(&src), before, "the source tree changed");
    // The body that only damaged its own copy and then returned correctly still passes.
    assert_eq!(result(&run, "calc.ops.scale")["outcome"], "pass");
    // Test processes see a scrubbed environment.
    assert!(std::env::var_os("REPOHOP_TEST_PYTHON").is_some());
}

#[test]
fn memory_limit_stops_a_greedy_body() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[("calc.ops.add", "hog = bytearray(3 << 30)\nreturn a + b\n")],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--memory-mb",
            "1024",
        ],
    ));
    assert_eq!(s["passed"], 0);
    let r = result(&run, "calc.ops.add");
    assert_eq!(r["outcome"], "fail");
    assert!(
        r["output_tail"].as_str().unwrap().contains("MemoryError"),
        "{r}"
    );
}

#[test]
fn environment_is_scrubbed() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[(
            "calc.ops.add",
            "import os\nassert 'REPOHOP_TEST_PYTHON' not in os.environ, sorted(os.environ)\nassert os.environ['PYTHONHASHSEED'] == '0'\nreturn a + b\n",
        )],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "1"],
    ));
    assert_eq!(s["passed"], 1, "{}", result(&run, "calc.ops.add"));
}

/// A Python under /tmp (a venv made there; here a link to the tests' venv) stays visible to
/// the tests, read-only, inside their private /tmp: a fixed /tmp path (DevEval's bplustree
/// writes one) is writable there and never reaches the host's.
#[test]
fn a_python_under_tmp_runs_the_tests() {
    if !sandbox_here("a_python_under_tmp_runs_the_tests") {
        return;
    }
    let venv = python().parent().unwrap().parent().unwrap().to_path_buf();
    let tmp = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let link = tmp.path().join("venv");
    std::os::unix::fs::symlink(&venv, &link).unwrap();
    let marker = tmp.path().join("marker");
    std::fs::write(&marker, "keep").unwrap();
    let fixed = format!("/tmp/repohop-fixed-{}", std::process::id());
    let body = format!(
        "open('{fixed}', 'w').write('x')\ntry:\n    open('{}', 'w').write('y')\nexcept OSError:\n    return a + b\n",
        marker.display()
    );
    let file = completions(tmp.path(), &[("calc.ops.add", &body)]);
    let run = tmp.path().join("run");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["eval", "--tasks"])
        .arg(fixture().join("tasks.jsonl"))
        .arg("--source-root")
        .arg(fixture().join("Source_Code"))
        .arg("--python")
        .arg(link.join("bin/python"))
        .arg("--completions")
        .arg(&file)
        .arg("--out")
        .arg(&run)
        .args(["--json", "--limit", "1", "--require-sandbox"])
        .output()
        .unwrap();
    assert_eq!(
        summary(&out)["passed"],
        1,
        "{}",
        result(&run, "calc.ops.add")
    );
    assert!(!Path::new(&fixed).exists(), "{fixed} reached the host");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "keep");
}

/// Case 1: the body, as root where the tests run as root, tries to unmount or remount what
/// keeps the source tree read-only (also from a nested user namespace of its own), then writes.
#[test]
fn unmounting_cannot_reopen_the_source_tree() {
    if !sandbox_here("unmounting_cannot_reopen_the_source_tree") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture_copy(tmp.path());
    let before = snapshot(&src);
    let p = src.join("Demo/calc");
    let body = format!(
        r#"import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
P = '{p}'
UID, GID = os.getuid(), os.getgid()
def attack():
    points = [P, os.path.dirname(P), os.path.dirname(os.path.dirname(P)), '/', '/tmp']
    try:
        points += [l.split()[4] for l in open('/proc/self/mountinfo')]
    except OSError:
        pass
    for m in points:
        libc.umount2(m.encode(), 2)
        libc.mount(None, m.encode(), None, 32 | 4096, None)
        libc.mount(None, m.encode(), None, 32, None)
    for path in [P + '/calc/ops.py', P + '/planted.py']:
        try:
            with open(path, 'a') as f:
                f.write('# owned\n')
        except OSError:
            pass
attack()
if libc.unshare(0x10000000 | 0x00020000) == 0:
    for name, text in [('setgroups', 'deny'), ('uid_map', '0 %d 1' % UID), ('gid_map', '0 %d 1' % GID)]:
        try:
            with open('/proc/self/' + name, 'w') as f:
                f.write(text)
        except OSError:
            pass
    libc.mount(b'none', b'/', None, 16384 | 262144, None)
    attack()
return a + b
"#,
        p = p.display()
    );
    let file = completions(tmp.path(), &[("calc.ops.add", &body)]);
    let run = tmp.path().join("run");
    let out = eval_command(
        &src,
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--require-sandbox",
        ],
    )
    .output()
    .unwrap();
    let s = summary(&out);
    assert_eq!(snapshot(&src), before, "the source tree changed");
    // The attack ran to its end (and found nothing to undo).
    assert_eq!(s["passed"], 1, "{}", result(&run, "calc.ops.add"));
}

/// Case 2: a body looks for the run directory (given its path, and through `/proc`) and
/// rewrites another task's failed result as passed.
#[test]
fn tests_cannot_rewrite_results_in_the_run_directory() {
    if !sandbox_here("tests_cannot_rewrite_results_in_the_run_directory") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let forge = format!(
        r#"import glob, json, os
def forge(d):
    # Only this test's own run: a forged result anywhere else on the machine would be real harm.
    if not os.path.realpath(d).startswith(os.path.realpath('{tmp}')):
        return
    for f in glob.glob(os.path.join(d, 'tasks', '*', 'result.json')):
        try:
            r = json.load(open(f))
        except (OSError, ValueError):
            continue
        r['outcome'] = 'pass'
        try:
            with open(f + '.x', 'w') as out:
                json.dump(r, out)
            os.replace(f + '.x', f)
        except OSError:
            try:
                with open(f, 'w') as out:
                    json.dump(r, out)
            except OSError:
                pass
forge('{run}')
for pid in os.listdir('/proc'):
    if not pid.isdigit():
        continue
    try:
        cwd = os.readlink('/proc/%s/cwd' % pid)
        args = open('/proc/%s/cmdline' % pid).read().split(chr(0))
    except OSError:
        continue
    forge(cwd)
    for i, a in enumerate(args[:-1]):
        if a == '--out':
            forge(os.path.join(cwd, args[i + 1]))
return [ratio(v, total) for v in values]
"#,
        run = run.display(),
        tmp = tmp.path().display()
    );
    let file = completions(
        tmp.path(),
        &[
            ("calc.ops.add", "return a - b\n"),
            ("calc.ops.scale", &forge),
        ],
    );
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "2",
            "--require-sandbox",
        ],
    ));
    assert_eq!(result(&run, "calc.ops.add")["outcome"], "fail");
    assert_eq!(result(&run, "calc.ops.scale")["outcome"], "pass");
    assert_eq!(s["passed"], 1, "{s}");
}

/// The command lines of live processes that contain `token`, killed on the way.
fn kill_survivors(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(token) && pid != std::process::id() as i32 {
            // SAFETY: plain syscall.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            found.push(cmdline);
        }
    }
    found
}

/// Case 3: a body starts a process in a session of its own, which a process-group kill misses.
#[test]
fn processes_in_new_sessions_die_with_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let token = format!("repohop-survivor-{}", std::process::id());
    let body = format!(
        "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{token}'], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\ntime.sleep(0.5)\nreturn a + b\n"
    );
    let file = completions(tmp.path(), &[("calc.ops.add", &body)]);
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "1"],
    ));
    assert_eq!(s["passed"], 1, "{}", result(&run, "calc.ops.add"));
    std::thread::sleep(Duration::from_millis(300));
    let survivors = kill_survivors(&token);
    assert!(survivors.is_empty(), "still running: {survivors:?}");
}

/// Case 4: the task's `completion_path` is a symlink to a file outside the project; the
/// evaluator must not write through it (nor copy it).
#[test]
fn completion_path_symlink_is_never_written_through() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture_copy(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let ops = src.join("Demo/calc/calc/ops.py");
    let victim = outside.join("ops.py");
    std::fs::rename(&ops, &victim).unwrap();
    std::os::unix::fs::symlink(&victim, &ops).unwrap();
    let before = std::fs::read(&victim).unwrap();
    let file = completions(
        tmp.path(),
        &[("calc.ops.add", "return a + b  # written through the link\n")],
    );
    let run = tmp.path().join("run");
    let out = eval_command(
        &src,
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "1"],
    )
    .output()
    .unwrap();
    summary(&out);
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        before,
        "written through the symlink"
    );
    let r = result(&run, "calc.ops.add");
    assert_eq!(r["outcome"], "error", "{r}");
    assert!(r["message"].as_str().unwrap().contains("symlink"), "{r}");
}

/// Case 5: a body signals its parent (the evaluator, before) and another kills itself; each
/// is that task's verdict, and the run finishes.
#[test]
fn a_test_signalling_its_parent_fails_only_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(
        tmp.path(),
        &[
            (
                "calc.ops.add",
                "import os, signal, time\nos.kill(os.getppid(), signal.SIGTERM)\nos.kill(os.getppid(), signal.SIGINT)\ntime.sleep(0.3)\nreturn a + b\n",
            ),
            (
                "calc.ops.scale",
                "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nreturn [ratio(v, total) for v in values]\n",
            ),
        ],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "2"],
    ));
    assert_eq!(s["total"], 2, "{s}");
    assert_eq!(result(&run, "calc.ops.add")["outcome"], "pass");
    let r = result(&run, "calc.ops.scale");
    assert_eq!(r["outcome"], "fail", "{r}");
    assert!(r["message"].as_str().unwrap().contains("signal 9"), "{r}");
}

/// A body that ends pytest with `os._exit(0)` after planting something at the report's name
/// (a FIFO, whose plain open would block the evaluator; a link to a forged passing report)
/// fails.
#[test]
fn a_report_planted_as_a_fifo_or_a_link_is_no_report() {
    let tmp = tempfile::tempdir().unwrap();
    let report = "os.path.join(os.environ['TMPDIR'], 'repohop-junit.xml')";
    let forged = "<testsuites><testsuite><testcase name='test_add' /></testsuite></testsuites>";
    let file = completions(
        tmp.path(),
        &[
            (
                "calc.ops.add",
                &format!("import os\nos.mkfifo({report})\nos._exit(0)\n"),
            ),
            (
                "calc.ops.scale",
                &format!(
                    "import os\nopen('forged.xml', 'w').write(\"{forged}\")\n\
                     os.symlink(os.path.abspath('forged.xml'), {report})\nos._exit(0)\n"
                ),
            ),
        ],
    );
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &["--completions", file.to_str().unwrap(), "--limit", "2"],
    ));
    assert_eq!(s["passed"], 0, "{s}");
    for ns in ["calc.ops.add", "calc.ops.scale"] {
        let r = result(&run, ns);
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .starts_with("no pytest report:"),
            "{r}"
        );
    }
}

/// Case 6, writing: with `--file-size-mb 4`, a body appending 64 MiB is stopped at 4 MiB.
#[test]
fn file_size_limit_stops_a_runaway_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let body = "chunk = b'x' * (1 << 20)\ntry:\n    with open('big.log', 'ab') as f:\n        for _ in range(64):\n            f.write(chunk)\n            f.flush()\nexcept OSError as e:\n    raise RuntimeError('write stopped: %s' % e)\nreturn a + b\n";
    let file = completions(tmp.path(), &[("calc.ops.add", body)]);
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--file-size-mb",
            "4",
        ],
    ));
    assert_eq!(s["passed"], 0);
    let r = result(&run, "calc.ops.add");
    assert_eq!(r["outcome"], "fail", "{r}");
    assert!(
        r["output_tail"]
            .as_str()
            .unwrap()
            .contains("File too large"),
        "{r}"
    );
}

/// Case 6, reading: with no file-size limit, a body appends 300 MiB to the evaluator's own
/// log; the evaluator reads only the tail (its peak memory stays far below the log's size).
#[test]
fn evaluator_reads_only_the_tail_of_a_huge_log() {
    let tmp = tempfile::tempdir().unwrap();
    let body = "import os\nchunk = b'x' * (1 << 20)\nfound = False\nfor name in os.listdir('/proc/self/fd'):\n    try:\n        target = os.readlink('/proc/self/fd/' + name)\n    except OSError:\n        continue\n    if target.endswith('pytest.log'):\n        for _ in range(300):\n            os.write(int(name), chunk)\n        found = True\n        break\nassert found, 'no log'\nreturn a + b\n";
    let file = completions(tmp.path(), &[("calc.ops.add", body)]);
    let run = tmp.path().join("run");
    let (out, peak_kib) = eval_measured(
        &fixture().join("Source_Code"),
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--file-size-mb",
            "0",
        ],
    );
    let s = summary(&out);
    let r = result(&run, "calc.ops.add");
    assert_eq!(s["passed"], 1, "{r}");
    assert!(r["output_tail"].as_str().unwrap().len() <= 2000, "{r}");
    assert!(
        peak_kib < 150 << 10,
        "the evaluator peaked at {} MiB reading a 300 MiB log",
        peak_kib >> 10
    );
}

/// A TCP server on 127.0.0.1 that counts connections, for at most two minutes.
struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, st) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !st.load(Ordering::SeqCst) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        h.fetch_add(1, Ordering::SeqCst);
                        let _ = s.write_all(b"hello");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Server { port, hits, stop }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn connect_body(port: u16) -> String {
    format!(
        "import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=5)\ns.close()\nreturn a + b\n"
    )
}

/// Case 7: a body connects to a server on the host's loopback.
#[test]
fn tests_cannot_reach_the_network() {
    if !sandbox_here("tests_cannot_reach_the_network") {
        return;
    }
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(tmp.path(), &[("calc.ops.add", &connect_body(server.port))]);
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--require-sandbox",
        ],
    ));
    let r = result(&run, "calc.ops.add");
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        0,
        "the server was reached: {r}"
    );
    assert_eq!(s["passed"], 0, "{r}");
}

/// `--allow-network` gives the host's network back (the same body then passes).
#[test]
fn allow_network_lets_tests_connect() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let file = completions(tmp.path(), &[("calc.ops.add", &connect_body(server.port))]);
    let run = tmp.path().join("run");
    let s = summary(&eval(
        &run,
        &[
            "--completions",
            file.to_str().unwrap(),
            "--limit",
            "1",
            "--allow-network",
        ],
    ));
    assert_eq!(s["passed"], 1, "{}", result(&run, "calc.ops.add"));
    assert!(server.hits.load(Ordering::SeqCst) >= 1);
}
