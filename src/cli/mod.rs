//! One module per command family; each exposes its clap arguments and a `run`.

pub mod args;
pub mod bench;
pub mod bench_batch;
pub mod bench_lines;
pub mod check;
pub mod complete;
pub mod eval;
pub mod generate;
pub mod generate_many;
pub mod llm;
pub mod measure;
pub mod models;
pub mod repo;
pub mod search;

/// Process-wide settings for a command-line tool, made before anything else runs.
///
/// - A closed standard output (`repohop symbols … | head`) ends the process quietly, as it does
///   for other command-line tools (killed by SIGPIPE: status 141 in a shell), instead of a
///   panic in `println!`. Files are written atomically, so none is left half written.
/// - Errors shown to the user carry no backtrace: some libraries (candle) capture one into
///   their error messages whenever `RUST_BACKTRACE` is set. `RUST_BACKTRACE` still gives panics
///   their backtrace; `RUST_LIB_BACKTRACE=1` brings the library ones back when wanted.
pub fn quiet_process_setup() {
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // Single-threaded still: nothing reads the environment concurrently.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}
