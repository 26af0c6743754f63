//! The drain signal as a client connection's task waits for it: looked at again only once it
//! has fired.
//!
//! A connection's task is polled at each of its reads, writes and answers, and the drain signal
//! beside the connection ([`super::HttpServer`]) with it. Polled as it is,
//! `CancellationToken::cancelled()` takes the token's mutex and the mutex of tokio's `Notify` at
//! every poll (tokio-util `src/sync/cancellation_token.rs`, `WaitForCancellationFuture::poll`;
//! tokio `src/sync/notify.rs`, `Notified::poll_notified`): eight locked instructions per request
//! over HTTP/2, each a full memory barrier, for a signal that fires once in the process's life
//! (bench/PERF_NOTES.md, thirty-eighth round).
//!
//! [`Drain`] gives the token's future a waker of its own, which raises a flag and wakes the
//! task. The future is polled once, to register, and after that only when the flag is up; every
//! other poll reads the flag, a plain load.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Ready once `drain` is cancelled (as `drain.cancelled()`), cheap to poll until then.
pub(crate) struct Drain<'a> {
    cancelled: Pin<Box<WaitForCancellationFuture<'a>>>,
    signal: Arc<Signal>,
    /// The task's waker `signal` holds, to tell whether the task changed (never, for a
    /// connection's task, but a future may be moved to another).
    registered: Option<Waker>,
}

/// The token's future's waker: the flag, and the task to wake.
struct Signal {
    fired: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

impl<'a> Drain<'a> {
    pub(crate) fn new(drain: &'a CancellationToken) -> Self {
        Self {
            cancelled: Box::pin(drain.cancelled()),
            signal: Arc::new(Signal {
                fired: AtomicBool::new(false),
                task: Mutex::new(None),
            }),
            registered: None,
        }
    }
}

impl Future for Drain<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            if !this.signal.fired.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        } else {
            *this
                .signal
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            this.registered = Some(cx.waker().clone());
        }
        // Lowered before the poll: a wake from now on is seen by it or raises the flag again.
        this.signal.fired.store(false, Ordering::Release);
        let waker = Waker::from(this.signal.clone());
        this.cancelled
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A task's waker that counts its wakes.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(drain: &mut Drain<'_>, task: &Arc<Task>) -> Poll<()> {
        let waker = Waker::from(task.clone());
        Pin::new(drain).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_drain_wakes_the_task_and_completes() {
        let token = CancellationToken::new();
        let task = Arc::new(Task::default());
        let mut drain = Drain::new(&token);
        for _ in 0..3 {
            assert!(poll(&mut drain, &task).is_pending());
        }
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        token.cancel();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "the task is woken");
        assert!(poll(&mut drain, &task).is_ready());
    }

    #[test]
    fn a_drain_wakes_the_task_that_polled_last() {
        let token = CancellationToken::new();
        let (first, second) = (Arc::new(Task::default()), Arc::new(Task::default()));
        let mut drain = Drain::new(&token);
        assert!(poll(&mut drain, &first).is_pending());
        assert!(poll(&mut drain, &second).is_pending());
        token.cancel();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(poll(&mut drain, &second).is_ready());
    }

    #[test]
    fn a_drain_already_fired_completes_at_its_first_poll() {
        let token = CancellationToken::new();
        token.cancel();
        let mut drain = Drain::new(&token);
        assert!(poll(&mut drain, &Arc::new(Task::default())).is_ready());
    }
}
