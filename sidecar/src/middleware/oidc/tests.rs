//! The claim checks and the early-fetch rules of the OIDC gate, with keys made here (no issuer:
//! the tests in `tests/oidc.rs` run against a real one).

use super::keys::{Key, KeySet};
use super::*;
use hyper::HeaderMap;
use jsonwebtoken::{DecodingKey, EncodingKey, Header, encode};
use serde_json::json;

/// An issuer nothing listens at: the early fetches the tests cause fail at once.
const ISSUER: &str = "https://127.0.0.1:1";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// An ES256 key pair: the signing key and the verification key.
fn es256() -> (EncodingKey, DecodingKey) {
    let pair =
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("generate a key");
    let signing = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).expect("signing key");
    // The raw public key is the uncompressed point: 0x04, x, y.
    let raw = pair.public_key_raw();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let verifying = DecodingKey::from_ec_components(&b64(&raw[1..33]), &b64(&raw[33..]))
        .expect("verification key");
    (signing, verifying)
}

/// A gate for [`ISSUER`] and audiences `api` and `admin`, RS256 and ES256, with `keys` at hand
/// (none: not fetched yet).
fn gate(keys: Option<KeySet>) -> OidcGate {
    gate_for(vec![Algorithm::RS256, Algorithm::ES256], keys)
}

fn gate_for(algorithms: Vec<Algorithm>, keys: Option<KeySet>) -> OidcGate {
    let issuer = Arc::new(Issuer {
        url: ISSUER.into(),
        algorithms,
        fetcher: Fetcher::new(
            fetch::client_config(Some(include_bytes!(
                "../../../tests/fixtures/oidc-test-ca.pem"
            )))
            .expect("tls"),
        ),
        cached: ArcSwapOption::from_pointee(keys.map(|keys| Cached {
            issuer: format!("{ISSUER}/"),
            keys,
        })),
        early: Mutex::new(policy::EarlyFetches::default()),
        fetching: AtomicBool::new(false),
        fetched: watch::Sender::new(0),
        changes: watch::Sender::new(0),
    });
    OidcGate {
        issuer,
        audiences: vec!["api".into(), "admin".into()],
        leeway: Duration::from_secs(30),
        header: AUTHORIZATION,
    }
}

fn signed(kid: &str, claims: serde_json::Value, key: &EncodingKey) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.into());
    encode(&header, &claims, key).expect("sign")
}

fn with_key(kid: &str, verifying: DecodingKey) -> KeySet {
    let mut set = KeySet::default();
    set.insert(
        kid,
        Key {
            key: verifying,
            algorithm: Algorithm::ES256,
        },
    );
    set
}

fn headers(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        AUTHORIZATION,
        format!("Bearer {token}").parse().expect("header value"),
    );
    h
}

fn check(g: &OidcGate, token: &str) -> Result<Option<Token>, Denial> {
    g.check(&Head {
        headers: &headers(token),
        peer: "127.0.0.1".parse().expect("ip"),
    })
}

fn reason(g: &OidcGate, token: &str) -> &'static str {
    check(g, token).expect_err("refused").reason
}

#[test]
fn a_token_of_the_issuer_for_an_audience_passes_with_its_claims() {
    let (sign, verify) = es256();
    let g = gate(Some(with_key("k1", verify)));
    let exp = now() + 60;
    // The issuer with or without its trailing slash; `aud` as an array with one accepted value.
    for iss in [ISSUER.to_owned(), format!("{ISSUER}/")] {
        let t = signed(
            "k1",
            json!({"iss": iss, "aud": ["other", "admin"], "exp": exp, "sub": "u1"}),
            &sign,
        );
        let got = check(&g, &t).expect("admitted").expect("token");
        assert_eq!(got.claims["sub"], "u1");
        assert_eq!(
            got.expires,
            std::time::UNIX_EPOCH + Duration::from_secs(exp + 30)
        );
    }
}

#[test]
fn audience_issuer_and_expiry_mismatches_are_refused_by_name() {
    let (sign, verify) = es256();
    let g = gate(Some(with_key("k1", verify)));
    let aud = signed(
        "k1",
        json!({"iss": ISSUER, "aud": "billing", "exp": now() + 60}),
        &sign,
    );
    let d = check(&g, &aud).expect_err("wrong audience");
    assert_eq!(
        (d.middleware, d.reason, d.status),
        ("oidc", "wrong_audience", 401)
    );
    assert!(d.detail.contains("audience"), "{}", d.detail);

    let iss = signed(
        "k1",
        json!({"iss": "https://evil.example.com", "aud": "api", "exp": now() + 60}),
        &sign,
    );
    let d = check(&g, &iss).expect_err("wrong issuer");
    assert_eq!(d.reason, "wrong_issuer");
    assert!(d.detail.contains(ISSUER), "{}", d.detail);
    let no_iss = signed("k1", json!({"aud": "api", "exp": now() + 60}), &sign);
    assert_eq!(reason(&g, &no_iss), "wrong_issuer");

    let old = signed(
        "k1",
        json!({"iss": ISSUER, "aud": "api", "exp": now() - 3600}),
        &sign,
    );
    assert_eq!(reason(&g, &old), "expired");
    let no_exp = signed("k1", json!({"iss": ISSUER, "aud": "api"}), &sign);
    assert_eq!(reason(&g, &no_exp), "missing_claim");
    let (other, _) = es256();
    let forged = signed(
        "k1",
        json!({"iss": ISSUER, "aud": "api", "exp": now() + 60}),
        &other,
    );
    assert_eq!(reason(&g, &forged), "bad_signature");
    assert_eq!(reason(&g, "not.a.jwt"), "malformed");
}

#[test]
fn none_hs256_and_a_mismatched_key_algorithm_are_refused() {
    let (sign, verify) = es256();
    let g = gate(Some(with_key("k1", verify)));
    let claims = json!({"iss": ISSUER, "aud": "api", "exp": now() + 60});
    // HS256 "signed" with anything: never accepted from an issuer.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let hs = encode(&header, &claims, &EncodingKey::from_secret(b"k")).expect("sign");
    assert_eq!(reason(&g, &hs), "wrong_algorithm");
    // `alg: none`, unsigned.
    let b64 = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "kid": "k1"})),
        b64(claims.clone())
    );
    assert_eq!(reason(&g, &none), "malformed");
    // An RS256 header naming the ES256 key.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("k1".into());
    let rsa =
        EncodingKey::from_rsa_pem(include_bytes!("../../../tests/fixtures/jwt-rs256-test.key"))
            .expect("rsa key");
    let rs = encode(&header, &claims, &rsa).expect("sign");
    assert_eq!(reason(&g, &rs), "wrong_algorithm");
    // ES256 when the spec allows RS256 only.
    let rs_only = gate_for(vec![Algorithm::RS256], Some(with_key("k1", es256().1)));
    assert_eq!(
        reason(&rs_only, &signed("k1", claims, &sign)),
        "wrong_algorithm"
    );
}

#[test]
fn no_keys_yet_is_unavailable_not_unauthorized() {
    let (sign, _) = es256();
    let g = gate(None);
    let t = signed(
        "k1",
        json!({"iss": ISSUER, "aud": "api", "exp": now() + 60}),
        &sign,
    );
    let d = check(&g, &t).expect_err("no keys");
    assert_eq!((d.reason, d.status), ("keys_unavailable", 503));
    assert!(d.retry_after.is_some());
}

#[tokio::test]
async fn an_unknown_kid_asks_for_one_early_fetch_per_interval_and_another_issuer_for_none() {
    let (sign, verify) = es256();
    let g = gate(Some(with_key("k1", verify)));
    let head = |t: &str| headers(t);
    let peer = "127.0.0.1".parse().expect("ip");
    let ask = |t: &str| {
        g.prepare(&Head {
            headers: &head(t),
            peer,
        })
    };
    let claims = json!({"iss": ISSUER, "aud": "api", "exp": now() + 60});
    // A known kid needs no fetch.
    assert!(ask(&signed("k1", claims.clone(), &sign)).is_none());
    // Another issuer's token never causes one, whatever its kid.
    let foreign = json!({"iss": "https://evil.example.com", "aud": "api", "exp": now() + 60});
    assert!(ask(&signed("k9", foreign, &sign)).is_none());

    let unknown = signed("k2", claims, &sign);
    let wait = ask(&unknown).expect("an early fetch");
    // The fetch (of an unreachable issuer) ends, and the request is decided: still unknown.
    tokio::time::timeout(policy::EARLY_FETCH_WAIT * 2, wait)
        .await
        .expect("the wait is bounded");
    assert_eq!(reason(&g, &unknown), "unknown_key");
    assert!(g.issuer.cached.load().is_some(), "the keys at hand stay");
    // Within the interval no other early fetch starts.
    assert!(ask(&unknown).is_none());
}
