//! Issue 14's streaming bars as `benches/run`'s `streams` section records them: the lines
//! `sidecar/tests/streaming.rs` prints (kept in `streams.txt`), read back into numbers. The test itself
//! asserts order and completeness (a failed test leaves no file); this reads what it measured so the
//! run's table carries those bars beside the others.

/// What the streaming tests measured; `None` where a line is missing or unreadable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamBars {
    /// From the SSE request to the first event's bytes at the client, ms.
    pub first_sse_ms: Option<f64>,
    /// Largest RSS of either sidecar during the 1 GiB download, MiB.
    pub download_rss_mib: Option<f64>,
    /// Largest RSS of either sidecar during the 1 GiB upload, MiB.
    pub upload_rss_mib: Option<f64>,
}

impl StreamBars {
    /// Reads the lines of `streams.txt`.
    pub fn parse(text: &str) -> StreamBars {
        let mut out = StreamBars::default();
        for line in text.lines() {
            if let Some((_, rest)) = line.split_once("first SSE event after ") {
                out.first_sse_ms = rest
                    .split_once(" ms")
                    .and_then(|(n, _)| n.trim().parse().ok());
            } else if let Some(rest) = line.strip_prefix("download: ") {
                out.download_rss_mib = largest_mib(rest);
            } else if let Some(rest) = line.strip_prefix("upload: ") {
                out.upload_rss_mib = largest_mib(rest);
            }
        }
        out
    }
}

/// The largest of the KiB figures after `peak` and `VmHWM` in an RSS line, in MiB: the sampled peak and the
/// kernel's high-water mark of each sidecar (`VmRSS router 22388 -> peak 22944 KiB (VmHWM 22736),
/// manager ...`). Samples can miss a short peak and the mark is read once, so the larger counts.
/// Both figures of both sidecars, or nothing: a bound judged on half the line would pass on half.
fn largest_mib(line: &str) -> Option<f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let figures: Vec<f64> = words
        .windows(2)
        .filter(|w| w[0] == "peak" || w[0].ends_with("VmHWM"))
        .filter_map(|w| {
            w[1].trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse::<f64>()
                .ok()
        })
        .collect();
    if figures.len() != 4 {
        return None;
    }
    figures.into_iter().reduce(f64::max).map(|kib| kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of a real run (2026-12-04, release build).
    const RUN: &str = "\
test a_1_gib_download_streams_through_with_both_sidecars_memory_bounded ... 1 GiB download in 3.1 s (325 MiB/s)
download: VmRSS router 22388 -> peak 22944 KiB (VmHWM 22736), manager 11868 -> peak 13684 KiB (VmHWM 13476)
test a_1_gib_upload_streams_to_the_app_with_both_sidecars_memory_bounded ... 1 GiB upload in 1.5 s (665 MiB/s)
upload: VmRSS router 22196 -> peak 22476 KiB (VmHWM 22296), manager 12048 -> peak 12848 KiB (VmHWM 12848)
test an_sse_stream_of_10000_events_arrives_in_order_as_the_app_writes_it ... first SSE event after 4.076 ms (request sent to first body bytes); all 10000 after 98.2 ms
test grpc_call_stream_relays_the_apps_streamed_answer_as_it_comes ... CallStream: 10000 events in 10002 messages, first body after 4.344943ms, all after 53.132438ms
";

    #[test]
    fn a_runs_lines_give_every_bar() {
        let s = StreamBars::parse(RUN);
        assert_eq!(s.first_sse_ms, Some(4.076));
        assert_eq!(s.download_rss_mib, Some(22944.0 / 1024.0));
        assert_eq!(s.upload_rss_mib, Some(22476.0 / 1024.0));
    }

    #[test]
    fn the_high_water_mark_counts_when_it_is_above_the_samples() {
        let s = StreamBars::parse(
            "download: VmRSS router 100 -> peak 200 KiB (VmHWM 40960), manager 1 -> peak 2 KiB (VmHWM 3)",
        );
        assert_eq!(s.download_rss_mib, Some(40.0));
    }

    #[test]
    fn missing_or_garbled_lines_are_not_measured() {
        assert_eq!(StreamBars::parse(""), StreamBars::default());
        let s = StreamBars::parse(
            "first SSE event after soon ms\n\
             download: VmRSS router gone\n\
             upload: VmRSS router 1 -> peak 2 KiB (VmHWM 3), manager 4 -> peak gone KiB (VmHWM 5)\n",
        );
        assert_eq!(s, StreamBars::default());
    }
}
