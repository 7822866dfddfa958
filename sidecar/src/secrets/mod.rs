//! Key material from mounted Secrets: `<secrets-dir>/<secret name>/<key>`, read at start-up and
//! reloaded when the files change (`reload.rs`).
//!
//! The operator mounts each Secret the Router spec references at that path; `switchyard up` writes
//! the same layout into a private temp folder. At start-up a missing or unreadable file names the
//! file and the spec field that referenced it (exit 2); later, a bad new file keeps the old material.

pub(crate) mod reload;

use crate::config::{ConfigError, field_error};
use std::path::{Path, PathBuf};

/// Default folder the operator mounts Secrets under.
pub(crate) const DEFAULT_DIR: &str = switchyard_protocol::config::SECRETS_DIR;
/// Largest key file read; keys, key lists and PEM chains are far smaller.
const MAX_FILE: u64 = 1 << 20;

/// Where referenced Secrets are read from, and the config file errors are reported against.
#[derive(Clone, Debug)]
pub(crate) struct Secrets {
    /// The secrets folder (`--secrets-dir`).
    pub dir: PathBuf,
    /// The config file, named in errors.
    pub config_file: PathBuf,
}

impl Secrets {
    /// Path of `key` in Secret `name`; rejects names that would leave the folder.
    pub(crate) fn path(&self, name: &str, key: &str) -> Option<PathBuf> {
        let safe = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        (safe(name) && safe(key)).then(|| self.dir.join(name).join(key))
    }

    /// Reads `key` of Secret `name`, referenced by spec field `field`: its path (to watch) and bytes.
    pub(crate) fn file(
        &self,
        field: &str,
        name: &str,
        key: &str,
    ) -> Result<(PathBuf, Vec<u8>), ConfigError> {
        let path = self.path(name, key).ok_or_else(|| {
            self.error(
                field,
                format!("Secret {name:?} key {key:?} is not a valid Secret name and key"),
            )
        })?;
        let bytes = read_file(&path).map_err(|why| {
            self.error(
                field,
                format!(
                    "cannot read {} (Secret {name:?}, key {key:?}): {why}",
                    path.display()
                ),
            )
        })?;
        Ok((path, bytes))
    }

    fn error(&self, field: &str, message: String) -> ConfigError {
        field_error(&self.config_file, field, message)
    }
}

/// Why a mounted key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// It cannot be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Larger than any key or certificate chain should be.
    #[error("larger than {MAX_FILE} bytes")]
    TooLarge,
    /// Nothing in it.
    #[error("the file is empty")]
    Empty,
}

/// Reads a key file: at most [`MAX_FILE`] bytes, not empty.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, ReadError> {
    let meta = std::fs::metadata(path)?;
    if meta.len() > MAX_FILE {
        return Err(ReadError::TooLarge);
    }
    let bytes = std::fs::read(path)?;
    if bytes.is_empty() {
        return Err(ReadError::Empty);
    }
    Ok(bytes)
}

/// The value without trailing whitespace: a key written with `echo` or an editor ends in a newline.
pub(crate) fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(dir: &Path) -> Secrets {
        Secrets {
            dir: dir.to_owned(),
            config_file: PathBuf::from("/tmp/router.json"),
        }
    }

    #[test]
    fn reads_name_key_and_names_field_and_file_when_missing() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("jwt")).expect("mkdir");
        std::fs::write(dir.path().join("jwt/key"), b"s3cret\n").expect("write");
        let s = secrets(dir.path());
        assert_eq!(
            s.file("spec.middleware[0].auth.jwt.keySecretRef", "jwt", "key")
                .expect("read"),
            (dir.path().join("jwt/key"), b"s3cret\n".to_vec())
        );
        let err = s
            .file("spec.middleware[0].auth.jwt.keySecretRef", "jwt", "other")
            .expect_err("missing")
            .to_string();
        assert!(err.contains("keySecretRef"), "{err}");
        assert!(err.contains("jwt/other"), "{err}");
        assert!(err.contains("/tmp/router.json"), "{err}");
    }

    #[test]
    fn names_cannot_leave_the_folder() {
        let s = secrets(Path::new("/s"));
        assert!(s.path("..", "x").is_none());
        assert!(s.path("a/b", "x").is_none());
        assert!(s.path("a", "").is_none());
        assert_eq!(
            s.path("tls", "tls.crt"),
            Some(PathBuf::from("/s/tls/tls.crt"))
        );
    }

    #[test]
    fn trims_trailing_whitespace_only() {
        assert_eq!(trim_end(b" k \r\n"), b" k");
        assert_eq!(trim_end(b"\n"), b"");
    }
}
