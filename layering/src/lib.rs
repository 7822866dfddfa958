//! A crate's files and the imports between them, read from the source text: every `use` tree and
//! every inline `crate::`/`self::`/`super::` path, resolved to the file it lands in. Two checks use
//! it: the sidecar's floors (`sidecar/src/layering.rs`) and "no files import each other in a circle"
//! for every crate of the workspace (`tests/no_circles.rs`).
//!
//! The files of a crate are those its root reaches through `mod` declarations, as rustc finds them;
//! modules declared under `#[cfg(test)]` and inline test modules are left out, since tests may reach
//! anywhere. A text reader, not a compiler: macros that write paths are not seen.

#![forbid(unsafe_code)]

mod circles;
mod paths;

pub use circles::circles;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate: `[]` is the root, `[a, b]` is `a::b`.
pub type Module = Vec<String>;

/// File -> the files it imports from (never itself).
pub type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// The files of one crate and the module paths each one's code names.
#[derive(Debug, Default)]
pub struct Crate {
    named: BTreeMap<Module, Vec<Module>>,
}

impl Crate {
    /// Reads the crate whose root file (`src/lib.rs`, `src/main.rs`, `src/bin/x.rs`) is `root`.
    pub fn read(root: &Path) -> std::io::Result<Crate> {
        let mut krate = Crate::default();
        let dir = root.parent().unwrap_or(Path::new(".")).to_owned();
        krate.read_file(root, &dir, Vec::new())?;
        Ok(krate)
    }

    /// `file` is module `module`; its child modules are files under `children_dir`.
    fn read_file(
        &mut self,
        file: &Path,
        children_dir: &Path,
        module: Module,
    ) -> std::io::Result<()> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
        let code = paths::code_of(&text);
        let children = paths::child_modules(&code);
        let names: BTreeSet<String> = children.iter().map(|c| c.name.clone()).collect();
        let named = paths::named_paths(&code)
            .iter()
            .filter_map(|p| paths::absolute(p, &module, &names))
            .collect();
        self.named.insert(module.clone(), named);
        for child in children {
            let (path, dir) = child_file(children_dir, &child)?;
            let mut m = module.clone();
            m.push(child.name);
            self.read_file(&path, &dir, m)?;
        }
        Ok(())
    }

    /// The files read, by module path.
    pub fn modules(&self) -> impl Iterator<Item = &Module> {
        self.named.keys()
    }

    /// Which file imports which.
    pub fn graph(&self) -> Graph {
        self.named
            .iter()
            .map(|(m, paths)| {
                let to = paths
                    .iter()
                    .filter_map(|p| self.file_of(p))
                    .filter(|t| *t != m)
                    .cloned()
                    .collect();
                (m.clone(), to)
            })
            .collect()
    }

    /// The file a module path lands in: its longest prefix that is a file.
    fn file_of(&self, path: &[String]) -> Option<&Module> {
        // Never the root: a path to an item of the root is most often a re-export of a child's.
        (1..=path.len())
            .rev()
            .find_map(|k| self.named.get_key_value(&path[..k]).map(|(key, _)| key))
    }
}

/// Where rustc finds child module `child` of a file whose children live in `dir`: `#[path]`, else
/// `dir/name.rs` (its children under `dir/name/`), else `dir/name/mod.rs`.
fn child_file(dir: &Path, child: &paths::Child) -> std::io::Result<(PathBuf, PathBuf)> {
    if let Some(p) = &child.path_attr {
        let path = dir.join(p);
        let children = path.with_extension("");
        return Ok((path, children));
    }
    let flat = dir.join(format!("{}.rs", child.name));
    if flat.is_file() {
        return Ok((flat, dir.join(&child.name)));
    }
    let nested = dir.join(&child.name).join("mod.rs");
    if nested.is_file() {
        return Ok((nested, dir.join(&child.name)));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "module `{}` declared, but neither {} nor {} exists",
            child.name,
            flat.display(),
            nested.display()
        ),
    ))
}

/// A module path as a reader would look for it: `lib.rs` (the root) or `a/b`.
pub fn show(module: &[String]) -> String {
    if module.is_empty() {
        "the crate root".to_owned()
    } else {
        module.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
    }

    #[test]
    fn files_are_found_through_mod_declarations_as_rustc_finds_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            &[
                ("lib.rs", "mod a;\npub mod b;\n#[cfg(test)]\nmod tests;\n"),
                ("a.rs", "mod inner;\nuse crate::b::B;\n"),
                ("a/inner.rs", "use super::super::b;\n"),
                ("b/mod.rs", "pub struct B;\n"),
                ("tests.rs", "use crate::a::Anything;\n"),
                ("unreached.rs", "use crate::a::X;\n"),
            ],
        );
        let k = Crate::read(&dir.path().join("lib.rs")).expect("reads");
        let shown: Vec<String> = k.modules().map(|m| show(m)).collect();
        assert_eq!(shown, ["the crate root", "a", "a/inner", "b"]);
        let g = k.graph();
        let m = |s: &str| s.split('/').map(str::to_owned).collect::<Module>();
        assert_eq!(g[&m("a")], BTreeSet::from([m("b")]));
        assert_eq!(g[&m("a/inner")], BTreeSet::from([m("b")]));
    }

    #[test]
    fn a_declared_module_without_a_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), &[("main.rs", "mod gone;\nfn main() {}\n")]);
        let e = Crate::read(&dir.path().join("main.rs")).expect_err("no gone.rs");
        assert!(e.to_string().contains("module `gone` declared"), "{e}");
    }
}
