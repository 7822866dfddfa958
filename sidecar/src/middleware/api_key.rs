//! API-key auth: a header whose value must be one of the keys in a Secret (one per line).

use super::{Denial, Gate, Head};
use crate::config::{ConfigError, field_error};
use crate::secrets::{Secrets, trim_end};
use hyper::header::{HeaderName, HeaderValue};
use subtle::ConstantTimeEq;
use switchyard_crds::router::ApiKey;

/// The API-key gate.
pub struct ApiKeyGate {
    header: HeaderName,
    keys: Vec<Box<[u8]>>,
    challenge: HeaderValue,
}

impl ApiKeyGate {
    /// Reads the keys; `field` is the spec path of the `apiKey` entry, for errors.
    pub fn build(spec: &ApiKey, secrets: &Secrets, field: &str) -> Result<ApiKeyGate, ConfigError> {
        let header = HeaderName::from_bytes(spec.header.as_bytes()).map_err(|_| {
            field_error(
                &secrets.config_file,
                format!("{field}.header"),
                format!("{:?} is not a header name", spec.header),
            )
        })?;
        let r = &spec.keys_secret_ref;
        let text = secrets.read(&format!("{field}.keysSecretRef"), &r.name, &r.key)?;
        let keys = parse_keys(&text);
        if keys.is_empty() {
            return Err(field_error(
                &secrets.config_file,
                format!("{field}.keysSecretRef"),
                format!(
                    "Secret {:?} key {:?} holds no keys (one per line)",
                    r.name, r.key
                ),
            ));
        }
        let challenge = HeaderValue::from_str(&format!("ApiKey header=\"{header}\""))
            .unwrap_or_else(|_| HeaderValue::from_static("ApiKey"));
        Ok(ApiKeyGate {
            header,
            keys,
            challenge,
        })
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
pub fn parse_keys(text: &[u8]) -> Vec<Box<[u8]>> {
    text.split(|b| *b == b'\n')
        .map(|l| trim_end(l.trim_ascii_start()))
        .filter(|l| !l.is_empty())
        .map(Into::into)
        .collect()
}

/// Whether `given` is one of `keys`, in time that does not depend on where a key differs; every
/// key is compared, so which key matched does not show either.
pub fn matches(keys: &[Box<[u8]>], given: &[u8]) -> bool {
    keys.iter()
        .fold(subtle::Choice::from(0), |acc, k| {
            acc | k.as_ref().ct_eq(given)
        })
        .into()
}

impl Gate for ApiKeyGate {
    fn check(&self, head: &Head<'_>) -> Result<(), Denial> {
        match head.headers.get(&self.header) {
            None => Err(self.deny(
                "missing",
                format!("the {} header with an API key is missing", self.header),
            )),
            Some(v) if matches(&self.keys, v.as_bytes()) => Ok(()),
            Some(_) => Err(self.deny(
                "invalid",
                format!("the API key in {} is not valid", self.header),
            )),
        }
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
        let gate =
            ApiKeyGate::build(&spec, &secrets, "spec.middleware[0].auth.apiKey").expect("gate");
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
}
