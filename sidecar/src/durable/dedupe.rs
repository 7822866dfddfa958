//! Scoped dedupe ids and payload digests of durable publishes. Pure: no I/O.
//!
//! A Manager's stream is shared by all its event types and by every publisher, while a client's
//! key (`Idempotency-Key`, `ce-id`) is only unique to that client. So the stream's `Nats-Msg-Id` is
//! not the key but [`scoped_id`] of (event type, publisher, key): the same key used for another
//! type or by another publisher is another event, and a publisher cannot guess its way into a
//! victim's scope. The app still receives the key as `ce-id`, and `ce-source` names the
//! publisher, so (source, id) is unique as CloudEvents defines it.
//!
//! A publish the stream reports as a duplicate is a retry only when it carries the same event:
//! each stored event keeps the [`digest`] of its payload, and [`replay`] compares the stored one
//! with the retry's.

use ring::digest::{Context, SHA256};

/// Prefix of a scoped id: names the derivation, so a later one can never equal this one's ids.
const SCOPED_PREFIX: &str = "sy1-";
/// Hex digits kept of a SHA-256 (128 bits): ample against collisions and guesses, and short in
/// the server's memory, which holds every id of the duplicate window.
const DIGITS: u32 = 32;

/// The stream's dedupe id of `key` published as `event` by `publisher`: `sy1-` and 32 hex digits
/// of a SHA-256 over the three, each length-prefixed (so no two triples write the same bytes).
pub(crate) fn scoped_id(event: &str, publisher: &str, key: &str) -> String {
    let mut h = Context::new(&SHA256);
    for part in [event, publisher, key] {
        h.update(&(part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let mut id = String::with_capacity(SCOPED_PREFIX.len() + DIGITS as usize);
    id.push_str(SCOPED_PREFIX);
    crate::hex::push(&mut id, head(h.finish().as_ref()), DIGITS);
    id
}

/// The digest of an event's content (its media type and payload), 32 hex digits of a SHA-256: what
/// a retry must match to be the same event.
pub(crate) fn digest(content_type: Option<&str>, payload: &[u8]) -> String {
    let mut h = Context::new(&SHA256);
    let ct = content_type.unwrap_or("");
    h.update(&(ct.len() as u64).to_be_bytes());
    h.update(ct.as_bytes());
    h.update(payload);
    let mut d = String::with_capacity(DIGITS as usize);
    crate::hex::push(&mut d, head(h.finish().as_ref()), DIGITS);
    d
}

/// The first 16 bytes of a digest, big-endian.
fn head(bytes: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&bytes[..16]);
    u128::from_be_bytes(b)
}

/// What a publish the stream reported as a duplicate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// The stored event has the same content: a retry, kept the first time (202).
    Same,
    /// The stored event has other content: the key was reused for another event (409).
    Conflict,
    /// The stored event cannot be compared: it was delivered and removed already, or stored by a
    /// sidecar that kept no digest. Taken as the retry it most likely is (202).
    Unknown,
}

/// Compares the digest `stored` with (`None`: no stored event, or one without a digest) to the
/// retry's digest `ours`.
pub(crate) fn replay(stored: Option<&str>, ours: &str) -> Replay {
    match stored {
        None => Replay::Unknown,
        Some(s) if s == ours => Replay::Same,
        Some(_) => Replay::Conflict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_id_is_bounded_and_stable() {
        let id = scoped_id("orders.created", "/switchyard/shop/cart", "order-42");
        assert_eq!(id.len(), 4 + 32, "{id}");
        assert!(id.starts_with("sy1-"));
        assert!(id[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert_eq!(
            id,
            scoped_id("orders.created", "/switchyard/shop/cart", "order-42")
        );
        // However long the key, the id is not longer.
        let long = "k".repeat(255);
        assert_eq!(scoped_id("t", "p", &long).len(), 36);
    }

    #[test]
    fn one_key_is_another_id_for_another_type_or_publisher() {
        let base = scoped_id("orders.created", "/switchyard/shop/cart", "order-42");
        assert_ne!(
            base,
            scoped_id("orders.paid", "/switchyard/shop/cart", "order-42")
        );
        assert_ne!(
            base,
            scoped_id("orders.created", "/switchyard/shop/billing", "order-42")
        );
        assert_ne!(
            base,
            scoped_id("orders.created", "/switchyard/other/cart", "order-42")
        );
        assert_ne!(
            base,
            scoped_id("orders.created", "/switchyard/shop/cart", "order-43")
        );
    }

    #[test]
    fn moving_bytes_between_the_parts_changes_the_id() {
        // Without the length prefixes these three would hash the same bytes.
        let a = scoped_id("ab", "c", "d");
        let b = scoped_id("a", "bc", "d");
        let c = scoped_id("a", "b", "cd");
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_ne!(a, c);
    }

    #[test]
    fn the_digest_covers_the_payload_and_its_media_type() {
        let d = digest(None, b"{\"n\":1}");
        assert_eq!(d.len(), 32);
        assert_eq!(d, digest(None, b"{\"n\":1}"));
        assert_ne!(d, digest(None, b"{\"n\":2}"));
        assert_ne!(d, digest(Some("text/plain"), b"{\"n\":1}"));
        // The media type's bytes cannot slide into the payload's.
        assert_ne!(digest(Some("a"), b"b"), digest(Some("ab"), b""));
    }

    #[test]
    fn a_duplicate_is_a_retry_only_with_the_same_content() {
        let ours = digest(None, b"x");
        assert_eq!(replay(Some(&ours), &ours), Replay::Same);
        assert_eq!(replay(Some(&digest(None, b"y")), &ours), Replay::Conflict);
        assert_eq!(replay(None, &ours), Replay::Unknown);
    }
}
