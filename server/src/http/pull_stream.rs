//! A streaming response body that runs its producer inside `poll_next`.
//!
//! The producer is an async fn that writes chunks through an [`Outbox`].
//! The body polls it whenever hyper asks for the next chunk, so a long
//! stream (a watch) has no task and no channel of its own:
//! - the producer runs on the task that already serves the connection (or
//!   the HTTP/2 stream);
//! - it runs only as fast as the client takes data, one chunk ahead;
//! - it ends when the body is dropped, i.e. when the client goes away.
//!
//! Hand-written rather than `async-stream`: the producer is a plain async
//! fn whose nested helpers send chunks. A `stream!` block's `yield` cannot
//! reach into helper functions, and the hand-off is a few lines.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;

/// The one chunk handed from the producer to the body.
type Slot = Arc<Mutex<Option<Bytes>>>;

fn take(slot: &Slot) -> Option<Bytes> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// The producer's end: where it sends chunks.
#[derive(Debug)]
pub struct Outbox {
    slot: Slot,
}

impl Outbox {
    /// Hands `chunk` to the body. Resolves once the body has passed it on
    /// and hyper asks for the next one.
    pub async fn send(&self, chunk: Bytes) {
        Handoff {
            slot: &self.slot,
            chunk: Some(chunk),
        }
        .await
    }
}

/// Puts the chunk in the slot and yields once. The body takes the chunk as
/// soon as the producer yields, so the next poll always finds the slot
/// empty. No waker is needed: the body returns the chunk to hyper in the
/// same poll, and hyper polls again when it wants more.
struct Handoff<'a> {
    slot: &'a Slot,
    chunk: Option<Bytes>,
}

impl Future for Handoff<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        match self.chunk.take() {
            Some(chunk) => {
                *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(chunk);
                Poll::Pending
            }
            None => Poll::Ready(()),
        }
    }
}

/// The body's end: a stream of the producer's chunks, ending when the
/// producer returns.
pub struct PullStream {
    producer: Pin<Box<dyn Future<Output = ()> + Send>>,
    slot: Slot,
    done: bool,
}

impl std::fmt::Debug for PullStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullStream")
            .field("done", &self.done)
            .finish()
    }
}

impl PullStream {
    /// A stream of what `produce` sends through its outbox.
    pub fn new<F, Fut>(produce: F) -> Self
    where
        F: FnOnce(Outbox) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let slot = Slot::default();
        let producer = produce(Outbox { slot: slot.clone() });
        Self {
            producer: Box::pin(producer),
            slot,
            done: false,
        }
    }
}

impl Stream for PullStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(take(&this.slot).map(Ok));
        }
        let finished = this.producer.as_mut().poll(cx).is_ready();
        this.done = finished;
        match take(&this.slot) {
            Some(chunk) => Poll::Ready(Some(Ok(chunk))),
            None if finished => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::{FutureExt, StreamExt};
    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn chunks_arrive_in_order_and_the_stream_ends_with_the_producer() {
        let mut stream = PullStream::new(|out| async move {
            for s in ["a", "b", "c"] {
                out.send(Bytes::from_static(s.as_bytes())).await;
            }
        });
        let mut got = Vec::new();
        while let Some(chunk) = stream.next().await {
            got.push(chunk.unwrap_or_default());
        }
        assert_eq!(got, vec!["a", "b", "c"]);
    }

    #[tokio::test]
    async fn a_waiting_producer_leaves_the_stream_pending_until_woken() {
        let (tx, rx) = oneshot::channel::<&'static str>();
        let mut stream = PullStream::new(|out| async move {
            if let Ok(s) = rx.await {
                out.send(Bytes::from_static(s.as_bytes())).await;
            }
        });
        assert!(stream.next().now_or_never().is_none(), "nothing sent yet");
        tx.send("late").ok();
        let chunk = stream.next().await.and_then(Result::ok);
        assert_eq!(chunk.as_deref(), Some(&b"late"[..]));
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn the_producer_runs_one_chunk_ahead_and_is_dropped_with_the_stream() {
        let (alive_tx, alive_rx) = oneshot::channel::<()>();
        let produced = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = produced.clone();
        let mut stream = PullStream::new(move |out| async move {
            let _alive = alive_tx;
            loop {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                out.send(Bytes::from_static(b"x")).await;
            }
        });
        for _ in 0..3 {
            assert!(stream.next().await.is_some());
        }
        assert_eq!(produced.load(std::sync::atomic::Ordering::SeqCst), 3);
        drop(stream);
        assert!(alive_rx.await.is_err(), "the producer was dropped");
    }
}
