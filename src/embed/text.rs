//! The one place that decides what text is embedded, so an experiment can change it.
//!
//! As in the DyCoder/RepoCoder setups: a function is embedded as its source text (signature,
//! docstring and body); a query (the function to generate) as its signature plus docstring.

/// Text embedded for a function: its source as written, trailing whitespace dropped.
pub fn function_text(source: &str) -> String {
    source.trim_end().to_string()
}

/// Text embedded for a query: the target's signature, then its docstring (if any) on the
/// following lines.
pub fn query_text(signature: &str, docstring: Option<&str>) -> String {
    let signature = signature.trim_end();
    match docstring.map(str::trim).filter(|d| !d.is_empty()) {
        Some(doc) => format!("{signature}\n{doc}"),
        None => signature.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_joins_signature_and_docstring() {
        assert_eq!(
            query_text("def add(a, b):", Some("  Add two numbers.  ")),
            "def add(a, b):\nAdd two numbers."
        );
        assert_eq!(query_text("def f():  ", Some("   ")), "def f():");
        assert_eq!(
            function_text("def f():\n    return 1\n\n"),
            "def f():\n    return 1"
        );
    }
}
