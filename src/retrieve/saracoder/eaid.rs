//! External-aware identifier disambiguation (SaraCoder 3.3): what the unfinished file's imports
//! bring in. Imports of this repository's definitions bring their entities (a function whole; a
//! class as its header, fields and method signatures); imports of a repository module bring the
//! module's top-level signatures; everything else (standard library, third party) goes to a
//! table of canonical name → the name the file uses. In import order; only imports above the
//! cursor count.

use serde::Serialize;

use crate::repo::{Def, ImportTarget, Repository, Unresolved};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entity {
    pub qualname: String,
    /// `function`, `class`, or `module`.
    pub kind: &'static str,
    pub path: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct External {
    /// `numpy`, `os.path.join`.
    pub canonical: String,
    /// What the file calls it (`np`, `join`).
    pub alias: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Eaid {
    pub entities: Vec<Entity>,
    pub external: Vec<External>,
}

impl Eaid {
    /// The prompt section: entities as code, then the external names as comments.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.entities {
            out.push_str(&format!("# {} ({})\n{}\n\n", e.qualname, e.path, e.text));
        }
        if !self.external.is_empty() {
            out.push_str("# external names:\n");
            for x in &self.external {
                out.push_str(&format!("#   {} -> {}\n", x.alias, x.canonical));
            }
        }
        out
    }
}

/// The entities and external names the imports of `path` above `line` (1-based) bring in.
pub fn eaid(repo: &Repository, path: &str, line: usize) -> Eaid {
    let mut out = Eaid::default();
    let Some(file) = repo.file_id(path) else {
        return out;
    };
    let resolver = repo.resolver();
    for (imp, target) in resolver.imports_of(file) {
        if imp.line >= line {
            continue;
        }
        match target {
            Ok(ImportTarget::Defs { defs }) => {
                for def in defs {
                    push_unique(&mut out.entities, entity(repo, def));
                }
            }
            Ok(ImportTarget::Module { files }) => {
                for f in files {
                    if let Some(e) = module_entity(repo, f) {
                        push_unique(&mut out.entities, e);
                    }
                }
            }
            Ok(ImportTarget::External { module }) | Err(Unresolved::External { module, .. }) => {
                if imp.is_wildcard {
                    continue;
                }
                let canonical = match &imp.name {
                    Some(n) => format!("{module}.{n}"),
                    None => module.clone(),
                };
                let alias = imp
                    .alias
                    .clone()
                    .or_else(|| imp.name.clone())
                    .unwrap_or(module);
                let x = External { canonical, alias };
                if !out.external.contains(&x) {
                    out.external.push(x);
                }
            }
            Err(_) => {}
        }
    }
    out
}

fn push_unique(entities: &mut Vec<Entity>, e: Entity) {
    if !entities.iter().any(|x| x.qualname == e.qualname) {
        entities.push(e);
    }
}

/// The text of a parsed file (borrowed: an entity needs only a slice of it).
fn source<'r>(repo: &'r Repository, path: &str) -> &'r str {
    repo.file_id(path)
        .and_then(|f| repo.file(f).text.as_deref())
        .unwrap_or_default()
}

fn entity(repo: &Repository, def: Def) -> Entity {
    match def {
        Def::Function(id) => {
            let f = repo.function(id);
            let text = source(repo, &f.path);
            Entity {
                qualname: f.qualname.clone(),
                kind: "function",
                path: f.path.clone(),
                text: text
                    .get(f.span.start_byte..f.span.end_byte)
                    .unwrap_or_default()
                    .to_string(),
            }
        }
        Def::Class(id) => {
            let c = repo.class(id);
            let text = source(repo, &c.path);
            let header = text
                .get(c.span.start_byte..)
                .and_then(|t| t.lines().next())
                .unwrap_or_default();
            let mut body = format!("{header}\n");
            for m in &c.members {
                body.push_str(&format!("    {m} = ...\n"));
            }
            for qualname in &c.methods {
                for def in repo.symbol_table().by_qualname(qualname) {
                    if let Def::Function(f) = def {
                        let f = repo.function(*f);
                        let sig = text
                            .get(f.signature.start_byte..f.signature.end_byte)
                            .unwrap_or_default();
                        body.push_str(&format!("    {} ...\n", sig.trim()));
                    }
                }
            }
            Entity {
                qualname: c.qualname.clone(),
                kind: "class",
                path: c.path.clone(),
                text: body.trim_end().to_string(),
            }
        }
    }
}

/// A module's top-level function signatures and class headers.
fn module_entity(repo: &Repository, file: crate::repo::FileId) -> Option<Entity> {
    let symbols = repo.file_symbols(file)?;
    let text = repo.file(file).text.as_deref().unwrap_or_default();
    let mut body = String::new();
    for c in &symbols.classes {
        if let Some(header) = text.get(c.span.start_byte..).and_then(|t| t.lines().next()) {
            body.push_str(header.trim_start());
            body.push_str(" ...\n");
        }
    }
    for f in symbols.functions.iter().filter(|f| f.class.is_none()) {
        if !f
            .qualname
            .ends_with(&format!("{}.{}", symbols.module, f.name))
        {
            continue;
        }
        let sig = text
            .get(f.signature.start_byte..f.signature.end_byte)
            .unwrap_or_default();
        body.push_str(&format!("{} ...\n", sig.trim()));
    }
    Some(Entity {
        qualname: symbols.module.clone(),
        kind: "module",
        path: symbols.path.clone(),
        text: body.trim_end().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_bring_entities_and_external_names() {
        let (_dir, repo) = crate::repo::temp_repository(&[
            ("pkg/__init__.py", ""),
            (
                "pkg/shapes.py",
                "class Box:\n    def __init__(self, w):\n        self.width = w\n    def area(self, scale=1):\n        return self.width * scale\n\ndef make(w):\n    return Box(w)\n",
            ),
            ("pkg/util.py", "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"),
            (
                "pkg/main.py",
                "import numpy as np\nfrom os.path import join\nfrom .shapes import Box, make\nfrom . import util\n\nb = Box(2)\nfrom .util import clamp\n",
            ),
        ]);
        let e = eaid(&repo, "pkg/main.py", 6);
        let names: Vec<(&str, &str)> = e
            .entities
            .iter()
            .map(|x| (x.qualname.as_str(), x.kind))
            .collect();
        // In import order; `clamp` is imported below the cursor.
        assert_eq!(
            names,
            [
                ("pkg.shapes.Box", "class"),
                ("pkg.shapes.make", "function"),
                ("pkg.util", "module")
            ]
        );
        assert_eq!(
            e.entities[0].text,
            "class Box:\n    width = ...\n    def __init__(self, w): ...\n    def area(self, scale=1): ..."
        );
        assert_eq!(e.entities[1].text, "def make(w):\n    return Box(w)");
        assert_eq!(e.entities[2].text, "def clamp(x, lo, hi): ...");
        assert_eq!(
            e.external,
            [
                External {
                    canonical: "numpy".into(),
                    alias: "np".into()
                },
                External {
                    canonical: "os.path.join".into(),
                    alias: "join".into()
                }
            ]
        );
        let text = e.render();
        assert!(text.contains("# pkg.shapes.make (pkg/shapes.py)\ndef make(w):"));
        assert!(text.ends_with("#   np -> numpy\n#   join -> os.path.join\n"));
    }
}
