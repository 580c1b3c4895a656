//! A file's statement outline: the module-level statements and those of class bodies, with
//! their line ranges, so that a prompt can show a file's skeleton (imports, constants, class
//! headers, signatures) without its bodies.

use tree_sitter::Node;

use super::end_line;
use crate::repo::model::Lang;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StmtKind {
    /// `import` / `from … import`, Java `package` and `import`.
    Import,
    Class,
    /// A function or method (Java constructor included).
    Def,
    /// Anything else: assignments, fields, `if`/`try` blocks, expressions.
    Other,
}

/// One statement of a module or class body. Lines are 1-based and inclusive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stmt {
    pub kind: StmtKind,
    /// 0 at module level, 1 in a top-level class body, and so on.
    pub depth: usize,
    pub start_line: usize,
    pub end_line: usize,
    /// Last line of a definition's header (decorators and signature); `end_line` otherwise.
    pub header_end: usize,
    /// First line of a definition's docstring (Python) or Javadoc (Java), when it has one.
    pub doc_line: Option<usize>,
    /// A definition's name.
    pub name: Option<String>,
}

/// The outline of `source`; empty when tree-sitter returns no tree.
pub fn outline(lang: Lang, source: &str) -> Vec<Stmt> {
    let tree = super::parse_tree(lang, source);
    let Some(tree) = tree else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match lang {
        Lang::Python => python_block(tree.root_node(), source, 0, &mut out),
        Lang::Java => java_block(tree.root_node(), source, 0, &mut out),
    }
    out
}

fn line(node: Node) -> usize {
    node.start_position().row + 1
}

fn name_of(node: Node, source: &str) -> Option<String> {
    node.child_by_field_name("name")
        .map(|n| super::text(source, n).to_string())
}

fn python_block(block: Node, source: &str, depth: usize, out: &mut Vec<Stmt>) {
    let mut cursor = block.walk();
    for node in block.named_children(&mut cursor) {
        // A decorated definition starts at its first decorator.
        let def = if node.kind() == "decorated_definition" {
            node.child_by_field_name("definition").unwrap_or(node)
        } else {
            node
        };
        let kind = match def.kind() {
            "import_statement" | "import_from_statement" | "future_import_statement" => {
                StmtKind::Import
            }
            "class_definition" => StmtKind::Class,
            "function_definition" => StmtKind::Def,
            "comment" => continue,
            _ => StmtKind::Other,
        };
        let mut stmt = Stmt {
            kind,
            depth,
            start_line: line(node),
            end_line: end_line(node),
            header_end: end_line(node),
            doc_line: None,
            name: None,
        };
        if matches!(kind, StmtKind::Class | StmtKind::Def) {
            stmt.name = name_of(def, source);
            if let Some(body) = def.child_by_field_name("body") {
                stmt.header_end = header_end(def, body);
                stmt.doc_line = body
                    .named_child(0)
                    .filter(|s| {
                        s.kind() == "expression_statement"
                            && s.named_child(0).is_some_and(|e| e.kind() == "string")
                    })
                    .map(line);
                out.push(stmt);
                if kind == StmtKind::Class {
                    python_block(body, source, depth + 1, out);
                }
                continue;
            }
        }
        out.push(stmt);
    }
}

/// The header's last line: the line before the body, or the body's own line for a one-liner
/// (`def f(): pass`).
fn header_end(def: Node, body: Node) -> usize {
    let params_end = def
        .child_by_field_name("return_type")
        .or_else(|| def.child_by_field_name("parameters"))
        .or_else(|| def.child_by_field_name("superclasses"))
        .or_else(|| def.child_by_field_name("name"))
        .map(end_line)
        .unwrap_or_else(|| line(def));
    params_end.max(line(def)).min(end_line(body))
}

fn java_block(block: Node, source: &str, depth: usize, out: &mut Vec<Stmt>) {
    let mut cursor = block.walk();
    let children: Vec<Node> = block.named_children(&mut cursor).collect();
    for (i, node) in children.iter().enumerate() {
        let kind = match node.kind() {
            "package_declaration" | "import_declaration" => StmtKind::Import,
            "class_declaration"
            | "interface_declaration"
            | "enum_declaration"
            | "record_declaration"
            | "annotation_type_declaration" => StmtKind::Class,
            "method_declaration"
            | "constructor_declaration"
            | "compact_constructor_declaration" => StmtKind::Def,
            "line_comment" | "block_comment" => continue,
            _ => StmtKind::Other,
        };
        // A Javadoc is the block comment right before the declaration.
        let doc_line = i
            .checked_sub(1)
            .map(|j| children[j])
            .filter(|p| p.kind() == "block_comment" && super::text(source, *p).starts_with("/**"))
            .map(line);
        let body = node.child_by_field_name("body");
        let start = doc_line.unwrap_or_else(|| line(*node));
        let header_end = match body {
            Some(b) if kind != StmtKind::Other => line(b),
            _ => end_line(*node),
        };
        out.push(Stmt {
            kind,
            depth,
            start_line: start,
            end_line: end_line(*node),
            header_end,
            doc_line,
            name: name_of(*node, source),
        });
        if let (StmtKind::Class, Some(body)) = (kind, body) {
            java_block(body, source, depth + 1, out);
        }
    }
}

/// A name that code uses: `self.x` / `this.x` reads are marked as attributes of the enclosing
/// object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeName {
    pub on_self: bool,
    pub name: String,
    /// Its line in `source` (0-based).
    pub row: usize,
}

/// The identifiers of `source` as code: from the parse tree, so names in comments, docstrings
/// and string literals (and keywords) are not among them; f-string interpolations are code.
pub fn code_names(lang: Lang, source: &str) -> Vec<CodeName> {
    let tree = super::parse_tree(lang, source);
    let Some(tree) = tree else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        if node.kind() == "identifier" {
            let parent = node.parent();
            let receiver = parent.and_then(|p| match p.kind() {
                "attribute" if p.child_by_field_name("attribute") == Some(node) => {
                    p.child_by_field_name("object")
                }
                "field_access" if p.child_by_field_name("field") == Some(node) => {
                    p.child_by_field_name("object")
                }
                "method_invocation" if p.child_by_field_name("name") == Some(node) => {
                    p.child_by_field_name("object")
                }
                _ => None,
            });
            let on_self =
                receiver.is_some_and(|r| r.kind() == "this" || super::text(source, r) == "self");
            // `obj.attr` with another receiver names an attribute of something else.
            if receiver.is_none() || on_self {
                out.push(CodeName {
                    on_self,
                    name: super::text(source, node).to_string(),
                    row: node.start_position().row,
                });
            }
        }
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        stack.extend(children.into_iter().rev());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(stmts: &[Stmt]) -> Vec<(StmtKind, usize, usize, usize, usize)> {
        stmts
            .iter()
            .map(|s| (s.kind, s.depth, s.start_line, s.end_line, s.header_end))
            .collect()
    }

    #[test]
    fn python_outline_has_module_and_class_statements_with_headers() {
        let src = "import os\nfrom a import (\n    b,\n)\n\nX = 1\n\n@dec\nclass C(Base):\n    \
                   \"\"\"Doc.\"\"\"\n    y = 2\n\n    def m(self,\n          a):\n        \"\"\"M.\"\"\"\n        \
                   return a\n\n# note\ndef f(): pass\n";
        let o = outline(Lang::Python, src);
        use StmtKind::*;
        assert_eq!(
            kinds(&o),
            vec![
                (Import, 0, 1, 1, 1),
                (Import, 0, 2, 4, 4),
                (Other, 0, 6, 6, 6),
                (Class, 0, 8, 16, 9),
                (Other, 1, 10, 10, 10),
                (Other, 1, 11, 11, 11),
                (Def, 1, 13, 16, 14),
                (Def, 0, 19, 19, 19),
            ]
        );
        assert_eq!(o[3].doc_line, Some(10));
        assert_eq!(o[6].doc_line, Some(15));
        assert_eq!(o[6].name.as_deref(), Some("m"));
    }

    #[test]
    fn java_outline_has_imports_fields_and_method_headers_with_javadoc() {
        let src = "package p;\nimport java.util.List;\n\npublic class A {\n    private int n;\n\n    \
                   /** Size. */\n    public int size(\n        int k) {\n        return n;\n    }\n}\n";
        let o = outline(Lang::Java, src);
        use StmtKind::*;
        assert_eq!(
            kinds(&o),
            vec![
                (Import, 0, 1, 1, 1),
                (Import, 0, 2, 2, 2),
                (Class, 0, 4, 12, 4),
                (Other, 1, 5, 5, 5),
                (Def, 1, 7, 11, 9),
            ]
        );
        assert_eq!(o[4].doc_line, Some(7));
    }

    #[test]
    fn code_names_skip_comments_strings_and_other_objects_attributes() {
        let src = "def f(a):\n    \"\"\"Uses def and format.\"\"\"\n    # helper here\n    \
                   x = g(a, 'literal %s') + f'{y}'\n    return self.size + os.path.sep\n";
        let names: Vec<(bool, String)> = code_names(Lang::Python, src)
            .into_iter()
            .map(|n| (n.on_self, n.name))
            .collect();
        let plain = |n: &str| (false, n.to_string());
        for want in [
            plain("f"),
            plain("a"),
            plain("x"),
            plain("g"),
            plain("y"),
            plain("os"),
        ] {
            assert!(names.contains(&want), "{want:?} not in {names:?}");
        }
        assert!(names.contains(&(true, "size".to_string())), "{names:?}");
        for absent in ["helper", "literal", "def", "format", "Uses", "path", "sep"] {
            assert!(
                !names.iter().any(|(_, n)| n == absent),
                "{absent} in {names:?}"
            );
        }
        let java = code_names(Lang::Java, "int n() { return this.count + other.size; }");
        assert!(
            java.iter().any(|n| n.on_self && n.name == "count"),
            "{java:?}"
        );
        assert!(!java.iter().any(|n| n.name == "size"), "{java:?}");
    }
}
