//! Unpredictable bytes from the operating system (ring's `SystemRandom`), for serial numbers and
//! the tokens `switchyard up` hands its sidecars.

use ring::rand::SecureRandom as _;

/// `N` random bytes; `None` only when the operating system has no randomness to give.
pub fn bytes<const N: usize>() -> Option<[u8; N]> {
    let mut out = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut out).ok()?;
    Some(out)
}

/// A random token of 32 bytes, hex-encoded.
pub fn token() -> Option<String> {
    let b: [u8; 32] = bytes()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}
