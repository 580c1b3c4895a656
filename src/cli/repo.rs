//! `repohop index | symbols | tree | show`: the repository model from the command line.

use anyhow::Result;
use clap::Args;
use repohop::repo::mask::MaskedView;
use repohop::repo::{resolve_target, Def, FnId, Repository, SymbolKind, TreeOptions, Unresolved};
use serde_json::json;

use super::args::{EmbedArgs, RepoArgs};

#[derive(Args, Debug)]
pub struct IndexArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Also build/update the embedding vectors of every function.
    #[arg(long)]
    pub embed: bool,
    #[command(flatten)]
    pub embed_opts: EmbedArgs,
    /// Print the counts and diagnostics as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SymbolsArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Only symbols of this repository-relative file.
    #[arg(long, value_name = "PATH")]
    pub file: Option<String>,
    /// Only symbols with this simple or qualified name.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Print a JSON array of {qualname, name, kind, path, start_line, end_line}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TreeArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Maximum characters; deep or large folders are elided with a note saying what was left out.
    #[arg(long, default_value_t = TreeOptions::default().budget)]
    pub budget: usize,
    /// List the functions of each file.
    #[arg(long)]
    pub functions: bool,
    /// Show test files too (the LLM does not see them by default).
    #[arg(long)]
    pub include_tests: bool,
}

#[derive(Args, Debug)]
// `--repo DIR` leaves the first positional empty.
#[command(allow_missing_positional = true)]
pub struct ShowArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// `path/to/file.py::Class.method[@LINE]` or a dotted name (`pkg.mod.Class.method`).
    pub target: String,
    /// Keep test files in the masked view.
    #[arg(long)]
    pub include_tests: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn index(args: IndexArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let s = repo.stats();
    let parse_errors: Vec<&str> = repo
        .files()
        .iter()
        .filter(|f| f.symbols.as_ref().is_some_and(|s| s.parse_errors > 0))
        .map(|f| f.path.as_str())
        .collect();
    let embeddings = if args.embed {
        Some(super::search::index_command(&repo, &args.embed_opts)?)
    } else {
        None
    };
    if args.json {
        let out = json!({
            "embeddings": embeddings,
            "root": repo.root(),
            "stats": s,
            "files_with_parse_errors": parse_errors,
            "diagnostics": repo.diagnostics(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "indexed {} in {:.3} s",
        repo.root().display(),
        s.elapsed_ms / 1e3
    );
    println!(
        "  files      {:>8}  ({} source: {} parsed, {} from cache; {} skipped)",
        s.files, s.source_files, s.parsed, s.cached, s.skipped
    );
    println!("  functions  {:>8}", s.functions);
    println!("  classes    {:>8}", s.classes);
    println!("  imports    {:>8}", s.imports);
    println!("  parse errors in {} file(s)", parse_errors.len());
    for p in &parse_errors {
        println!("    {p}");
    }
    if let Some(e) = &embeddings {
        println!(
            "  embeddings {:>8}  ({} embedded, {} reused; {} in {:.1} s)",
            e["rows"],
            e["embedded"],
            e["reused"],
            e["model"]["name"].as_str().unwrap_or("?"),
            e["seconds"].as_f64().unwrap_or(0.0)
        );
    }
    print_diagnostics(&repo);
    Ok(())
}

fn print_diagnostics(repo: &Repository) {
    let d = repo.diagnostics();
    if d.is_empty() {
        return;
    }
    println!("diagnostics ({}):", d.len());
    for x in d {
        println!("  {x}");
    }
}

fn kind_str(kind: SymbolKind) -> &'static str {
    match kind {
        SymbolKind::Function => "function",
        SymbolKind::Method => "method",
        SymbolKind::Class => "class",
    }
}

pub fn symbols(args: SymbolsArgs) -> Result<()> {
    let repo = args.repo.open()?;
    if let Some(f) = &args.file {
        if repo.file_id(f).is_none() {
            anyhow::bail!(
                "{f} is not an indexed file of {} (give a path relative to the repository root)",
                repo.root().display()
            );
        }
    }
    let name_ok = |simple: &str, qual: &str| {
        args.name
            .as_deref()
            .is_none_or(|n| n == simple || n == qual)
    };
    let file_ok = |path: &str| args.file.as_deref().is_none_or(|f| f == path);
    let mut rows = Vec::new();
    for c in repo.classes() {
        if name_ok(&c.name, &c.qualname) && file_ok(&c.path) {
            rows.push((
                c.path.clone(),
                c.span.start_line,
                c.qualname.clone(),
                c.name.clone(),
                SymbolKind::Class,
                c.span.end_line,
            ));
        }
    }
    for f in repo.functions() {
        if name_ok(&f.name, &f.qualname) && file_ok(&f.path) {
            rows.push((
                f.path.clone(),
                f.span.start_line,
                f.qualname.clone(),
                f.name.clone(),
                f.kind,
                f.span.end_line,
            ));
        }
    }
    rows.sort_by(|a, b| (&a.0, a.1, &a.2).cmp(&(&b.0, b.1, &b.2)));
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(path, start, qual, name, kind, end)| {
                json!({"qualname": qual, "name": name, "kind": kind_str(*kind), "path": path,
                       "start_line": start, "end_line": end})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for (path, start, qual, _, kind, end) in &rows {
        println!("{:<8} {qual}  {path}:{start}-{end}", kind_str(*kind));
    }
    if rows.is_empty() {
        eprintln!("no symbols match");
    }
    Ok(())
}

pub fn tree(args: TreeArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let view = MaskedView::new(&repo, None, args.include_tests);
    print!(
        "{}",
        view.tree(TreeOptions {
            budget: args.budget,
            functions: args.functions
        })
    );
    Ok(())
}

/// Where a call site's callee resolves, as a line for people or a JSON value.
fn resolution(view: &MaskedView, from: FnId, callee: &str) -> (String, serde_json::Value) {
    let repo_of = |d: Def| match d {
        Def::Function(id) => view
            .function(id)
            .map(|f| (f.qualname.clone(), f.path.clone(), f.span.start_line)),
        Def::Class(id) => view
            .class(id)
            .map(|c| (c.qualname.clone(), c.path.clone(), c.span.start_line)),
    };
    match view.resolver().resolve_name(from, callee) {
        Ok(defs) => {
            let found: Vec<_> = defs.into_iter().filter_map(repo_of).collect();
            let text = found
                .iter()
                .map(|(q, p, l)| format!("{q} ({p}:{l})"))
                .collect::<Vec<_>>()
                .join(", ");
            let js: Vec<_> = found
                .iter()
                .map(|(q, p, l)| json!({"qualname": q, "path": p, "start_line": l}))
                .collect();
            (text, json!({"resolves_to": js}))
        }
        Err(e) => {
            let js = match &e {
                Unresolved::External { module, .. } => {
                    json!({"unresolved": "external", "module": module})
                }
                Unresolved::Module { .. } => json!({"unresolved": "module"}),
                Unresolved::NotFound { .. } => json!({"unresolved": "not_found"}),
                Unresolved::Ambiguous { candidates, .. } => json!({"unresolved": "ambiguous",
                    "candidates": candidates.iter().filter_map(|d| repo_of(*d).map(|x| x.0)).collect::<Vec<_>>()}),
            };
            (format!("unresolved: {e}"), js)
        }
    }
}

pub fn show(args: ShowArgs) -> Result<()> {
    let repo = args.repo.open()?;
    let id = resolve_target(&repo, &args.target)?;
    let f = repo.function(id);
    let file = repo.function_file(id);
    let (definition, signature, body) = (
        repo.function_code(id).to_string(),
        repo.signature_text(id).to_string(),
        repo.body_text(id).to_string(),
    );
    // For display, the body from the start of its first line, so its indentation reads right.
    let body_start = repo
        .slice(file, 0, f.body.start_byte)
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let body_shown = repo.slice(file, body_start, f.body.end_byte).to_string();

    let view = MaskedView::new(&repo, Some(id), args.include_tests);
    let hidden_fns: Vec<String> = {
        let mut v: Vec<_> = view
            .hidden()
            .functions
            .iter()
            .map(|i| repo.function(*i).qualname.clone())
            .collect();
        v.sort();
        v
    };
    let excluded_tests = view.hidden().files.len();
    let leak = Leak::check(&repo, &view, id, &definition, &signature, &body);
    let calls: Vec<(usize, String, String, serde_json::Value)> = f
        .calls
        .iter()
        .map(|c| {
            let (t, j) = resolution(&view, id, &c.callee);
            (c.line, c.callee.clone(), t, j)
        })
        .collect();
    // Where the visible repository calls the target (what the generation prompt shows).
    let used_by = repohop::generate::usages::usages(&view, id);

    if args.json {
        let out = json!({
            "target": {
                "qualname": f.qualname, "kind": kind_str(f.kind), "path": f.path,
                "class": f.class, "params": f.params,
                "start_line": f.span.start_line, "end_line": f.span.end_line,
                "start_byte": f.span.start_byte, "end_byte": f.span.end_byte,
                "signature": signature, "docstring": f.docstring, "body": body,
                "calls": calls.iter().map(|(line, callee, _, j)| {
                    let mut o = json!({"callee": callee, "line": line});
                    if let (Some(o), Some(j)) = (o.as_object_mut(), j.as_object()) {
                        o.extend(j.clone());
                    }
                    o
                }).collect::<Vec<_>>(),
                "used_by": used_by,
            },
            "masked": {
                "path": f.path,
                "hidden_lines": [f.span.start_line, f.span.end_line],
                "hidden_bytes": f.span.end_byte - f.span.start_byte,
                "hidden_functions": hidden_fns,
                "excluded_test_files": excluded_tests,
                "include_tests": args.include_tests,
                "signature_absent": leak.signature_absent,
                "body_absent": leak.body_absent,
                "definition_absent": leak.definition_absent,
            }
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("target     {} ({})", f.qualname, kind_str(f.kind));
    println!(
        "location   {}:{}-{} (bytes {}..{})",
        f.path, f.span.start_line, f.span.end_line, f.span.start_byte, f.span.end_byte
    );
    println!("params     {}", f.params.join(", "));
    println!("\nsignature:\n{}", indent(&signature));
    match &f.docstring {
        Some(d) => println!("\ndocstring:\n{}", indent(d)),
        None => println!("\ndocstring: none"),
    }
    println!("\nbody:\n{}", indent(&body_shown));
    println!("\ncall sites ({}):", calls.len());
    for (line, callee, t, _) in &calls {
        println!("  {line:>5}  {callee}  → {t}");
    }
    println!(
        "\ncalled from ({}, at most {}):",
        used_by.len(),
        repohop::generate::usages::MAX_USAGES
    );
    for u in &used_by {
        println!("  {}:{}  in {}", u.path, u.line, u.caller);
    }
    println!("\nthe masked view hides:");
    println!(
        "  lines {}-{} of {} ({} bytes: decorators, signature, body)",
        f.span.start_line,
        f.span.end_line,
        f.path,
        f.span.end_byte - f.span.start_byte
    );
    println!("  definitions: {}", hidden_fns.join(", "));
    if args.include_tests {
        println!("  test files: kept (--include-tests)");
    } else {
        println!("  test files: {excluded_tests} excluded (--include-tests keeps them)");
    }
    println!(
        "  check: signature absent {}, body absent {}, whole definition absent {}",
        yes_no(leak.signature_absent),
        yes_no(leak.body_absent),
        yes_no(leak.definition_absent)
    );
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the target's text can be found through the view's accessors: the target file's text
/// and the code of the functions that enclose it (functions elsewhere share no bytes with it), the
/// function list and the file's symbols. Text identical to the target's may legitimately occur elsewhere in
/// the file (`return self._root`), so a needle leaks only if the view serves more copies of it than
/// the unmasked text holds outside the definition.
struct Leak {
    signature_absent: bool,
    body_absent: bool,
    definition_absent: bool,
}

impl Leak {
    fn check(
        repo: &Repository,
        view: &MaskedView,
        id: FnId,
        definition: &str,
        signature: &str,
        body: &str,
    ) -> Leak {
        let f = repo.function(id);
        // (unmasked text, masked text) pairs that contain the definition's bytes.
        let mut pairs: Vec<(String, String)> = Vec::new();
        if let (Some(orig), Some(masked)) = (repo.file_text(&f.path), view.file_text(&f.path)) {
            pairs.push((orig.to_string(), masked.to_string()));
        }
        for other in view.functions_in(&f.path) {
            let g = repo.function(other);
            if g.span.start_byte <= f.span.start_byte && g.span.end_byte >= f.span.end_byte {
                if let Some(code) = view.function_code(other) {
                    pairs.push((repo.function_code(other).to_string(), code.into_owned()));
                }
            }
        }
        let absent = |needle: &str| {
            let needle = needle.trim();
            needle.is_empty()
                || pairs.iter().all(|(orig, masked)| {
                    let total = orig.matches(needle).count();
                    let outside = total - definition.matches(needle).count().min(total);
                    masked.matches(needle).count() <= outside
                })
        };
        let listed = view.functions().any(|(other, _)| other == id);
        let in_symbols = view
            .file_symbols(&f.path)
            .is_some_and(|s| s.functions.iter().any(|g| g.span == f.span));
        Leak {
            signature_absent: absent(signature) && !listed && !in_symbols,
            body_absent: absent(body),
            definition_absent: absent(definition) && !listed && !in_symbols,
        }
    }
}
