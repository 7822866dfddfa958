//! The issuer's documents: its discovery document (which names the key set) and its key set (JWKS),
//! parsed into the verification keys the allowed algorithms can use. Pure.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use std::collections::HashMap;

/// What the sidecar reads of the discovery document.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Discovery {
    /// The issuer as the document states it (tokens carry it in `iss`).
    pub issuer: String,
    /// Where the key set is.
    pub jwks_uri: String,
}

/// The discovery document's URL for `issuer` (OpenID Connect Discovery 1.0, section 4).
pub(super) fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// Whether two issuer URLs are the same, a trailing slash aside.
pub(super) fn same_issuer(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Why the issuer's discovery document or key set cannot be used (logged; the keys at hand stay).
#[derive(Debug, thiserror::Error)]
pub(super) enum KeysError {
    /// The discovery document is not the JSON expected.
    #[error("the discovery document is not readable: {0}")]
    DiscoveryUnreadable(serde_json::Error),
    /// The discovery document is another issuer's.
    #[error("the discovery document is for issuer {stated:?}, not {expected:?}")]
    OtherIssuer {
        /// The issuer the document states.
        stated: String,
        /// The issuer configured.
        expected: String,
    },
    /// The discovery document names a key set that is not on https.
    #[error("the discovery document's jwks_uri {0:?} is not https://")]
    JwksNotHttps(String),
    /// The key set is not the JSON expected.
    #[error("the key set is not readable: {0}")]
    JwksUnreadable(serde_json::Error),
    /// The key set has no key the allowed algorithms can use.
    #[error("the key set has no signing key for {}", names(.0))]
    NoSigningKey(Vec<Algorithm>),
}

/// The algorithms' names, comma-separated.
fn names(algorithms: &[Algorithm]) -> String {
    algorithms
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The discovery document in `body`, checked to be `issuer`'s and to name an https key set.
pub(super) fn parse_discovery(body: &[u8], issuer: &str) -> Result<Discovery, KeysError> {
    #[derive(Deserialize)]
    struct Doc {
        issuer: String,
        jwks_uri: String,
    }
    let doc: Doc = serde_json::from_slice(body).map_err(KeysError::DiscoveryUnreadable)?;
    if !same_issuer(&doc.issuer, issuer) {
        return Err(KeysError::OtherIssuer {
            stated: doc.issuer,
            expected: issuer.to_owned(),
        });
    }
    if !doc.jwks_uri.starts_with("https://") {
        return Err(KeysError::JwksNotHttps(doc.jwks_uri));
    }
    Ok(Discovery {
        issuer: doc.issuer,
        jwks_uri: doc.jwks_uri,
    })
}

/// One verification key of the set.
pub(super) struct Key {
    /// The key.
    pub key: DecodingKey,
    /// The one algorithm it verifies (from its `alg`, or its type and curve).
    pub algorithm: Algorithm,
}

/// The usable keys of a key set, by `kid`.
#[derive(Default)]
pub(super) struct KeySet {
    by_id: HashMap<String, Key>,
    /// A key with no `kid`, used only for tokens without one when it is the set's only key.
    unnamed: Vec<Key>,
}

impl KeySet {
    /// The key a token with `kid` is verified with.
    pub(super) fn find(&self, kid: Option<&str>) -> Option<&Key> {
        match kid {
            Some(k) => self.by_id.get(k),
            None if self.by_id.len() + self.unnamed.len() == 1 => {
                self.by_id.values().chain(&self.unnamed).next()
            }
            None => None,
        }
    }

    /// The key ids, sorted (to tell whether a fetch changed the set).
    pub(super) fn ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.by_id.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// Adds a key under `kid` (tests build sets without a JWKS document).
    #[cfg(test)]
    pub(super) fn insert(&mut self, kid: &str, key: Key) {
        self.by_id.insert(kid.into(), key);
    }

    /// How many usable keys it has.
    pub(super) fn len(&self) -> usize {
        self.by_id.len() + self.unnamed.len()
    }
}

/// The keys of the JWKS in `body` usable with `allowed`. Keys for encryption, of other types or
/// algorithms, or that do not parse are skipped (an issuer may publish more than this verifies);
/// a set with none usable is an error, so the keys at hand stay.
pub(super) fn parse_jwks(body: &[u8], allowed: &[Algorithm]) -> Result<KeySet, KeysError> {
    #[derive(Deserialize)]
    struct Doc {
        keys: Vec<serde_json::Value>,
    }
    let doc: Doc = serde_json::from_slice(body).map_err(KeysError::JwksUnreadable)?;
    let mut set = KeySet::default();
    for raw in doc.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw) else {
            continue;
        };
        let Some(algorithm) = algorithm_of(&jwk).filter(|a| allowed.contains(a)) else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        let key = Key { key, algorithm };
        match jwk.common.key_id {
            Some(kid) => {
                set.by_id.insert(kid, key);
            }
            None => set.unnamed.push(key),
        }
    }
    if set.len() == 0 {
        return Err(KeysError::NoSigningKey(allowed.to_vec()));
    }
    Ok(set)
}

/// The one algorithm a signing key verifies: its `alg` when stated and consistent with its type,
/// else what its type and curve imply (RSA keys without `alg` are taken as RS256).
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        _ => return None,
    };
    let stated = match jwk.common.key_algorithm {
        None => return Some(by_type),
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) => Algorithm::EdDSA,
        Some(_) => return None,
    };
    (stated == by_type).then_some(stated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ALL: &[Algorithm] = &[Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

    fn rsa(kid: &str) -> serde_json::Value {
        json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "e": "AQAB",
            "n": "u1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0_IzW7yWR7QkrmBL7jTKEn5u-qKhbwKfBstIs-bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW_VDL5AaWTg0nLVkjRo9z-40RQzuVaE8AkAFmxZzow3x-VJYKdjykkJ0iT9wCS0DRTXu269V264Vf_3jvredZiKRkgwlL9xNAwxXFg0x_XFw005UWVRIkdgcKWTjpBP2dPwVZ4WWC-9aGVd-Gyn1o0CLelf4rEjGoXbAAEgAqeGUxrcIlbjXfbcmw"})
    }

    fn ec(kid: &str, alg: Option<&str>) -> serde_json::Value {
        let mut k = json!({"kty": "EC", "kid": kid, "crv": "P-256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"});
        if let Some(a) = alg {
            k["alg"] = json!(a);
        }
        k
    }

    fn set(keys: serde_json::Value, allowed: &[Algorithm]) -> Result<KeySet, KeysError> {
        parse_jwks(json!({ "keys": keys }).to_string().as_bytes(), allowed)
    }

    #[test]
    fn keys_are_found_by_kid_with_their_algorithm() {
        let s = set(json!([rsa("r1"), ec("e1", None)]), ALL).expect("set");
        assert_eq!(s.ids(), vec!["e1", "r1"]);
        assert_eq!(
            s.find(Some("r1")).map(|k| k.algorithm),
            Some(Algorithm::RS256)
        );
        assert_eq!(
            s.find(Some("e1")).map(|k| k.algorithm),
            Some(Algorithm::ES256)
        );
        assert!(s.find(Some("nope")).is_none());
        // Without a kid a token is matched only when the set has one key.
        assert!(s.find(None).is_none());
        let one = set(json!([rsa("r1")]), ALL).expect("set");
        assert!(one.find(None).is_some());
    }

    #[test]
    fn unusable_keys_are_skipped_and_an_empty_set_is_an_error() {
        let enc = json!({"kty": "RSA", "kid": "enc", "use": "enc", "e": "AQAB", "n": "AQAB"});
        let hmac = json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0"});
        let odd = json!({"kty": "what", "kid": "w"});
        let lying = ec("liar", Some("RS256"));
        let s = set(json!([enc, hmac, odd, lying, rsa("r1")]), ALL).expect("set");
        assert_eq!(s.ids(), vec!["r1"]);
        // Only ES256 allowed: the RSA key is of no use, and nothing is left.
        let err = set(json!([rsa("r1")]), &[Algorithm::ES256])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("no signing key for ES256"), "{err}");
        assert!(parse_jwks(b"{\"keys\": 5}", ALL).is_err());
    }

    #[test]
    fn the_discovery_document_must_be_the_issuers_and_name_an_https_key_set() {
        let doc = |iss: &str, jwks: &str| {
            json!({"issuer": iss, "jwks_uri": jwks, "token_endpoint": "x"}).to_string()
        };
        let d = parse_discovery(
            doc("https://id.example.com/", "https://id.example.com/jwks").as_bytes(),
            "https://id.example.com",
        )
        .expect("doc");
        assert_eq!(d.jwks_uri, "https://id.example.com/jwks");
        assert_eq!(d.issuer, "https://id.example.com/");
        let other = parse_discovery(
            doc("https://evil.example.com", "https://evil.example.com/jwks").as_bytes(),
            "https://id.example.com",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(other.contains("evil.example.com"), "{other}");
        let plain = parse_discovery(
            doc("https://id.example.com", "http://id.example.com/jwks").as_bytes(),
            "https://id.example.com",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(plain.contains("not https"), "{plain}");
        assert_eq!(
            discovery_url("https://id.example.com/realms/a/"),
            "https://id.example.com/realms/a/.well-known/openid-configuration"
        );
    }
}
