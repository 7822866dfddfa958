//! API-key auth: a header whose value must be one of the keys in a Secret (one per line). The keys
//! are reloaded when their file changes (`secrets::reload`); a reload bumps [`Gate::changes`], so a
//! long session opened with a key that is gone ends.

use super::gate::{Denial, Gate, Head, Token};
use crate::config::{ConfigError, field_error};
use crate::secrets::reload::{Reloads, Source};
use crate::secrets::{Secrets, trim_end};
use arc_swap::ArcSwap;
use hyper::header::{HeaderName, HeaderValue};
use std::sync::Arc;
use subtle::ConstantTimeEq;
use switchyard_crds::router::ApiKey;
use tokio::sync::watch;

/// The API-key gate.
pub(super) struct ApiKeyGate {
    header: HeaderName,
    keys: ArcSwap<Vec<Box<[u8]>>>,
    challenge: HeaderValue,
    /// Counts key reloads, for sessions to re-check at.
    changes: watch::Sender<u64>,
}

/// Why a key file's bytes are not API keys (at start-up a config error, at a reload logged with the
/// old keys kept).
#[derive(Debug, thiserror::Error)]
pub(super) enum KeysError {
    /// No line holds a key.
    #[error("it holds no keys (one per line)")]
    NoKeys,
}

/// The keys of a key file, or why there are none.
fn keys_of(text: &[u8]) -> Result<Vec<Box<[u8]>>, KeysError> {
    let keys = parse_keys(text);
    if keys.is_empty() {
        return Err(KeysError::NoKeys);
    }
    Ok(keys)
}

impl ApiKeyGate {
    /// Reads the keys and registers their file for reloads; `field` is the spec path of the
    /// `apiKey` entry, for errors.
    pub(super) fn build(
        spec: &ApiKey,
        secrets: &Secrets,
        field: &str,
        reloads: &mut Reloads,
    ) -> Result<Arc<ApiKeyGate>, ConfigError> {
        let header = HeaderName::from_bytes(spec.header.as_bytes()).map_err(|_| {
            field_error(
                &secrets.config_file,
                format!("{field}.header"),
                format!("{:?} is not a header name", spec.header),
            )
        })?;
        let r = &spec.keys_secret_ref;
        let keys_field = format!("{field}.keysSecretRef");
        let (path, text) = secrets.file(&keys_field, &r.name, &r.key)?;
        let keys = keys_of(&text).map_err(|why| {
            field_error(
                &secrets.config_file,
                &keys_field,
                format!("Secret {:?} key {:?}: {why}", r.name, r.key),
            )
        })?;
        let challenge = HeaderValue::from_str(&format!("ApiKey header=\"{header}\""))
            .unwrap_or_else(|_| HeaderValue::from_static("ApiKey"));
        let gate = Arc::new(ApiKeyGate {
            header,
            keys: ArcSwap::from_pointee(keys),
            challenge,
            changes: watch::Sender::new(0),
        });
        let g = gate.clone();
        reloads.add(Source {
            secret: r.name.clone(),
            field: keys_field,
            files: vec![path],
            loaded: vec![text],
            load: Box::new(move |contents| Ok(g.reload(&contents[0])?)),
        });
        Ok(gate)
    }

    /// Installs the keys of a new key file, or says why not (the old keys stay).
    pub(super) fn reload(&self, text: &[u8]) -> Result<(), KeysError> {
        self.keys.store(Arc::new(keys_of(text)?));
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    fn deny(&self, reason: &'static str, detail: String) -> Denial {
        Denial {
            middleware: "apiKey",
            reason,
            status: 401,
            detail,
            challenge: Some(self.challenge.clone()),
            retry_after: None,
        }
    }
}

/// Keys from a Secret value: one per line, surrounding whitespace and blank lines ignored.
pub(super) fn parse_keys(text: &[u8]) -> Vec<Box<[u8]>> {
    text.split(|b| *b == b'\n')
        .map(|l| trim_end(l.trim_ascii_start()))
        .filter(|l| !l.is_empty())
        .map(Into::into)
        .collect()
}

/// Whether `given` is one of `keys`, in time that does not depend on where a key differs; every
/// key is compared, so which key matched does not show either.
pub(super) fn matches(keys: &[Box<[u8]>], given: &[u8]) -> bool {
    keys.iter()
        .fold(subtle::Choice::from(0), |acc, k| {
            acc | k.as_ref().ct_eq(given)
        })
        .into()
}

impl Gate for ApiKeyGate {
    fn check(&self, head: &Head<'_>) -> Result<Option<Token>, Denial> {
        match head.headers.get(&self.header) {
            None => Err(self.deny(
                "missing",
                format!("the {} header with an API key is missing", self.header),
            )),
            Some(v) if matches(&self.keys.load(), v.as_bytes()) => Ok(None),
            Some(_) => Err(self.deny(
                "invalid",
                format!("the API key in {} is not valid", self.header),
            )),
        }
    }

    fn credential(&self) -> Option<&HeaderName> {
        Some(&self.header)
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::HeaderMap;
    use std::path::PathBuf;
    use switchyard_crds::common::SecretKeyRef;

    #[test]
    fn keys_one_per_line() {
        let keys = parse_keys(b"alpha\r\n\n  beta  \n");
        assert_eq!(keys.len(), 2);
        assert!(matches(&keys, b"alpha"));
        assert!(matches(&keys, b"beta"));
        assert!(!matches(&keys, b"alph"));
        assert!(!matches(&keys, b""));
    }

    #[test]
    fn gate_accepts_known_keys_and_names_the_header() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("api")).expect("mkdir");
        std::fs::write(dir.path().join("api/keys"), b"k1\nk2\n").expect("write");
        let secrets = Secrets {
            dir: dir.path().to_owned(),
            config_file: PathBuf::from("r.json"),
        };
        let spec = ApiKey {
            header: "x-api-key".into(),
            keys_secret_ref: SecretKeyRef {
                name: "api".into(),
                key: "keys".into(),
            },
        };
        let gate = ApiKeyGate::build(
            &spec,
            &secrets,
            "spec.middleware[0].auth.apiKey",
            &mut Reloads::default(),
        )
        .expect("gate");
        let mut headers = HeaderMap::new();
        let peer = "127.0.0.1".parse().expect("ip");
        let d = gate
            .check(&Head {
                headers: &headers,
                peer,
            })
            .expect_err("missing");
        assert_eq!((d.status, d.reason), (401, "missing"));
        assert!(d.detail.contains("x-api-key"), "{}", d.detail);
        headers.insert("x-api-key", "k3".parse().expect("v"));
        let d = gate
            .check(&Head {
                headers: &headers,
                peer,
            })
            .expect_err("bad");
        assert_eq!(d.reason, "invalid");
        headers.insert("x-api-key", "k2".parse().expect("v"));
        assert!(
            gate.check(&Head {
                headers: &headers,
                peer
            })
            .is_ok()
        );
    }

    #[test]
    fn reloaded_keys_replace_the_old_ones_and_an_empty_file_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("api")).expect("mkdir");
        std::fs::write(dir.path().join("api/keys"), b"k1\n").expect("write");
        let secrets = Secrets {
            dir: dir.path().to_owned(),
            config_file: PathBuf::from("r.json"),
        };
        let spec = ApiKey {
            header: "x-api-key".into(),
            keys_secret_ref: SecretKeyRef {
                name: "api".into(),
                key: "keys".into(),
            },
        };
        let mut reloads = Reloads::default();
        let gate = ApiKeyGate::build(
            &spec,
            &secrets,
            "spec.middleware[0].auth.apiKey",
            &mut reloads,
        )
        .expect("gate");
        assert!(!reloads.is_empty());
        let mut changes = gate.changes().expect("changes");
        let admits = |key: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("x-api-key", key.parse().expect("v"));
            gate.check(&Head {
                headers: &headers,
                peer: "127.0.0.1".parse().expect("ip"),
            })
            .is_ok()
        };
        assert!(admits("k1") && !admits("k2"));
        assert!(gate.reload(b"k2\n").is_ok());
        assert!(changes.has_changed().expect("open"));
        changes.mark_unchanged();
        assert!(admits("k2") && !admits("k1"));
        assert_eq!(
            gate.reload(b"\n \n")
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("it holds no keys (one per line)")
        );
        assert!(!changes.has_changed().expect("open"));
        assert!(admits("k2"));
    }
}
