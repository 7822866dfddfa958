//! Every function on the sidecar's request path fits on a screen: no `fn` (free function, method or
//! trait default, `async` included, nested ones too) is longer than [`MAX_LINES`] lines in the
//! listener, dispatch, upstream, the manager's inbound, worker and delivery code, and the role
//! wiring. A long function there is a list of steps waiting to be named (issue 41, item 4).
//!
//! Lengths come from the parsed items' spans (`syn`, with `proc-macro2`'s `span-locations`): from
//! the line the signature starts on to the line of the body's closing brace, both counted; doc
//! comments and attributes above the signature are not the function's length. Test code is left out:
//! files named `tests.rs` and items under `#[cfg(test)]` or `#[test]`.

use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// The longest a request-path function may be, in lines.
const MAX_LINES: usize = 80;

/// The request path, relative to the sidecar crate: a directory is read with everything under it.
const REQUEST_PATH: &[&str] = &[
    "src/listener",
    "src/dispatch",
    "src/upstream",
    "src/manager/inbound.rs",
    "src/manager/worker.rs",
    "src/manager/delivery",
    "src/manager/durable",
    "src/roles",
];

/// One function: where it starts and how many lines it spans.
#[derive(Debug)]
struct Function {
    file: String,
    name: String,
    line: usize,
    lines: usize,
}

#[test]
fn request_path_functions_fit_on_a_screen() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sidecar");
    let mut long = Vec::new();
    let mut seen = 0;
    for root in REQUEST_PATH {
        for file in rust_files(&crate_dir.join(root)) {
            let relative = file
                .strip_prefix(&crate_dir)
                .expect("under the crate")
                .display()
                .to_string();
            let functions = functions_in(&file, &relative);
            seen += functions.len();
            long.extend(functions.into_iter().filter(|f| f.lines > MAX_LINES));
        }
    }
    assert!(
        seen > 100,
        "the walk found only {seen} functions: are the paths right?"
    );

    let problems: Vec<String> = long
        .iter()
        .map(|f| {
            format!(
                "{}:{} `{}` is {} lines (limit {MAX_LINES}): split it into named steps",
                f.file, f.line, f.name, f.lines
            )
        })
        .collect();
    assert!(
        problems.is_empty(),
        "request-path functions longer than {MAX_LINES} lines:\n{}",
        problems.join("\n")
    );
}

/// The `.rs` files at `path` (a file or a directory, walked), test files left out, sorted.
fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            if entry.file_name().is_some_and(|n| n != "tests") {
                files.extend(rust_files(&entry));
            }
        } else if entry.extension().is_some_and(|e| e == "rs")
            && entry.file_name().is_some_and(|n| n != "tests.rs")
        {
            files.push(entry);
        }
    }
    files
}

/// Every non-test function in one file, with its length.
fn functions_in(file: &Path, relative: &str) -> Vec<Function> {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("parse {}: {e}", file.display()));
    let mut finder = Finder {
        file: relative.to_string(),
        owner: Vec::new(),
        found: Vec::new(),
    };
    finder.visit_file(&parsed);
    finder.found
}

/// Walks a file's items, naming each function by the type or trait it belongs to.
struct Finder {
    file: String,
    owner: Vec<String>,
    found: Vec<Function>,
}

impl Finder {
    fn record(&mut self, sig: &syn::Signature, body: &syn::Block) {
        let start = sig.span().start().line;
        let end = body.brace_token.span.close().end().line;
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{}", sig.ident),
            None => sig.ident.to_string(),
        };
        self.found.push(Function {
            file: self.file.clone(),
            name,
            line: start,
            lines: end + 1 - start,
        });
    }
}

/// `#[cfg(test)]` or `#[test]` (any `cfg` that names `test`, e.g. `cfg(all(test, unix))`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.is_ident("test") || path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg")
            && attr
                .meta
                .require_list()
                .is_ok_and(|list| list.tokens.to_string().contains("test"))
    })
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test(&item.attrs) {
            self.record(&item.sig, &item.block);
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if is_test(&item.attrs) {
            return;
        }
        let ty = &item.self_ty;
        self.owner.push(quote_type(ty));
        syn::visit::visit_item_impl(self, item);
        self.owner.pop();
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test(&item.attrs) {
            self.record(&item.sig, &item.block);
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        if is_test(&item.attrs) {
            return;
        }
        self.owner.push(item.ident.to_string());
        syn::visit::visit_item_trait(self, item);
        self.owner.pop();
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let (false, Some(body)) = (is_test(&item.attrs), &item.default) {
            self.record(&item.sig, body);
            syn::visit::visit_trait_item_fn(self, item);
        }
    }
}

/// A type's last path segment (`Upstream` for `crate::upstream::Upstream<T>`), else its tokens.
fn quote_type(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        _ => "?".to_string(),
    }
}
