//! JWT auth: a Bearer token signed with HS256 (shared secret) or RS256 (public key, PEM), with
//! `exp`/`nbf` checked with the spec's leeway and `iss`/`aud` when the spec sets them. The key is
//! reloaded when its file changes (`secrets::reload`); a reload bumps [`Gate::changes`], so long
//! sessions re-check their token against the new key.

use super::gate::{Denial, Gate, Head, Token};
use crate::config::{ConfigError, field_error};
use crate::secrets::reload::{Reloads, Source};
use crate::secrets::{Secrets, trim_end};
use arc_swap::ArcSwap;
use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_crds::router::{Jwt, JwtAlgorithm, MAX_JWT_LEEWAY};
use tokio::sync::watch;

/// The JWT gate.
pub(super) struct JwtGate {
    algorithm: JwtAlgorithm,
    key: ArcSwap<DecodingKey>,
    validation: Validation,
    /// `Authorization`, where the token is.
    header: HeaderName,
    /// Counts key reloads, for sessions to re-check at.
    changes: watch::Sender<u64>,
}

/// Why a key file's bytes are not a key of the gate's algorithm (at start-up a config error, at a
/// reload logged with the old key kept).
#[derive(Debug, thiserror::Error)]
pub(super) enum KeyError {
    /// The HS256 secret is empty or only whitespace.
    #[error("the HS256 secret is blank")]
    BlankSecret,
    /// The RS256 key is not an RSA public key in PEM.
    #[error("not an RSA public key in PEM: {0}")]
    NotRsaPem(jsonwebtoken::errors::Error),
}

/// The key of `algorithm` in a key file's bytes, or why it is not one.
pub(super) fn parse_key(algorithm: JwtAlgorithm, raw: &[u8]) -> Result<DecodingKey, KeyError> {
    match algorithm {
        JwtAlgorithm::HS256 => {
            let secret = trim_end(raw);
            if secret.is_empty() {
                return Err(KeyError::BlankSecret);
            }
            Ok(DecodingKey::from_secret(secret))
        }
        JwtAlgorithm::RS256 => DecodingKey::from_rsa_pem(raw).map_err(KeyError::NotRsaPem),
    }
}

impl JwtGate {
    /// Reads the key and registers its file for reloads; `field` is the spec path of the `jwt`
    /// entry, for errors.
    pub(super) fn build(
        spec: &Jwt,
        secrets: &Secrets,
        field: &str,
        reloads: &mut Reloads,
    ) -> Result<Arc<JwtGate>, ConfigError> {
        let key_field = format!("{field}.keySecretRef");
        let r = &spec.key_secret_ref;
        let (path, raw) = secrets.file(&key_field, &r.name, &r.key)?;
        let key = parse_key(spec.algorithm, &raw).map_err(|why| {
            field_error(
                &secrets.config_file,
                &key_field,
                format!("Secret {:?} key {:?}: {why}", r.name, r.key),
            )
        })?;
        let leeway: Duration = spec.leeway.into();
        if leeway > MAX_JWT_LEEWAY {
            return Err(field_error(
                &secrets.config_file,
                format!("{field}.leeway"),
                format!(
                    "{} is more than the most allowed, {}",
                    humantime::format_duration(leeway),
                    humantime::format_duration(MAX_JWT_LEEWAY)
                ),
            ));
        }
        let alg = match spec.algorithm {
            JwtAlgorithm::HS256 => Algorithm::HS256,
            JwtAlgorithm::RS256 => Algorithm::RS256,
        };
        let gate = Arc::new(JwtGate {
            algorithm: spec.algorithm,
            key: ArcSwap::from_pointee(key),
            validation: validation(
                alg,
                spec.issuer.as_deref(),
                spec.audience.as_deref(),
                leeway,
            ),
            header: AUTHORIZATION,
            changes: watch::Sender::new(0),
        });
        let g = gate.clone();
        reloads.add(Source {
            secret: r.name.clone(),
            field: key_field,
            files: vec![path],
            loaded: vec![raw],
            load: Box::new(move |contents| Ok(g.reload(&contents[0])?)),
        });
        Ok(gate)
    }

    /// Installs a new key from its file's bytes, or says why it is not one (the old key stays).
    pub(super) fn reload(&self, raw: &[u8]) -> Result<(), KeyError> {
        let key = parse_key(self.algorithm, raw)?;
        self.key.store(Arc::new(key));
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }
}

/// The checks: the one algorithm, `exp` required, `nbf` when present, `iss`/`aud` when configured,
/// `leeway` (whole seconds) on `exp` and `nbf`.
pub(super) fn validation(
    alg: Algorithm,
    issuer: Option<&str>,
    audience: Option<&str>,
    leeway: Duration,
) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = leeway.as_secs();
    v.validate_nbf = true;
    match issuer {
        Some(i) => v.set_issuer(&[i]),
        None => v.iss = None,
    }
    match audience {
        Some(a) => v.set_audience(&[a]),
        // Without a configured audience a token's `aud` is not checked (the library would reject it).
        None => v.validate_aud = false,
    }
    v
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive).
pub(super) fn bearer(value: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(value).ok()?;
    let (scheme, token) = s.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// When a token whose claims passed validation stops being accepted: `exp` plus the leeway (the
/// validation required `exp` and checked it is a number).
pub(super) fn expires(claims: &Map<String, Value>, leeway_secs: u64) -> SystemTime {
    let exp = match claims.get("exp") {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .unwrap_or(0),
        _ => 0,
    };
    UNIX_EPOCH + Duration::from_secs(exp.saturating_add(leeway_secs))
}

/// The metric reason and the client-facing description of a verification error.
pub(super) fn describe(kind: &ErrorKind) -> (&'static str, String) {
    match kind {
        ErrorKind::ExpiredSignature => ("expired", "the token has expired".into()),
        ErrorKind::ImmatureSignature => {
            ("not_yet_valid", "the token is not valid yet (nbf)".into())
        }
        ErrorKind::InvalidSignature => ("bad_signature", "the token signature is not valid".into()),
        ErrorKind::InvalidAudience => (
            "wrong_audience",
            "the token audience (aud) is not accepted".into(),
        ),
        ErrorKind::InvalidIssuer => (
            "wrong_issuer",
            "the token issuer (iss) is not accepted".into(),
        ),
        ErrorKind::InvalidAlgorithm => (
            "wrong_algorithm",
            "the token algorithm is not accepted".into(),
        ),
        ErrorKind::MissingRequiredClaim(c) => {
            ("missing_claim", format!("the token has no `{c}` claim"))
        }
        _ => ("malformed", "the token is not a well-formed JWT".into()),
    }
}

/// The refusal of a token that expired while its session was open.
pub(super) fn expired() -> Denial {
    let (reason, detail) = describe(&ErrorKind::ExpiredSignature);
    deny(reason, detail)
}

pub(super) fn deny(reason: &'static str, detail: String) -> Denial {
    // Quotes and backslashes cannot appear in our descriptions, so the quoted-string needs no escaping.
    let challenge = HeaderValue::from_str(&format!(
        "Bearer error=\"invalid_token\", error_description=\"{detail}\""
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"invalid_token\""));
    Denial {
        middleware: "jwt",
        reason,
        status: 401,
        detail,
        challenge: Some(challenge),
        retry_after: None,
    }
}

impl JwtGate {
    /// Verifies a token; its claims and when it stops being accepted.
    pub(super) fn verify(&self, token: &str) -> Result<Token, Denial> {
        let key = self.key.load();
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &self.validation)
            .map_err(|e| {
                let (reason, detail) = describe(e.kind());
                deny(reason, detail)
            })?;
        let token = Token {
            expires: expires(&data.claims, self.validation.leeway),
            claims: data.claims,
        };
        // The library counts whole seconds and still takes a token during the second of its
        // `exp`; RFC 7519 wants now before `exp`. Checked to the instant, a request is refused
        // from the moment a session opened with the same token is closed.
        if SystemTime::now() >= token.expires {
            return Err(expired());
        }
        Ok(token)
    }
}

impl Gate for JwtGate {
    fn check(&self, head: &Head<'_>) -> Result<Option<Token>, Denial> {
        let Some(token) = head
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| bearer(v.as_bytes()))
        else {
            return Err(deny(
                "missing",
                "the Authorization header with a Bearer token is missing".into(),
            ));
        };
        self.verify(token).map(Some)
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
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    }

    fn gate(aud: Option<&str>) -> JwtGate {
        JwtGate {
            algorithm: JwtAlgorithm::HS256,
            key: ArcSwap::from_pointee(DecodingKey::from_secret(b"s3cret")),
            validation: validation(
                Algorithm::HS256,
                Some("me"),
                aud,
                switchyard_crds::router::DEFAULT_JWT_LEEWAY,
            ),
            header: AUTHORIZATION,
            changes: watch::Sender::new(0),
        }
    }

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .expect("encode")
    }

    fn check(g: &JwtGate, auth: Option<String>) -> Result<Option<Token>, Denial> {
        let mut headers = HeaderMap::new();
        if let Some(a) = auth {
            headers.insert(AUTHORIZATION, a.parse().expect("value"));
        }
        g.check(&Head {
            headers: &headers,
            peer: "127.0.0.1".parse().expect("ip"),
        })
    }

    #[test]
    fn accepts_a_good_token_and_names_each_problem() {
        let g = gate(Some("api"));
        let good = json!({"iss": "me", "aud": "api", "exp": now() + 60});
        assert!(
            check(
                &g,
                Some(format!("Bearer {}", token(good.clone(), b"s3cret")))
            )
            .is_ok()
        );
        assert!(
            check(
                &g,
                Some(format!("bearer {}", token(good.clone(), b"s3cret")))
            )
            .is_ok()
        );

        let reason = |auth: Option<String>| check(&g, auth).expect_err("denied").reason;
        assert_eq!(reason(None), "missing");
        assert_eq!(reason(Some("Basic abc".into())), "missing");
        assert_eq!(reason(Some("Bearer not.a.jwt".into())), "malformed");
        assert_eq!(
            reason(Some(format!("Bearer {}", token(good.clone(), b"other")))),
            "bad_signature"
        );
        let expired = json!({"iss": "me", "aud": "api", "exp": now() - 3600});
        assert_eq!(
            reason(Some(format!("Bearer {}", token(expired, b"s3cret")))),
            "expired"
        );
        let early = json!({"iss": "me", "aud": "api", "exp": now() + 7200, "nbf": now() + 3600});
        assert_eq!(
            reason(Some(format!("Bearer {}", token(early, b"s3cret")))),
            "not_yet_valid"
        );
        let aud = json!({"iss": "me", "aud": "other", "exp": now() + 60});
        assert_eq!(
            reason(Some(format!("Bearer {}", token(aud, b"s3cret")))),
            "wrong_audience"
        );
        let iss = json!({"iss": "you", "aud": "api", "exp": now() + 60});
        assert_eq!(
            reason(Some(format!("Bearer {}", token(iss, b"s3cret")))),
            "wrong_issuer"
        );
        let no_exp = json!({"iss": "me", "aud": "api"});
        assert_eq!(
            reason(Some(format!("Bearer {}", token(no_exp, b"s3cret")))),
            "missing_claim"
        );
    }

    fn build(alg: JwtAlgorithm, key: &[u8]) -> Result<Arc<JwtGate>, ConfigError> {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("jwt")).expect("mkdir");
        std::fs::write(dir.path().join("jwt/key"), key).expect("write");
        let secrets = Secrets {
            dir: dir.path().to_owned(),
            config_file: "r.json".into(),
        };
        let spec = Jwt {
            algorithm: alg,
            key_secret_ref: switchyard_crds::common::SecretKeyRef {
                name: "jwt".into(),
                key: "key".into(),
            },
            issuer: None,
            audience: Some("api".into()),
            leeway: switchyard_crds::router::DEFAULT_JWT_LEEWAY.into(),
        };
        JwtGate::build(
            &spec,
            &secrets,
            "spec.middleware[0].auth.jwt",
            &mut Reloads::default(),
        )
    }

    #[test]
    fn rs256_with_a_pem_public_key() {
        let public = include_bytes!("../../tests/fixtures/jwt-rs256-test.pub");
        let private = include_bytes!("../../tests/fixtures/jwt-rs256-test.key");
        let g = build(JwtAlgorithm::RS256, public).expect("gate");
        let claims = json!({"aud": "api", "exp": now() + 60});
        let signed = encode(
            &Header::new(Algorithm::RS256),
            &claims,
            &EncodingKey::from_rsa_pem(private).expect("private key"),
        )
        .expect("encode");
        assert!(check(&g, Some(format!("Bearer {signed}"))).is_ok());
        // An HS256 token, even one "signed" with the public key, is refused.
        let forged = token(claims, public);
        assert_eq!(
            check(&g, Some(format!("Bearer {forged}")))
                .expect_err("forged")
                .reason,
            "wrong_algorithm"
        );
        let err = build(JwtAlgorithm::RS256, b"not a key")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("keySecretRef") && err.contains("PEM"), "{err}");
    }

    #[test]
    fn hs256_secret_loses_its_trailing_newline() {
        let g = build(JwtAlgorithm::HS256, b"s3cret\n").expect("gate");
        let t = token(json!({"aud": "api", "exp": now() + 60}), b"s3cret");
        assert!(check(&g, Some(format!("Bearer {t}"))).is_ok());
        assert!(build(JwtAlgorithm::HS256, b"\n\n").is_err());
    }

    #[test]
    fn leeway_admits_a_just_expired_token() {
        let g = gate(None);
        let t = token(
            json!({"iss": "me", "exp": now() - 5, "aud": "x"}),
            b"s3cret",
        );
        assert!(check(&g, Some(format!("Bearer {t}"))).is_ok());
    }

    #[test]
    fn a_token_carries_its_claims_and_expires_at_exp_plus_leeway() {
        let g = gate(None);
        let exp = now() + 60;
        let t = token(
            json!({"iss": "me", "exp": exp, "scope": "a b", "sub": "u1"}),
            b"s3cret",
        );
        let got = check(&g, Some(format!("Bearer {t}")))
            .expect("admitted")
            .expect("a token");
        assert_eq!(got.claims["sub"], "u1");
        assert_eq!(got.expires, UNIX_EPOCH + Duration::from_secs(exp + 30));
        let strict = JwtGate {
            validation: validation(Algorithm::HS256, Some("me"), None, Duration::ZERO),
            ..gate(None)
        };
        let got = strict.verify(&t).expect("admitted");
        assert_eq!(got.expires, UNIX_EPOCH + Duration::from_secs(exp));
        // A just-expired token is refused without leeway.
        let old = token(json!({"iss": "me", "exp": now() - 2}), b"s3cret");
        assert_eq!(strict.verify(&old).expect_err("expired").reason, "expired");
    }

    #[test]
    fn a_reloaded_key_is_used_at_once_and_a_bad_one_is_refused() {
        let g = gate(None);
        let mut changes = g.changes().expect("changes");
        let claims = json!({"iss": "me", "exp": now() + 60});
        let old = format!("Bearer {}", token(claims.clone(), b"s3cret"));
        let new = format!("Bearer {}", token(claims, b"rotated"));
        assert!(check(&g, Some(old.clone())).is_ok());
        assert!(g.reload(b"rotated\n").is_ok());
        assert!(changes.has_changed().expect("open"));
        changes.mark_unchanged();
        assert!(check(&g, Some(new.clone())).is_ok());
        assert_eq!(
            check(&g, Some(old)).expect_err("old key").reason,
            "bad_signature"
        );
        assert_eq!(
            g.reload(b" \n").err().map(|e| e.to_string()).as_deref(),
            Some("the HS256 secret is blank")
        );
        assert!(!changes.has_changed().expect("open"));
        assert!(check(&g, Some(new)).is_ok());
    }

    #[test]
    fn a_leeway_over_five_minutes_is_a_config_error() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("jwt")).expect("mkdir");
        std::fs::write(dir.path().join("jwt/key"), b"k").expect("write");
        let secrets = Secrets {
            dir: dir.path().to_owned(),
            config_file: "r.json".into(),
        };
        let spec = Jwt {
            algorithm: JwtAlgorithm::HS256,
            key_secret_ref: switchyard_crds::common::SecretKeyRef {
                name: "jwt".into(),
                key: "key".into(),
            },
            issuer: None,
            audience: None,
            leeway: Duration::from_secs(301).into(),
        };
        let err = JwtGate::build(
            &spec,
            &secrets,
            "spec.middleware[0].auth.jwt",
            &mut Reloads::default(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("spec.middleware[0].auth.jwt.leeway"), "{err}");
        assert!(err.contains("5m"), "{err}");
    }

    #[test]
    fn challenge_names_the_problem() {
        let d = check(&gate(None), None).expect_err("missing");
        let c = d.challenge.expect("challenge");
        let c = c.to_str().expect("ascii");
        assert!(c.starts_with("Bearer error=\"invalid_token\""), "{c}");
        assert!(c.contains("missing"), "{c}");
    }
}
