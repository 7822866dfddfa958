//! The manager's drain as the admin port sees it (pure but for tokio's clock): `GET /drain` starts
//! it and answers once it is over; `GET /drained` starts nothing and answers once a drain has
//! started and finished. The operator makes the first the sidecar's preStop hook (run inside its
//! container, so on loopback, the only place `/drain` answers) and the second the app's (an
//! httpGet from the node: it may be asked by anyone, since it changes nothing).
//!
//! Why two: the kubelet runs every container's preStop hook when a pod starts stopping, but sends
//! a native sidecar SIGTERM only after the app has exited. So the drain starts from the sidecar's
//! own hook, and the app's hook holds the app up until the drain is over, for the deliveries the
//! manager had accepted, and no longer: an idle pod stops at once.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long `/drained` waits for a drain to start. The kubelet starts the pod's preStop hooks
/// together, and the app's httpGet (one request from the kubelet) usually arrives before the
/// sidecar's exec hook (the runtime starts a process, which connects) has started the drain; so
/// answering at once when no drain is running would let the app stop while the drain that is
/// about to start still has deliveries for it. Five seconds is ample for an exec even on a busy
/// node. The cost is paid only where no drain comes at all: a stop whose sidecar hook failed waits
/// this long, and a stranger's `/drained` holds one connection (under the admin port's caps) for
/// this long.
pub(super) const START_WINDOW: Duration = Duration::from_secs(5);

/// How long past the drain limit a drain's waiters wait before answering that it did not finish:
/// the drain ends itself at the limit, so its end, not this, is what answers them.
const ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// The longest a drain is awaited once it has started.
pub(super) const FINISH_WAIT: Duration =
    Duration::from_secs(crate::shutdown::DRAIN_LIMIT.as_secs() + ANSWER_MARGIN.as_secs());

/// How a wait for the drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waited {
    /// The drain is over.
    Drained,
    /// No drain started within [`START_WINDOW`] (`/drained` only): nothing to wait for.
    NoneStarted,
    /// The drain started but was not over within [`FINISH_WAIT`].
    NotFinished,
}

/// The manager's drain, shared by the role (which runs it) and the admin port (which starts and
/// awaits it).
#[derive(Clone, Debug, Default)]
pub(crate) struct DrainHook {
    /// `/drain` was asked for.
    asked: CancellationToken,
    /// A drain began, whatever started it (`/drain` or a signal).
    began: CancellationToken,
    /// The drain is over.
    done: CancellationToken,
}

impl DrainHook {
    /// Resolves once `/drain` was asked for.
    pub(crate) async fn requested(&self) {
        self.asked.cancelled().await;
    }

    /// Marks the drain as begun, by `/drain` or by a signal: `/drained` now waits for its end.
    pub(crate) fn begin(&self) {
        self.began.cancel();
    }

    /// Marks the drain as over: waiting `/drain` and `/drained` requests answer.
    pub(crate) fn finish(&self) {
        self.began.cancel();
        self.done.cancel();
    }

    /// `/drain`: starts the drain (as SIGTERM would) and waits for its end.
    pub(super) async fn drain(&self) -> Waited {
        self.asked.cancel();
        self.finished().await
    }

    /// `/drained`: waits, starting nothing, for a drain to begin within [`START_WINDOW`] and then
    /// for its end. At most `START_WINDOW + FINISH_WAIT`.
    pub(super) async fn drained(&self) -> Waited {
        if self.done.is_cancelled() {
            return Waited::Drained;
        }
        if tokio::time::timeout(START_WINDOW, self.began.cancelled())
            .await
            .is_err()
        {
            return Waited::NoneStarted;
        }
        self.finished().await
    }

    async fn finished(&self) -> Waited {
        match tokio::time::timeout(FINISH_WAIT, self.done.cancelled()).await {
            Ok(()) => Waited::Drained,
            Err(_) => Waited::NotFinished,
        }
    }
}

// Time is paused: tokio moves the clock to the next timer when every task waits, so these tests
// take no real time and the instants they check are exact.
#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::{Instant, sleep};

    /// Runs `wait` against a drain that a spawned task begins after `begin_after` (never: `None`)
    /// and finishes `run` later; how the wait ended and when.
    async fn waited_with(
        hook: &DrainHook,
        begin_after: Option<Duration>,
        run: Duration,
        wait: impl std::future::Future<Output = Waited>,
    ) -> (Waited, Duration) {
        let start = Instant::now();
        if let Some(after) = begin_after {
            let h = hook.clone();
            tokio::spawn(async move {
                sleep(after).await;
                h.begin();
                sleep(run).await;
                h.finish();
            });
        }
        let waited = wait.await;
        (waited, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn drained_waits_for_a_drain_that_begins_just_after_it_is_asked() {
        let hook = DrainHook::default();
        let s = Duration::from_secs;
        let (w, at) = waited_with(&hook, Some(s(1)), s(10), hook.drained()).await;
        assert_eq!((w, at), (Waited::Drained, s(11)));
        assert!(
            !hook.asked.is_cancelled(),
            "/drained asked for a drain itself"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn drained_answers_at_the_drains_end_not_at_a_fixed_time() {
        let hook = DrainHook::default();
        let ms = Duration::from_millis;
        let (w, at) = waited_with(&hook, Some(ms(200)), ms(50), hook.drained()).await;
        assert_eq!((w, at), (Waited::Drained, ms(250)));
    }

    #[tokio::test(start_paused = true)]
    async fn drained_with_no_drain_gives_up_after_the_start_window_and_starts_nothing() {
        let hook = DrainHook::default();
        let (w, at) = waited_with(&hook, None, Duration::ZERO, hook.drained()).await;
        assert_eq!((w, at), (Waited::NoneStarted, START_WINDOW));
        assert!(!hook.asked.is_cancelled() && !hook.began.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn drained_after_the_drain_answers_at_once() {
        let hook = DrainHook::default();
        hook.begin();
        hook.finish();
        let (w, at) = waited_with(&hook, None, Duration::ZERO, hook.drained()).await;
        assert_eq!((w, at), (Waited::Drained, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn drained_is_bounded_when_the_drain_never_ends() {
        let hook = DrainHook::default();
        let s = Duration::from_secs;
        // Begun at the last moment of the start window and never finished: the longest wait.
        let late = START_WINDOW - Duration::from_millis(1);
        let (w, at) = waited_with(&hook, Some(late), s(3600), hook.drained()).await;
        assert_eq!((w, at), (Waited::NotFinished, late + FINISH_WAIT));
        assert!(at < START_WINDOW + FINISH_WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn drained_sees_a_drain_a_signal_began() {
        let hook = DrainHook::default();
        hook.begin();
        let ms = Duration::from_millis;
        let h = hook.clone();
        tokio::spawn(async move {
            sleep(ms(300)).await;
            h.finish();
        });
        let (w, at) = waited_with(&hook, None, Duration::ZERO, hook.drained()).await;
        assert_eq!((w, at), (Waited::Drained, ms(300)));
    }

    #[tokio::test(start_paused = true)]
    async fn drain_asks_for_the_drain_and_waits_for_its_end() {
        let hook = DrainHook::default();
        let h = hook.clone();
        let role = tokio::spawn(async move {
            h.requested().await;
            h.begin();
            sleep(Duration::from_secs(4)).await;
            h.finish();
        });
        let (w, at) = waited_with(&hook, None, Duration::ZERO, hook.drain()).await;
        assert_eq!((w, at), (Waited::Drained, Duration::from_secs(4)));
        role.await.expect("the role's side");
    }
}
