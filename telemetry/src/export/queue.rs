//! The queue of ended spans, shared by the request threads that fill it and the export thread
//! that empties it.
//!
//! A request thread takes one short lock to append a span and never waits: at
//! `OTEL_BSP_MAX_QUEUE_SIZE` spans (the batch being sent counts) the span is dropped and
//! counted instead. It wakes the export thread when a batch is full.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::stats::{DropReason, ExportStats};
use crate::otlp::SpanRecord;

/// The queue, the export thread's wake-up call, and the export counters.
pub(super) struct Shared {
    queue: Mutex<Queue>,
    pub(super) wake: Condvar,
    pub(super) stats: ExportStats,
    pub(super) max_queue: usize,
    pub(super) max_batch: usize,
}

/// What the lock guards.
pub(super) struct Queue {
    pub(super) spans: VecDeque<SpanRecord>,
    /// Spans taken for the request being sent: they count against `max_queue`.
    pub(super) in_flight: usize,
    /// When shutdown began.
    pub(super) stop: Option<Instant>,
}

impl Shared {
    /// An empty queue of `max_queue` spans at most, taken `max_batch` at a time (at most
    /// `max_queue`).
    pub(super) fn new(max_queue: usize, max_batch: usize) -> Self {
        let max_batch = max_batch.min(max_queue);
        Self {
            queue: Mutex::new(Queue {
                spans: VecDeque::with_capacity(max_batch),
                in_flight: 0,
                stop: None,
            }),
            wake: Condvar::new(),
            stats: ExportStats::default(),
            max_queue,
            max_batch,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues an ended span; drops it (counted) when the queue is full or export has stopped.
    pub(super) fn push(&self, span: SpanRecord) {
        let mut q = self.lock();
        if q.stop.is_some() || q.spans.len() + q.in_flight >= self.max_queue {
            drop(q);
            self.stats.dropped(DropReason::QueueFull, 1);
            return;
        }
        q.spans.push_back(span);
        if q.spans.len() == self.max_batch {
            self.wake.notify_one();
        }
    }

    /// Spans waiting, the batch being sent included.
    pub(super) fn len(&self) -> usize {
        let q = self.lock();
        q.spans.len() + q.in_flight
    }
}
