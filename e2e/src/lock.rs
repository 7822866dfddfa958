//! Cross-process locks in the scratch folder.
//!
//! `cargo test` runs test binaries one after another, but nextest runs each test in a process of
//! its own and in parallel. Two things must never overlap across processes: installing the charts
//! (helm refuses concurrent operations on a release) and running operator processes (operators
//! all watch every namespace, so two unrelated ones would fight over the same children). Both are
//! guarded by an exclusive `flock` on a file, which the kernel releases when the process dies.

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::path::PathBuf;

/// Held lock; released on drop.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Blocks (on a blocking thread) until the exclusive lock `<work>/<name>.lock` is ours.
    pub async fn acquire(name: &str) -> Result<FileLock> {
        let path = crate::work_dir().join(format!("{name}.lock"));
        tokio::task::spawn_blocking(move || {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            file.lock()
                .with_context(|| format!("locking {}", path.display()))?;
            Ok(FileLock { file, path })
        })
        .await
        .context("lock thread panicked")?
    }

    /// Path of the lock file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}
