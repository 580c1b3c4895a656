//! The repository tree as the LLM sees it: folders (first) and files in name order, optionally
//! the functions of each file, within a character budget. What does not fit is elided with a
//! line that says what was left out (`… 14 more files in foo/`), never cut silently.

use std::collections::BTreeMap;

/// One file to show, with the display names of its functions (`Class.method`).
#[derive(Debug, Clone)]
pub struct TreeFile {
    pub path: String,
    pub functions: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeOptions {
    /// Maximum characters of the rendering.
    pub budget: usize,
    /// List each file's functions under it.
    pub functions: bool,
}

impl Default for TreeOptions {
    fn default() -> Self {
        Self {
            budget: 8000,
            functions: false,
        }
    }
}

#[derive(Default)]
struct Dir<'a> {
    dirs: BTreeMap<&'a str, Dir<'a>>,
    files: BTreeMap<&'a str, &'a [String]>,
}

impl Dir<'_> {
    fn counts(&self) -> (usize, usize) {
        self.dirs
            .values()
            .fold((self.files.len(), self.dirs.len()), |(f, d), sub| {
                let (sf, sd) = sub.counts();
                (f + sf, d + sd)
            })
    }
}

/// Limits tried, from showing everything to showing almost nothing.
#[derive(Clone, Copy)]
struct Limits {
    depth: usize,
    files_per_dir: usize,
    functions_per_file: usize,
}

const DEPTHS: &[usize] = &[usize::MAX, 8, 6, 4, 3, 2, 1, 0];
const FILES: &[usize] = &[usize::MAX, 50, 20, 10, 5, 2, 0];
const FUNCTIONS: &[usize] = &[usize::MAX, 12, 6, 3, 0];

/// Renders the tree of `files` under a root named `root_name`, within `opts.budget` characters
/// (counted as `char`s).
pub fn render(root_name: &str, files: &[TreeFile], opts: TreeOptions) -> String {
    let mut root = Dir::default();
    for f in files {
        let mut parts: Vec<&str> = f.path.split('/').collect();
        let Some(name) = parts.pop() else { continue };
        let mut dir = &mut root;
        for p in parts {
            dir = dir.dirs.entry(p).or_default();
        }
        dir.files.insert(name, &f.functions);
    }
    let fn_steps: &[usize] = if opts.functions { FUNCTIONS } else { &[0] };
    // Prefer depth over files per folder over functions per file: structure first.
    for &depth in DEPTHS {
        for &files_per_dir in FILES {
            for &functions_per_file in fn_steps {
                let limits = Limits {
                    depth,
                    files_per_dir,
                    functions_per_file,
                };
                let mut out = Out {
                    text: String::new(),
                    chars: 0,
                    budget: opts.budget,
                };
                if out.line(0, &format!("{root_name}/"))
                    && render_dir(&root, 1, "", limits, &mut out)
                {
                    return out.text;
                }
            }
        }
    }
    // Not even the root's summary fits: give it anyway rather than nothing.
    format!("{root_name}/ … {} not shown\n", summary(&root))
}

/// `3 files in 2 folders`, `1 file`.
fn summary(dir: &Dir) -> String {
    let (nf, nd) = dir.counts();
    let files = plural(nf, "file");
    if nd == 0 {
        files
    } else {
        format!("{files} in {}", plural(nd, "folder"))
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

struct Out {
    text: String,
    chars: usize,
    budget: usize,
}

impl Out {
    /// Appends one line; false once the budget is exceeded.
    fn line(&mut self, indent: usize, s: &str) -> bool {
        self.chars += indent * 2 + s.chars().count() + 1;
        if self.chars > self.budget {
            return false;
        }
        for _ in 0..indent {
            self.text.push_str("  ");
        }
        self.text.push_str(s);
        self.text.push('\n');
        true
    }
}

fn render_dir(dir: &Dir, level: usize, prefix: &str, limits: Limits, out: &mut Out) -> bool {
    for (name, sub) in &dir.dirs {
        let path = format!("{prefix}{name}/");
        if level > limits.depth {
            if !out.line(level, &format!("{name}/ … {} not shown", summary(sub))) {
                return false;
            }
            continue;
        }
        if !out.line(level, &format!("{name}/")) || !render_dir(sub, level + 1, &path, limits, out)
        {
            return false;
        }
    }
    let shown = dir.files.len().min(limits.files_per_dir);
    for (name, functions) in dir.files.iter().take(shown) {
        if !out.line(level, name) {
            return false;
        }
        let n = functions.len().min(limits.functions_per_file);
        for f in &functions[..n] {
            if !out.line(level + 1, &format!("- {f}")) {
                return false;
            }
        }
        if n < functions.len() && limits.functions_per_file > 0 {
            let more = plural(functions.len() - n, "more function");
            if !out.line(level + 1, &format!("… {more} in {prefix}{name}")) {
                return false;
            }
        }
    }
    if shown < dir.files.len() {
        let more = plural(dir.files.len() - shown, "more file");
        let place = if prefix.is_empty() {
            "the root folder"
        } else {
            prefix
        };
        if !out.line(level, &format!("… {more} in {place}")) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[(&str, &[&str])]) -> Vec<TreeFile> {
        paths
            .iter()
            .map(|(p, f)| TreeFile {
                path: p.to_string(),
                functions: f.iter().map(|s| s.to_string()).collect(),
            })
            .collect()
    }

    #[test]
    fn full_tree_when_it_fits() {
        let fs = files(&[
            ("a/b.py", &["f", "C.m"]),
            ("a/c/d.py", &[]),
            ("setup.py", &[]),
        ]);
        let t = render(
            "r",
            &fs,
            TreeOptions {
                budget: 1000,
                functions: true,
            },
        );
        assert_eq!(
            t,
            "r/\n  a/\n    c/\n      d.py\n    b.py\n      - f\n      - C.m\n  setup.py\n"
        );
        let t = render(
            "r",
            &fs,
            TreeOptions {
                budget: 1000,
                functions: false,
            },
        );
        assert_eq!(t, "r/\n  a/\n    c/\n      d.py\n    b.py\n  setup.py\n");
    }

    #[test]
    fn elides_and_says_so() {
        let names: Vec<String> = (0..30).map(|i| format!("pkg/m{i:02}.py")).collect();
        let fs: Vec<TreeFile> = names
            .iter()
            .map(|p| TreeFile {
                path: p.clone(),
                functions: vec![],
            })
            .collect();
        let t = render(
            "r",
            &fs,
            TreeOptions {
                budget: 200,
                functions: false,
            },
        );
        assert!(t.chars().count() <= 200, "{t}");
        assert!(t.contains("    … 20 more files in pkg/\n"), "{t}");
        assert!(
            t.contains("m00.py") && t.contains("m09.py") && !t.contains("m10.py"),
            "{t}"
        );
    }

    #[test]
    fn deep_folders_are_summarised() {
        let fs = files(&[("a/b/c/d/e.py", &[]), ("a/x.py", &[])]);
        let t = render(
            "r",
            &fs,
            TreeOptions {
                budget: 45,
                functions: false,
            },
        );
        assert_eq!(t, "r/\n  a/ … 2 files in 3 folders not shown\n");
        let t = render(
            "r",
            &fs,
            TreeOptions {
                budget: 10,
                functions: false,
            },
        );
        assert_eq!(t, "r/ … 2 files in 4 folders not shown\n");
    }
}
