//! The DyRetriever prompt templates, in one place. Every call opens with the same system
//! message and target block so the prefix KV cache serves it from the second call on.

/// Shared opening of every call: the role and the target.
pub fn system(target: &str) -> String {
    format!(
        "You help a developer implement a target function in a repository by finding the \
         repository code that helps to write it. Answer exactly in the requested format.\n\n\
         Target function (signature and docstring):\n{target}"
    )
}

pub fn entry_files(tree: &str, max: usize) -> String {
    format!(
        "Repository structure:\n{tree}\n\nWhich source files (at most {max}) most likely hold \
         code the target uses or resembles? Answer with a JSON array of file paths."
    )
}

pub fn entry_functions(mapping: &str, max: usize) -> String {
    format!(
        "Functions of the related files (file: functions):\n{mapping}\n\nWhich functions (at \
         most {max}) should be inspected first to implement the target? Answer with a JSON \
         array of `file::function` entries."
    )
}

pub fn select(visited: &[String], candidates: &[String]) -> String {
    let seen = if visited.is_empty() {
        "none yet".to_string()
    } else {
        visited.join(", ")
    };
    format!(
        "Already inspected: {seen}.\nCandidates:\n{}\n\nWhich candidate is most likely to \
         help implement the target? Answer with one candidate exactly as written.",
        bullet(candidates)
    )
}

pub fn expand(path: &str, imports: &str, code: &str) -> String {
    format!(
        "Imports of {path}:\n{imports}\n\nFunction from {path}:\n{code}\n\nList the functions \
         and classes this function calls or imports inside its body, as written in the code \
         (e.g. `helper`, `self.method`, `module.func`). Leave out built-ins and standard-library \
         or third-party names. Answer with a JSON array of names."
    )
}

pub fn extract(trajectory: &[(String, String)], k: usize) -> String {
    let mut listing = String::new();
    for (name, code) in trajectory {
        listing.push_str(&format!("## {name}\n{}\n\n", code.trim_end()));
    }
    format!(
        "Inspected functions:\n\n{listing}Which of them (at most {k}) are the most useful to \
         implement the target? Answer with a JSON array of their names as headed above."
    )
}

fn bullet(items: &[String]) -> String {
    items.iter().map(|i| format!("- {i}\n")).collect()
}
