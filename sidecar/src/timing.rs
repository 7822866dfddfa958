//! The `Server-Timing` model: durations of the stages a request went through, and their header form.
//!
//! Pure. Stages are measured on contiguous timestamps by the listener, so the parts add up to the total;
//! `net` is derived (round trip minus the manager's queue and app time) because the two hosts' clocks
//! cannot be compared.

use std::time::Duration;

/// Durations of the stages a request reached; `None` for stages it never got to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Reading and checking the request, and writing the response.
    pub listener: Option<Duration>,
    /// Waiting for admission and for flow-control credit.
    pub broker: Option<Duration>,
    /// Choosing a manager endpoint and handing the frame to its connection.
    pub router: Option<Duration>,
    /// Network and framing between the router and manager sidecars.
    pub net: Option<Duration>,
    /// Time the event waited in the manager's queue.
    pub queue: Option<Duration>,
    /// Time the app took.
    pub app: Option<Duration>,
    /// Wall time of the whole request at the router.
    pub total: Duration,
    /// Trace id shown as `trace;desc=<id>` when tracing is on.
    pub trace_id: Option<u128>,
}

impl StageTimes {
    /// Splits a router round trip into `net`, `queue` and `app`; `net` never goes below zero.
    pub fn set_round_trip(&mut self, round_trip: Duration, queue: Duration, app: Duration) {
        self.queue = Some(queue);
        self.app = Some(app);
        self.net = Some(round_trip.saturating_sub(queue + app));
    }

    /// The header value, e.g. `listener;dur=0.120, ..., total;dur=1.234` (milliseconds, 3 decimals).
    pub fn header_value(&self) -> String {
        let mut out = String::with_capacity(128);
        let stages = [
            ("listener", self.listener),
            ("broker", self.broker),
            ("router", self.router),
            ("net", self.net),
            ("queue", self.queue),
            ("app", self.app),
        ];
        for (name, dur) in stages {
            if let Some(d) = dur {
                push_entry(&mut out, name, d);
            }
        }
        push_entry(&mut out, "total", self.total);
        if let Some(id) = self.trace_id {
            out.push_str(", trace;desc=");
            crate::hex::push(&mut out, id, 32);
        }
        out
    }
}

fn push_entry(out: &mut String, name: &str, d: Duration) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    // Integer microseconds avoid float formatting drift: 1234 us -> "1.234". Written without
    // `core::fmt`, which was a visible share of the router's time per request.
    let us = d.as_micros();
    out.push_str(name);
    out.push_str(";dur=");
    out.push_str(itoa::Buffer::new().format(us / 1000));
    out.push('.');
    let frac = us % 1000;
    for place in [100, 10, 1] {
        out.push(char::from(b'0' + (frac / place % 10) as u8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn formats_all_stages_in_order_with_three_decimals() {
        let mut t = StageTimes {
            listener: Some(us(120)),
            broker: Some(us(3)),
            router: Some(us(1_000)),
            total: us(12_345),
            ..StageTimes::default()
        };
        t.set_round_trip(us(11_222), us(200), us(10_000));
        assert_eq!(
            t.header_value(),
            "listener;dur=0.120, broker;dur=0.003, router;dur=1.000, net;dur=1.022, queue;dur=0.200, \
             app;dur=10.000, total;dur=12.345"
        );
    }

    #[test]
    fn errors_show_only_the_stages_reached() {
        let t = StageTimes {
            listener: Some(us(50)),
            total: us(51),
            ..StageTimes::default()
        };
        assert_eq!(t.header_value(), "listener;dur=0.050, total;dur=0.051");
    }

    #[test]
    fn trace_id_comes_last_as_32_hex_digits() {
        let t = StageTimes {
            total: us(7),
            trace_id: Some(0x0af7651916cd43dd8448eb211c80319c),
            ..StageTimes::default()
        };
        assert_eq!(
            t.header_value(),
            "total;dur=0.007, trace;desc=0af7651916cd43dd8448eb211c80319c"
        );
        let t = StageTimes {
            trace_id: Some(1),
            ..StageTimes::default()
        };
        assert!(
            t.header_value()
                .ends_with("trace;desc=00000000000000000000000000000001")
        );
    }

    #[test]
    fn durations_keep_every_digit_of_whole_milliseconds_and_pad_the_fraction() {
        for (micros, shown) in [
            (0, "total;dur=0.000"),
            (9, "total;dur=0.009"),
            (90, "total;dur=0.090"),
            (1_000, "total;dur=1.000"),
            (1_010, "total;dur=1.010"),
            (123_456_789, "total;dur=123456.789"),
        ] {
            let t = StageTimes {
                total: us(micros),
                ..StageTimes::default()
            };
            assert_eq!(t.header_value(), shown);
        }
    }

    #[test]
    fn net_is_clamped_at_zero() {
        let mut t = StageTimes::default();
        t.set_round_trip(us(100), us(80), us(80));
        assert_eq!(t.net, Some(Duration::ZERO));
    }
}
