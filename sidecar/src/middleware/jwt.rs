//! JWT auth: a Bearer token signed with HS256 (shared secret) or RS256 (public key, PEM), with
//! `exp`/`nbf` checked with a small leeway and `iss`/`aud` when the spec sets them.

use super::{Denial, Gate, Head};
use crate::config::{ConfigError, field_error};
use crate::secrets::{Secrets, trim_end};
use hyper::header::{AUTHORIZATION, HeaderValue};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use switchyard_crds::router::{Jwt, JwtAlgorithm};

/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY_SECS: u64 = 30;

/// The JWT gate.
pub struct JwtGate {
    key: DecodingKey,
    validation: Validation,
}

impl JwtGate {
    /// Reads the key; `field` is the spec path of `keySecretRef`, for errors.
    pub fn build(spec: &Jwt, secrets: &Secrets, field: &str) -> Result<JwtGate, ConfigError> {
        let r = &spec.key_secret_ref;
        let raw = secrets.read(field, &r.name, &r.key)?;
        let bad = |msg: String| field_error(&secrets.config_file, field, msg);
        let (key, alg) = match spec.algorithm {
            JwtAlgorithm::HS256 => {
                let secret = trim_end(&raw);
                if secret.is_empty() {
                    return Err(bad(format!("Secret {:?} key {:?} is blank", r.name, r.key)));
                }
                (DecodingKey::from_secret(secret), Algorithm::HS256)
            }
            JwtAlgorithm::RS256 => (
                DecodingKey::from_rsa_pem(&raw).map_err(|e| {
                    bad(format!(
                        "Secret {:?} key {:?} is not an RSA public key in PEM: {e}",
                        r.name, r.key
                    ))
                })?,
                Algorithm::RS256,
            ),
        };
        Ok(JwtGate {
            key,
            validation: validation(alg, spec.issuer.as_deref(), spec.audience.as_deref()),
        })
    }
}

/// The checks: the one algorithm, `exp` required, `nbf` when present, `iss`/`aud` when configured.
pub fn validation(alg: Algorithm, issuer: Option<&str>, audience: Option<&str>) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = LEEWAY_SECS;
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
pub fn bearer(value: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(value).ok()?;
    let (scheme, token) = s.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The metric reason and the client-facing description of a verification error.
pub fn describe(kind: &ErrorKind) -> (&'static str, String) {
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

fn deny(reason: &'static str, detail: String) -> Denial {
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

impl Gate for JwtGate {
    fn check(&self, head: &Head<'_>) -> Result<(), Denial> {
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
        jsonwebtoken::decode::<serde::de::IgnoredAny>(token, &self.key, &self.validation)
            .map(|_| ())
            .map_err(|e| {
                let (reason, detail) = describe(e.kind());
                deny(reason, detail)
            })
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
            key: DecodingKey::from_secret(b"s3cret"),
            validation: validation(Algorithm::HS256, Some("me"), aud),
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

    fn check(g: &JwtGate, auth: Option<String>) -> Result<(), Denial> {
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

    fn build(alg: JwtAlgorithm, key: &[u8]) -> Result<JwtGate, ConfigError> {
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
        };
        JwtGate::build(&spec, &secrets, "spec.middleware[0].auth.jwt.keySecretRef")
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
    fn challenge_names_the_problem() {
        let d = check(&gate(None), None).expect_err("missing");
        let c = d.challenge.expect("challenge");
        let c = c.to_str().expect("ascii");
        assert!(c.starts_with("Bearer error=\"invalid_token\""), "{c}");
        assert!(c.contains("missing"), "{c}");
    }
}
