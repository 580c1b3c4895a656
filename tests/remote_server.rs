//! The remote engine against a real OpenAI-compatible server: llama.cpp's `llama-server`
//! (built by `scripts/llama_server.sh`, found through REPOHOP_LLAMA_SERVER) serving the default
//! GGUF on a free local port. Without the binary the tests that need it skip; with
//! REPOHOP_REQUIRE_SERVER set they fail instead (`scripts/test.sh` sets both).

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use repohop::llm::{
    Constraint, Dialect, FinishReason, GenerateRequest, IdentPattern, Llm, Message, ModelFiles,
    Prompt, RemoteLlm, RemoteOptions,
};
use repohop::models::DEFAULT_GENERATOR;

/// The model id the server is told to list.
const SERVED: &str = "qwen2.5-coder-1.5b";

struct Server {
    url: String,
    _child: Child,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free local port");
    listener.local_addr().unwrap().port()
}

fn start(binary: &Path, extra: &[&str]) -> Server {
    let gguf = match repohop::llm::resolve(DEFAULT_GENERATOR)
        .expect("the default model (run `repohop models fetch`)")
    {
        ModelFiles::Gguf { model, .. } => model,
        other => panic!("the default model is not a GGUF: {other:?}"),
    };
    let port = free_port();
    let mut cmd = Command::new(binary);
    cmd.arg("-m")
        .arg(&gguf)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "-a",
            SERVED,
            "-c",
            "8192",
            "-np",
            "2",
            "-t",
            "2",
            "--no-webui",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: only an async-signal-safe call between fork and exec. The server dies with the
    // test process, which never drops its statics.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    // The death signal follows the thread that forked, so a thread that outlives every test
    // starts the server.
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(cmd.spawn());
        loop {
            std::thread::park();
        }
    });
    let child = receiver
        .recv()
        .expect("the starter thread answers")
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    loop {
        match ureq::get(&format!("{url}/health")).call() {
            Ok(_) => break,
            Err(e) if started.elapsed() > Duration::from_secs(180) => {
                panic!("llama-server did not become ready in 180 s: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
    Server { url, _child: child }
}

/// The shared server, or `None` (skip) when no binary is configured and none is required.
fn server() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let binary = std::env::var_os("REPOHOP_LLAMA_SERVER");
            match binary {
                Some(b) => Some(start(Path::new(&b), &[])),
                None if std::env::var_os("REPOHOP_REQUIRE_SERVER").is_some() => panic!(
                    "REPOHOP_REQUIRE_SERVER is set but REPOHOP_LLAMA_SERVER is not: build it with scripts/llama_server.sh"
                ),
                None => {
                    eprintln!("skipped: set REPOHOP_LLAMA_SERVER (scripts/llama_server.sh builds it)");
                    None
                }
            }
        })
        .as_ref()
}

fn connect(server: &Server, dialect: Option<Dialect>) -> RemoteLlm {
    let mut options = RemoteOptions::new(&format!("{}/v1", server.url));
    options.dialect = dialect;
    RemoteLlm::connect(&options).expect("connects to the local llama-server")
}

fn ask(user: &str, max_new_tokens: usize, constraint: Option<Constraint>) -> GenerateRequest {
    let mut req = GenerateRequest::new(Prompt::Chat(vec![Message::user(user)]));
    req.max_new_tokens = max_new_tokens;
    req.constraint = constraint;
    req
}

#[test]
fn the_server_is_detected_with_its_model_dialect_and_window() {
    let Some(server) = server() else { return };
    let llm = connect(server, None);
    assert_eq!(llm.name(), SERVED);
    assert_eq!(llm.dialect(), Dialect::Llamacpp);
    // 8,192 tokens over two slots.
    assert_eq!(llm.context_window(), 4096);
    let err = RemoteLlm::connect(&RemoteOptions {
        model: Some("gpt-4".into()),
        ..RemoteOptions::new(&server.url)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("\"gpt-4\" is not served") && err.contains(SERVED),
        "{err}"
    );
}

#[test]
fn choice_subset_and_identifier_arrays_come_back_valid() {
    let Some(server) = server() else { return };
    let mut llm = connect(server, None);
    let choice = llm
        .generate(&ask(
            "Which of these functions reads a JSON configuration file from disk? \
             Answer with the function name only.\n- render_html\n- load_config\n- send_email",
            16,
            Some(Constraint::OneOf(vec![
                "render_html".into(),
                "load_config".into(),
                "send_email".into(),
            ])),
        ))
        .unwrap();
    assert_eq!(choice.text, "load_config");
    assert_eq!(choice.finish_reason, FinishReason::Constraint);
    assert!(choice.prompt_tokens > 0 && choice.generated_tokens > 0);

    let items = vec!["len".to_string(), "print".into(), "parse_config".into()];
    let subset = llm
        .generate(&ask(
            "Which of these are Python built-in functions? Answer with a JSON array.\n\
             len, print, parse_config",
            32,
            Some(Constraint::Subset {
                items: items.clone(),
                max_items: 2,
            }),
        ))
        .unwrap();
    let picked: Vec<String> = serde_json::from_str(&subset.text).unwrap();
    assert!(
        (1..=2).contains(&picked.len()) && picked.iter().all(|p| items.contains(p)),
        "{:?}",
        subset.text
    );

    let callees = llm
        .generate(&ask(
            "List the functions this code calls, as a JSON array of names:\n\
             def main():\n    cfg = load_config('a.json')\n    run_server(cfg)",
            48,
            Some(Constraint::IdentArray {
                pattern: IdentPattern::default(),
                max_items: 4,
            }),
        ))
        .unwrap();
    let names: Vec<String> = serde_json::from_str(&callees.text).unwrap();
    assert!(names.iter().any(|n| n == "load_config"), "{names:?}");
}

#[test]
fn free_generation_counts_tokens_as_the_server_does_and_reuses_its_prefix() {
    let Some(server) = server() else { return };
    let mut llm = connect(server, None);
    let req = ask(
        "Write a Python function add(a, b) that returns the sum of a and b. Only code.",
        24,
        None,
    );
    let counted = llm.count_tokens(&req.prompt).unwrap();
    let first = llm.generate(&req).unwrap();
    let code: String = first.text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        code.contains("def add(a, b): return a + b"),
        "{:?}",
        first.text
    );
    assert_eq!(counted, first.prompt_tokens);
    assert!(first.generated_tokens > 0 && first.decode_ms > 0.0);
    let again = llm.generate(&req).unwrap();
    assert_eq!(again.text, first.text, "greedy answers repeat");
    assert!(
        again.cached_prompt_tokens > 0,
        "the server's prefix cache served the repeated prompt"
    );

    // Raw and fill-in-the-middle prompts go to /v1/completions, special tokens and all.
    let mut fim = GenerateRequest::new(Prompt::Fim {
        prefix: "def add(a, b):\n    return ".into(),
        suffix: "\n\n\ndef sub(a, b):\n    return a - b\n".into(),
    });
    fim.max_new_tokens = 16;
    fim.stop = vec!["\n".into()];
    let middle = llm.generate(&fim).unwrap();
    assert_eq!(middle.text.trim(), "a + b", "{:?}", middle.text);
}

#[test]
fn a_prompt_longer_than_the_window_is_a_clear_error() {
    let Some(server) = server() else { return };
    let mut llm = connect(server, None);
    let long = "word ".repeat(6000);
    let err = llm.generate(&ask(&long, 8, None)).unwrap_err().to_string();
    assert!(
        err.contains("does not fit the server's context window"),
        "{err}"
    );
}

/// A server that ignores the constraint (the `openai` dialect sends none) answers freely:
/// the answer is checked here, retried once, then refused with the answer named.
#[test]
fn an_answer_that_breaks_the_constraint_is_retried_then_refused() {
    let Some(server) = server() else { return };
    let mut llm = connect(server, Some(Dialect::Openai));
    let err = llm
        .generate(&ask(
            "Reply with the single word hello.",
            8,
            Some(Constraint::OneOf(vec!["zebra-1".into(), "zebra-2".into()])),
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("breaks the request's constraint (after one retry)"),
        "{err}"
    );
}

#[test]
fn a_server_that_is_down_is_a_clear_error() {
    let port = free_port();
    let err = RemoteLlm::connect(&RemoteOptions {
        retries: 1,
        ..RemoteOptions::new(&format!("http://127.0.0.1:{port}/v1"))
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("cannot reach the server") && err.contains(&port.to_string()),
        "{err}"
    );
}

/// The whole DyCoder pipeline through the command line against the server: a complete run
/// with its trace and the server's token accounting.
#[test]
fn generate_with_dycoder_runs_end_to_end_against_the_server() {
    let Some(server) = server() else { return };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dyproj");
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_repohop"))
        .arg("generate")
        .arg(&repo)
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["--target", "fspath.path.iteratepath", "--method", "dycoder"])
        .args(["--llm-endpoint", &format!("{}/v1", server.url), "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["model"], SERVED);
    assert!(run["function"]
        .as_str()
        .unwrap()
        .contains("def iteratepath("));
    let calls = run["trace"]["dyretriever"]["calls"].as_array().unwrap();
    assert!(calls.len() >= 2, "{run}");
    let tokens = &run["tokens"];
    assert!(
        tokens["dyretriever"]["in"].as_u64().unwrap() > 0,
        "{tokens}"
    );
    assert!(tokens["generation"]["in"].as_u64().unwrap() > 0, "{tokens}");
    // The calls of one task share the system prompt: the server served it from its cache.
    assert!(
        tokens["dyretriever"]["cached"].as_u64().unwrap() > 0,
        "{tokens}"
    );
}

/// An API key: refused without it (a clear error naming the flag), served with it.
#[test]
fn a_server_behind_an_api_key_needs_it() {
    // Skips, or fails under REPOHOP_REQUIRE_SERVER, as the shared server does.
    if server().is_none() {
        return;
    }
    let binary = std::env::var_os("REPOHOP_LLAMA_SERVER").expect("set when a server runs");
    let guarded = start(Path::new(&binary), &["--api-key", "sesame", "-c", "1024"]);
    let err = RemoteLlm::connect(&RemoteOptions::new(&guarded.url))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--llm-api-key-env"), "{err}");
    let mut llm = RemoteLlm::connect(&RemoteOptions {
        api_key: Some("sesame".into()),
        ..RemoteOptions::new(&guarded.url)
    })
    .unwrap();
    let yes = llm
        .generate(&ask(
            "Is 7 a prime number? Answer yes or no.",
            4,
            Some(Constraint::OneOf(vec!["yes".into(), "no".into()])),
        ))
        .unwrap();
    assert_eq!(yes.text, "yes");
}
