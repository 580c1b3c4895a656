//! The symbol table: definitions by qualified name and by simple name, modules by name. Built
//! once per repository; name resolution ([`super::symbols`]) reads it.

use super::ids::{ClassId, Def, FileId, FnId};
use super::model::{Class, Function};
use std::collections::{HashMap, HashSet};

#[derive(Debug, Default)]
pub struct SymbolTable {
    by_qualname: HashMap<String, Vec<Def>>,
    by_name: HashMap<String, Vec<Def>>,
    /// Python module → its file; Java package → its files.
    modules: HashMap<String, Vec<FileId>>,
    /// First segments of every module name: decides "in this repository" vs external.
    top_segments: HashSet<String>,
    /// Every segment of every module name: `a.b` can't be guessed as "method `b` of some
    /// object `a`" when `a` is the name of a module.
    module_segments: HashSet<String>,
}

impl SymbolTable {
    /// The table of a repository's definitions: its functions and classes with their ids, and
    /// the module (Python) or package (Java) of each parsed file.
    pub(crate) fn build<'a>(
        functions: impl Iterator<Item = (FnId, &'a Function)>,
        classes: impl Iterator<Item = (ClassId, &'a Class)>,
        modules: impl Iterator<Item = (FileId, &'a str)>,
    ) -> Self {
        let mut t = SymbolTable::default();
        for (id, f) in functions {
            t.by_qualname
                .entry(f.qualname.clone())
                .or_default()
                .push(Def::Function(id));
            t.by_name
                .entry(f.name.clone())
                .or_default()
                .push(Def::Function(id));
        }
        for (id, c) in classes {
            t.by_qualname
                .entry(c.qualname.clone())
                .or_default()
                .push(Def::Class(id));
            t.by_name
                .entry(c.name.clone())
                .or_default()
                .push(Def::Class(id));
        }
        for (file, module) in modules.filter(|(_, m)| !m.is_empty()) {
            t.modules.entry(module.to_string()).or_default().push(file);
            let top = module.split('.').next().unwrap_or_default();
            t.top_segments.insert(top.to_string());
            t.module_segments
                .extend(module.split('.').map(str::to_string));
        }
        t
    }

    /// Every definition with this qualified name (Java overloads share one).
    pub fn by_qualname(&self, qualname: &str) -> &[Def] {
        self.by_qualname
            .get(qualname)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Every definition with this simple name.
    pub fn by_name(&self, name: &str) -> &[Def] {
        self.by_name.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The file(s) of a Python module or Java package.
    pub fn module_files(&self, module: &str) -> &[FileId] {
        self.modules.get(module).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether a dotted module path starts inside this repository.
    pub fn is_internal(&self, module: &str) -> bool {
        self.top_segments
            .contains(module.split('.').next().unwrap_or_default())
    }

    /// Whether `name` is a segment of a module of this repository (`strutils` for
    /// `boltons.strutils`).
    pub fn is_module_segment(&self, name: &str) -> bool {
        self.module_segments.contains(name)
    }

    /// Every qualified name, for "did you mean" lists.
    pub fn qualnames(&self) -> impl Iterator<Item = &str> {
        self.by_qualname.keys().map(String::as_str)
    }
}
