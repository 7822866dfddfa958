//! What the manager side answers: the shape of the answer a manager sidecar gives with no app behind
//! it. Pure.

use super::Scenario;

/// How many bytes a download asks for: the payload is the decimal count.
pub fn download_size(payload: &[u8]) -> usize {
    std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
        .min(super::body::MAX_BODY)
}

/// The event a request names.
pub fn scenario(event: &str) -> Option<Scenario> {
    match event {
        "noop" => Some(Scenario::Noop),
        "upload" => Some(Scenario::Upload),
        "download" => Some(Scenario::Download),
        _ => None,
    }
}

/// The Server-Timing entries a manager knows only at the end of a streamed answer.
pub fn timing_trailer(queue_us: u32, app_us: u32) -> String {
    format!(
        "queue;dur={}.{:03}, app;dur={}.{:03}",
        queue_us / 1000,
        queue_us % 1000,
        app_us / 1000,
        app_us % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_request() {
        assert_eq!(download_size(b"1048576"), 1_048_576);
        assert_eq!(download_size(b"x"), 0);
        assert_eq!(scenario("upload"), Some(Scenario::Upload));
        assert_eq!(scenario("noop"), Some(Scenario::Noop));
        assert_eq!(scenario("other"), None);
        assert_eq!(timing_trailer(1500, 12), "queue;dur=1.500, app;dur=0.012");
    }
}
