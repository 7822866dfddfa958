//! Reloads key material when its mounted files change (the JWT key, the API keys, the edge's TLS
//! certificate and key), with no restart.
//!
//! Polled, not watched: every [`EVERY`] one thread stats each file (following symlinks) and reads
//! and compares the contents only when a file's identity changed (device, inode, size, times).
//! Kubernetes updates a mounted Secret by writing a new timestamped folder and swapping the `..data`
//! symlink; through the symlink that shows as a new inode, so the swap is seen whole, never half
//! written. inotify would be quicker to notice, but a watch on the file follows the old inode
//! away at the swap (the directory must be watched and `..data` renames filtered), it does not
//! work on every volume type, and inotify instances are a per-user limit that every container on a
//! node running as the same uid shares. The kubelet itself refreshes a Secret volume only every
//! minute or so, so a second of polling adds nothing a user can see, and a few stat calls a second
//! cost nothing.
//!
//! A changed file is handed to its source's loader, which checks it as start-up does (PEM, a
//! blank key, a certificate that does not fit its key) and installs it. A file that cannot be read
//! or that the loader refuses leaves the old material in use; the failure is logged once per
//! change, naming the files and the reason, and counted in `switchyard_secret_reloads_total`.

use super::read_file;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

/// How often the files are looked at.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// Why a loader refused new contents: its source's own error (a bad JWT key, API keys, TLS pair),
/// boxed because the sources are of different modules; only its message is logged.
pub(crate) type LoadError = Box<dyn std::error::Error + Send + Sync>;

/// Parses and installs new contents (one per file, in the source's order), or says why not.
pub(crate) type Loader = Box<dyn Fn(&[Vec<u8>]) -> Result<(), LoadError> + Send + Sync>;

/// `switchyard_secret_reloads_total{secret,result}`: reloads by Secret name and result (`ok`,
/// `error`).
pub(crate) type ReloadCounts = Family<Vec<(&'static str, String)>, Counter>;

/// Key material read from files, and how to install new contents.
pub(crate) struct Source {
    /// The Secret's name (logs and the metric label; never its contents).
    pub(crate) secret: String,
    /// The spec field that references it, for logs.
    pub(crate) field: String,
    /// The files, read together (a certificate and its key).
    pub(crate) files: Vec<PathBuf>,
    /// What was loaded at start-up, one per file.
    pub(crate) loaded: Vec<Vec<u8>>,
    /// Installs new contents.
    pub(crate) load: Loader,
}

/// The sources of one process, collected while the config is built and polled once it serves.
#[derive(Default)]
pub(crate) struct Reloads {
    sources: Vec<Source>,
}

/// One file's identity as `stat` sees it through symlinks, or why it could not be seen.
type FileStamp = Result<(u64, u64, u64, i64, i64, i64, i64), std::io::ErrorKind>;

fn stamp(path: &PathBuf) -> FileStamp {
    std::fs::metadata(path)
        .map(|m| {
            (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
        })
        .map_err(|e| e.kind())
}

/// What one look at a source found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing new.
    Unchanged,
    /// New contents, installed.
    Reloaded,
    /// New contents refused, or a file unreadable: the old material stays.
    Failed(String),
}

struct Tracked {
    source: Source,
    /// The stamps at the last look; `None` before the first, which compares the contents with
    /// what start-up loaded (a change between start-up's read and the first look is not missed).
    seen: Option<Vec<FileStamp>>,
}

impl Tracked {
    fn look(&mut self) -> Found {
        let now: Vec<FileStamp> = self.source.files.iter().map(stamp).collect();
        if self.seen.as_ref() == Some(&now) {
            return Found::Unchanged;
        }
        // Remembered before reading: a bad file is reported once, not at every look.
        self.seen = Some(now);
        let mut contents = Vec::with_capacity(self.source.files.len());
        for path in &self.source.files {
            match read_file(path) {
                Ok(bytes) => contents.push(bytes),
                Err(why) => return Found::Failed(format!("cannot read {}: {why}", path.display())),
            }
        }
        if contents == self.source.loaded {
            // Touched, or swapped for the same bytes.
            return Found::Unchanged;
        }
        match (self.source.load)(&contents) {
            Ok(()) => {
                self.source.loaded = contents;
                Found::Reloaded
            }
            Err(why) => Found::Failed(why.to_string()),
        }
    }
}

impl Reloads {
    /// Adds a source.
    pub(crate) fn add(&mut self, source: Source) {
        self.sources.push(source);
    }

    /// Whether there is anything to watch.
    pub(crate) fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Polls every source on a thread of its own until the process exits, counting in `counts`.
    pub(crate) fn spawn(self, counts: ReloadCounts) -> std::io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut poller = Poller::new(self);
        std::thread::Builder::new()
            .name("secret-reload".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(EVERY);
                    poller.look(&counts);
                }
            })
            .map(|_| ())
    }
}

/// Every source and what was last seen of it.
pub(crate) struct Poller {
    tracked: Vec<Tracked>,
}

impl Poller {
    /// Tracks `reloads`' sources.
    pub(crate) fn new(reloads: Reloads) -> Poller {
        Poller {
            tracked: reloads
                .sources
                .into_iter()
                .map(|source| Tracked { source, seen: None })
                .collect(),
        }
    }

    /// Looks at every source once; logs and counts what changed; returns what each found.
    pub(crate) fn look(&mut self, counts: &ReloadCounts) -> Vec<Found> {
        self.tracked
            .iter_mut()
            .map(|t| {
                let found = t.look();
                let s = &t.source;
                let files = s
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                match &found {
                    Found::Unchanged => {}
                    Found::Reloaded => {
                        counts
                            .get_or_create(&vec![("secret", s.secret.clone()), ("result", "ok".into())])
                            .inc();
                        tracing::info!(secret = %s.secret, field = %s.field, %files, "key material reloaded");
                    }
                    Found::Failed(why) => {
                        counts
                            .get_or_create(&vec![
                                ("secret", s.secret.clone()),
                                ("result", "error".into()),
                            ])
                            .inc();
                        tracing::error!(secret = %s.secret, field = %s.field, %files, error = %why, "key material reload failed; the material loaded before stays in use");
                    }
                }
                found
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    /// Writes `name` in `dir` as the kubelet does: a new folder of files, then `..data` swapped to
    /// it by a rename, and `name` a symlink through `..data`.
    fn kubelet_write(dir: &Path, name: &str, value: &[u8], generation: u32) {
        let folder = format!("..gen_{generation}");
        std::fs::create_dir(dir.join(&folder)).expect("folder");
        std::fs::write(dir.join(&folder).join(name), value).expect("write");
        let tmp = dir.join("..data_tmp");
        std::os::unix::fs::symlink(&folder, &tmp).expect("symlink");
        std::fs::rename(&tmp, dir.join("..data")).expect("swap");
        let link = dir.join(name);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link).expect("link");
        }
    }

    /// A source whose loader refuses `bad` and records what it installed.
    fn source(dir: &Path, installed: &Arc<Mutex<Vec<Vec<u8>>>>) -> Source {
        let sink = installed.clone();
        Source {
            secret: "jwt".into(),
            field: "spec.middleware[0].auth.jwt.keySecretRef".into(),
            files: vec![dir.join("key")],
            loaded: vec![b"one".to_vec()],
            load: Box::new(move |c| {
                if c[0] == b"bad" {
                    return Err("not a key".into());
                }
                sink.lock().expect("lock").push(c[0].clone());
                Ok(())
            }),
        }
    }

    #[test]
    fn a_symlink_swap_is_loaded_once_and_a_bad_file_keeps_the_old() {
        let dir = tempfile::tempdir().expect("dir");
        kubelet_write(dir.path(), "key", b"one", 1);
        let installed = Arc::default();
        let mut reloads = Reloads::default();
        reloads.add(source(dir.path(), &installed));
        let mut p = Poller::new(reloads);
        let counts = ReloadCounts::default();
        // The first look finds what start-up loaded.
        assert_eq!(p.look(&counts), vec![Found::Unchanged]);
        kubelet_write(dir.path(), "key", b"two", 2);
        assert_eq!(p.look(&counts), vec![Found::Reloaded]);
        assert_eq!(p.look(&counts), vec![Found::Unchanged]);
        kubelet_write(dir.path(), "key", b"bad", 3);
        assert_eq!(p.look(&counts), vec![Found::Failed("not a key".into())]);
        // Reported once, not at every look.
        assert_eq!(p.look(&counts), vec![Found::Unchanged]);
        // The same bytes again (a swap to an equal Secret) is no reload.
        kubelet_write(dir.path(), "key", b"two", 4);
        assert_eq!(p.look(&counts), vec![Found::Unchanged]);
        kubelet_write(dir.path(), "key", b"three", 5);
        assert_eq!(p.look(&counts), vec![Found::Reloaded]);
        assert_eq!(
            *installed.lock().expect("lock"),
            vec![b"two".to_vec(), b"three".to_vec()]
        );
        let ok = counts
            .get_or_create(&vec![("secret", "jwt".into()), ("result", "ok".into())])
            .get();
        let err = counts
            .get_or_create(&vec![("secret", "jwt".into()), ("result", "error".into())])
            .get();
        assert_eq!((ok, err), (2, 1));
    }

    #[test]
    fn a_missing_file_names_it_and_a_change_before_the_first_look_is_seen() {
        let dir = tempfile::tempdir().expect("dir");
        // Start-up loaded "one"; the file already says "two" at the first look.
        std::fs::write(dir.path().join("key"), b"two").expect("write");
        let installed = Arc::default();
        let mut reloads = Reloads::default();
        reloads.add(source(dir.path(), &installed));
        let mut p = Poller::new(reloads);
        let counts = ReloadCounts::default();
        assert_eq!(p.look(&counts), vec![Found::Reloaded]);
        std::fs::remove_file(dir.path().join("key")).expect("rm");
        let found = p.look(&counts);
        let [Found::Failed(why)] = &found[..] else {
            panic!("{found:?}")
        };
        assert!(
            why.contains(&dir.path().join("key").display().to_string()),
            "{why}"
        );
        std::fs::write(dir.path().join("key"), b"").expect("write");
        let found = p.look(&counts);
        assert!(
            matches!(&found[..], [Found::Failed(w)] if w.contains("empty")),
            "{found:?}"
        );
        std::fs::write(dir.path().join("key"), b"four").expect("write");
        assert_eq!(p.look(&counts), vec![Found::Reloaded]);
        assert_eq!(
            *installed.lock().expect("lock"),
            vec![b"two".to_vec(), b"four".to_vec()]
        );
    }
}
