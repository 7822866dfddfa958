//! The user guide (`book.toml`, pages in `docs/`) builds with mdBook and its link checker
//! (mdbook-linkcheck2, built by `e2e/cluster/build-mdbook`) with no broken link between pages or to a
//! heading; every page of `docs/` is in its table of contents (so no page is left out of the book); and
//! links to the repository's own files (GitHub URLs, which the link checker does not follow offline) name
//! files that exist in this checkout. Needs no cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use switchyard_e2e::repo_root;

/// GitHub URLs of this repository's files, as the guide writes them.
const REPO_URL: &str = "https://github.com/switchyard-dev/switchyard/";

/// The folder holding `mdbook` and `mdbook-linkcheck2` (built on first use, then cached).
fn mdbook_bin_dir() -> PathBuf {
    let script = repo_root().join("e2e/cluster/build-mdbook");
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `mdbook build` of the book at `root` into `dest`, with the link checker on PATH.
fn build(root: &Path, dest: &Path) -> Output {
    let bin = mdbook_bin_dir();
    let mut path = vec![bin.clone()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    Command::new(bin.join("mdbook"))
        .arg("build")
        .arg("--dest-dir")
        .arg(dest)
        .arg(root)
        .env(
            "PATH",
            std::env::join_paths(path).expect("PATH entries join"),
        )
        .output()
        .expect("run mdbook")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_guide_builds_with_no_broken_link() {
    let dest = tempfile::tempdir().expect("tempdir");
    let out = build(&repo_root(), dest.path());
    assert!(out.status.success(), "mdbook build failed:\n{}", text(&out));
    for page in [
        "html/index.html",
        "html/tutorials/local-quickstart.html",
        "html/reference/crds.html",
    ] {
        assert!(dest.path().join(page).is_file(), "{page} not built");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The check above can fail: the same book with one link to a page that does not exist is refused,
/// naming the link.
#[test]
fn a_broken_link_fails_the_build() {
    let copy = tempfile::tempdir().expect("tempdir");
    std::fs::copy(repo_root().join("book.toml"), copy.path().join("book.toml")).expect("copy");
    copy_dir(&repo_root().join("docs"), &copy.path().join("docs"));
    let page = copy.path().join("docs/concepts.md");
    let mut body = std::fs::read_to_string(&page).expect("read");
    body.push_str("\nSee [the missing page](no-such-page.md).\n");
    std::fs::write(&page, body).expect("write");
    let dest = tempfile::tempdir().expect("tempdir");
    let out = build(copy.path(), dest.path());
    assert!(
        !out.status.success(),
        "a broken link passed:\n{}",
        text(&out)
    );
    assert!(text(&out).contains("no-such-page.md"), "{}", text(&out));
}

/// Markdown files under `dir`, relative to it.
fn pages(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read docs").flatten() {
        let path = entry.path();
        if path.is_dir() {
            pages(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            let rel = path.strip_prefix(base).expect("under docs");
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// The link targets of a markdown text (`](target)`), leaving out HTML comments.
fn link_targets(text: &str) -> Vec<String> {
    let mut visible = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        visible.push_str(&rest[..start]);
        rest = rest[start..]
            .find("-->")
            .map_or("", |end| &rest[start + end + 3..]);
    }
    visible.push_str(rest);
    visible
        .split("](")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_page_of_docs_is_in_the_table_of_contents() {
    let docs = repo_root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let listed = link_targets(&summary);
    let mut all = Vec::new();
    pages(&docs, &docs, &mut all);
    let missing: Vec<_> = all
        .iter()
        .filter(|p| *p != "SUMMARY.md" && !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages of docs/ not in docs/SUMMARY.md (the book would leave them out): {missing:?}"
    );
}

#[test]
fn links_to_the_repositorys_files_name_files_that_exist() {
    let docs = repo_root().join("docs");
    let mut all = Vec::new();
    pages(&docs, &docs, &mut all);
    let mut broken = Vec::new();
    let mut seen = 0;
    for page in &all {
        let text = std::fs::read_to_string(docs.join(page)).expect("read page");
        for link in text.split(REPO_URL).skip(1) {
            // blob/main/PATH, tree/main/PATH or edit/main/PATH, up to the end of the link.
            let end = link
                .find([')', ' ', '#', '"', '>', '`', '\n'])
                .unwrap_or(link.len());
            let link = &link[..end];
            let Some(path) = ["blob/main/", "tree/main/", "edit/main/"]
                .iter()
                .find_map(|p| link.strip_prefix(p))
            else {
                continue;
            };
            if path.contains('{') {
                continue; // a template, e.g. book.toml's edit URL
            }
            seen += 1;
            if !repo_root().join(path).exists() {
                broken.push(format!("{page}: {path}"));
            }
        }
    }
    assert!(seen > 0, "no link to the repository's files found");
    assert!(
        broken.is_empty(),
        "links to files that do not exist: {broken:?}"
    );
}
