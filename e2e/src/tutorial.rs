//! The user guide's tutorials as tests: their shell blocks, marked in the page, run as a reader would
//! paste them, so a renamed flag, field or file fails a test.
//!
//! A page under `docs/tutorials/` says where it runs in its first marker, `<!-- tutorial: local -->`
//! (against `switchyard up`, no cluster) or `<!-- tutorial: cluster -->` (against the e2e cluster), and
//! every ```` ```sh ```` block carries a marker on the line before it:
//!
//! - `<!-- tutorial: run -->` runs the block with `bash -euo pipefail` from the repository root and
//!   needs exit 0; `<!-- tutorial: run, expect "TEXT" -->` also needs TEXT in its output (repeatable:
//!   `expect "A" expect "B"`).
//! - `<!-- tutorial: start, ready "TEXT" -->` starts the block in the background (a long-running
//!   command such as `switchyard up`), waits until its output shows TEXT, and stops it (SIGTERM to its
//!   process group, then SIGKILL) when the page is done or fails.
//! - `<!-- tutorial: skip, REASON -->` leaves it out, with the reason in the page's source (a block
//!   needing a tool the tests do not have, or an install the e2e fixtures already made).
//!
//! An unmarked block fails the test: a command nobody runs is how docs rot.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where a tutorial runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Against `switchyard up` on this machine.
    Local,
    /// Against the e2e cluster.
    Cluster,
}

/// What to do with one shell block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Run { expect: Vec<String> },
    Start { ready: String },
    Skip,
}

/// One ```sh block of a page with its marker.
#[derive(Debug, Clone)]
pub struct Block {
    /// 1-based line of the block's opening fence.
    pub line: usize,
    pub action: Action,
    pub script: String,
}

/// A tutorial page, parsed.
#[derive(Debug)]
pub struct Page {
    pub path: PathBuf,
    pub place: Place,
    pub blocks: Vec<Block>,
}

const MARK: &str = "<!-- tutorial:";

/// The quoted values after each `word` in a marker: `expect "a" expect "b"` gives ["a", "b"].
fn quoted_after(marker: &str, word: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = marker;
    while let Some(at) = rest.find(word) {
        rest = rest[at + word.len()..].trim_start();
        let Some(body) = rest.strip_prefix('"') else {
            return Err(format!("`{word}` needs a quoted text: {marker}"));
        };
        let Some((text, after)) = unquote(body) else {
            return Err(format!("unclosed quote after `{word}`: {marker}"));
        };
        out.push(text);
        rest = after;
    }
    Ok(out)
}

/// The text up to the closing quote (`\"` is a quote inside it, `\\` a backslash), and what follows.
fn unquote(body: &str) -> Option<(String, &str)> {
    let mut text = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((text, &body[i + 1..])),
            '\\' => text.push(chars.next()?.1),
            c => text.push(c),
        }
    }
    None
}

fn action_of(marker: &str) -> Result<Action, String> {
    let body = marker
        .trim()
        .trim_start_matches(MARK)
        .trim_end_matches("-->")
        .trim();
    let verb = body.split([',', ' ']).next().unwrap_or("");
    match verb {
        "run" => Ok(Action::Run {
            expect: quoted_after(body, "expect")?,
        }),
        "start" => match quoted_after(body, "ready")?.as_slice() {
            [ready] => Ok(Action::Start {
                ready: ready.clone(),
            }),
            _ => Err(format!(
                "`start` needs exactly one `ready \"TEXT\"`: {marker}"
            )),
        },
        "skip" if body.len() > "skip,".len() => Ok(Action::Skip),
        "skip" => Err(format!("`skip` needs a reason: {marker}")),
        other => Err(format!("unknown tutorial marker `{other}`: {marker}")),
    }
}

/// Parses a page; errors name the file and line.
pub fn parse(path: &Path) -> Result<Page, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let at = |line: usize, why: String| format!("{}:{line}: {why}", path.display());
    let lines: Vec<&str> = text.lines().collect();
    let mut place = None;
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line == "<!-- tutorial: local -->" || line == "<!-- tutorial: cluster -->" {
            if place.is_some() {
                return Err(at(i + 1, "a second place marker".into()));
            }
            place = Some(if line.contains("local") {
                Place::Local
            } else {
                Place::Cluster
            });
            i += 1;
            continue;
        }
        let Some(fence) = line.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let opening = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            body.push(lines[i]);
            i += 1;
        }
        i += 1;
        if fence.split([',', ' ']).next() != Some("sh") {
            continue;
        }
        let marker = opening
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .filter(|m| m.starts_with(MARK))
            .ok_or_else(|| {
                at(
                    opening + 1,
                    "a ```sh block without a `<!-- tutorial: run|start|skip -->` marker on the line before"
                        .into(),
                )
            })?;
        blocks.push(Block {
            line: opening + 1,
            action: action_of(marker).map_err(|e| at(opening, e))?,
            script: body.join("\n"),
        });
    }
    let place = place.ok_or_else(|| {
        format!(
            "{}: no `<!-- tutorial: local -->` or `<!-- tutorial: cluster -->` marker",
            path.display()
        )
    })?;
    Ok(Page {
        path: path.to_path_buf(),
        place,
        blocks,
    })
}

/// Every tutorial page of the guide (`docs/tutorials/*.md`), parsed, in name order.
pub fn pages(docs: &Path) -> Result<Vec<Page>, String> {
    let dir = docs.join("tutorials");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files.iter().map(|f| parse(f)).collect()
}

/// How the blocks of a page run: folder, environment, and the time each may take.
pub struct Runner {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    /// Prepended to PATH (the built binaries, `.tools/bin`).
    pub path: Vec<PathBuf>,
    pub block_limit: Duration,
    pub ready_limit: Duration,
}

/// A block started in the background; stopped with its process group on drop.
struct Background {
    child: Child,
    what: String,
}

impl Drop for Background {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        // `-s SIG --` before the group: procps-ng's kill takes a bare `-PGID` after `-TERM` for
        // another option and signals nothing (exit 0 all the same). Its complaint about a group that
        // is already gone (a block that ended with everything it started) is not news.
        let _ = Command::new("kill")
            .args(["-s", "TERM", "--", &group])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "[tutorial] {} did not stop on SIGTERM; killing it",
            self.what
        );
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

/// Reads a pipe into the channel, line by line, until it closes.
fn forward(pipe: impl Read + Send + 'static, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

impl Runner {
    fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", script])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut path: Vec<PathBuf> = self.path.clone();
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        if let Ok(joined) = std::env::join_paths(path) {
            cmd.env("PATH", joined);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // Its own process group, so a stop reaches what it started.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }

    fn spawn(&self, script: &str) -> Result<(Child, mpsc::Receiver<String>), String> {
        let mut child = self
            .command(script)
            .spawn()
            .map_err(|e| format!("cannot start bash: {e}"))?;
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            forward(out, tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            forward(err, tx);
        }
        Ok((child, rx))
    }

    /// Runs one block to its end; its output, or why it failed.
    fn run(&self, script: &str, expect: &[String]) -> Result<String, String> {
        let (child, rx) = self.spawn(script)?;
        // Stopped with its group if it overruns or this returns early.
        let mut bg = Background {
            child,
            what: "block".into(),
        };
        let deadline = Instant::now() + self.block_limit;
        let mut out = String::new();
        let status = loop {
            while let Ok(line) = rx.try_recv() {
                out.push_str(&line);
                out.push('\n');
            }
            match bg.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    return Err(format!(
                        "did not finish within {:?}; output:\n{out}",
                        self.block_limit
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("waiting for bash: {e}")),
            }
        };
        // The pipes close once every process of the block is gone.
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
            out.push_str(&line);
            out.push('\n');
        }
        if !status.success() {
            return Err(format!("exited with {status}; output:\n{out}"));
        }
        for text in expect {
            if !out.contains(text.as_str()) {
                return Err(format!("output lacks {text:?}:\n{out}"));
            }
        }
        Ok(out)
    }

    /// Starts a block in the background and waits until its output shows `ready`.
    fn start(&self, script: &str, ready: &str) -> Result<Background, String> {
        let (child, rx) = self.spawn(script)?;
        let mut bg = Background {
            child,
            what: script.lines().next().unwrap_or("").to_string(),
        };
        let deadline = Instant::now() + self.ready_limit;
        let mut out = String::new();
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let seen = line.contains(ready);
                    out.push_str(&line);
                    out.push('\n');
                    if seen {
                        // Keep draining its output, so it never blocks on a full pipe.
                        std::thread::spawn(move || while rx.recv().is_ok() {});
                        return Ok(bg);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = bg.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!("ended ({status}) before {ready:?}; output:\n{out}"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Ok(Some(status)) = bg.child.try_wait() {
                return Err(format!("ended ({status}) before {ready:?}; output:\n{out}"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no {ready:?} within {:?}; output:\n{out}",
                    self.ready_limit
                ));
            }
        }
    }

    /// Runs every block of the page in order; background blocks are stopped when it returns. The error
    /// names the page, the block's line and its script.
    pub fn run_page(&self, page: &Page) -> Result<usize, String> {
        let mut background = Vec::new();
        let mut ran = 0;
        for block in &page.blocks {
            let at = || format!("{}:{}", page.path.display(), block.line);
            eprintln!("[tutorial] {} {:?}", at(), block.action);
            let result = match &block.action {
                Action::Skip => continue,
                Action::Run { expect } => self.run(&block.script, expect).map(|_| ()),
                Action::Start { ready } => self.start(&block.script, ready).map(|bg| {
                    background.push(bg);
                }),
            };
            result.map_err(|e| format!("{}: the block\n{}\n{e}", at(), block.script))?;
            ran += 1;
        }
        // Stopped last started first, as a reader would Ctrl-C them.
        while background.pop().is_some() {}
        Ok(ran)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_parse_with_their_texts() {
        assert_eq!(
            action_of(r#"<!-- tutorial: run, expect "200 OK" expect "ok" -->"#),
            Ok(Action::Run {
                expect: vec!["200 OK".into(), "ok".into()]
            })
        );
        assert_eq!(
            action_of(r#"<!-- tutorial: start, ready "ready:" -->"#),
            Ok(Action::Start {
                ready: "ready:".into()
            })
        );
        assert_eq!(
            action_of("<!-- tutorial: skip, needs websocat -->"),
            Ok(Action::Skip)
        );
        assert_eq!(
            action_of(r#"<!-- tutorial: run, expect "\"value\":1" expect "a\\b" -->"#),
            Ok(Action::Run {
                expect: vec![r#""value":1"#.into(), r"a\b".into()]
            })
        );
        assert!(action_of(r#"<!-- tutorial: run, expect "open -->"#).is_err());
        assert!(action_of("<!-- tutorial: skip -->").is_err());
        assert!(action_of("<!-- tutorial: start -->").is_err());
        assert!(action_of("<!-- tutorial: runn -->").is_err());
    }

    #[test]
    fn an_unmarked_block_is_refused_naming_its_line() {
        let dir = tempfile_dir();
        let page = dir.join("p.md");
        std::fs::write(&page, "<!-- tutorial: local -->\n\ntext\n```sh\nls\n```\n").expect("write");
        let err = parse(&page).expect_err("unmarked");
        assert!(err.contains("p.md:4"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tutorial-parse-{}", crate::unique_suffix()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }
}
