//! The linearizable read barrier.
//!
//! A read that must see every write acknowledged before it started first
//! obtains a *read index*: the leader confirms with a quorum that it is still
//! the leader and returns its commit index. A follower asks the leader for
//! it on the read-index call stream. The reader then waits until its own
//! node has applied that index and reads locally.
//!
//! Concurrent readers share rounds: one round runs at a time; every reader
//! that arrives while it runs joins the next one. A reader never joins a
//! round that began before it arrived, which is what keeps the read
//! linearizable.

use tokio::sync::{mpsc, oneshot};

use crate::error::RaftNodeError;

type Waiter = oneshot::Sender<Result<u64, RaftNodeError>>;

/// Hands out read indexes, one network round per batch of waiters.
#[derive(Debug, Clone)]
pub(crate) struct ReadBarrier {
    tx: mpsc::UnboundedSender<Waiter>,
}

impl ReadBarrier {
    /// Starts the batching task; `fetch` runs one round.
    pub(crate) fn spawn<F, Fut>(fetch: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<u64, RaftNodeError>> + Send,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Waiter>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut waiters = vec![first];
                while let Ok(w) = rx.try_recv() {
                    waiters.push(w);
                }
                let span = tracing::debug_span!("read_index_round", waiters = waiters.len());
                let result = tracing::Instrument::instrument(fetch(), span).await;
                for w in waiters {
                    let _ = w.send(result.clone());
                }
            }
        });
        Self { tx }
    }

    /// The read index of a round that started after this call.
    pub(crate) async fn read_index(&self) -> Result<u64, RaftNodeError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).map_err(|_| RaftNodeError::ShuttingDown)?;
        rx.await.map_err(|_| RaftNodeError::ShuttingDown)?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn concurrent_readers_share_rounds_and_never_join_an_earlier_round() {
        let rounds = Arc::new(AtomicU64::new(0));
        let (gate_tx, gate_rx) = tokio::sync::watch::channel(0u64);
        let counter = rounds.clone();
        let barrier = ReadBarrier::spawn(move || {
            let counter = counter.clone();
            let mut gate = gate_rx.clone();
            async move {
                let round = counter.fetch_add(1, Ordering::SeqCst) + 1;
                // Each round waits until the test lets it finish.
                gate.wait_for(|open| *open >= round)
                    .await
                    .map_err(|_| RaftNodeError::ShuttingDown)?;
                Ok(round)
            }
        });
        // Phase 1: one reader starts round 1, which blocks.
        let first = tokio::spawn({
            let b = barrier.clone();
            async move { b.read_index().await }
        });
        while rounds.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        // Phase 2: 50 readers arrive while round 1 runs: they must all share round 2.
        let late: Vec<_> = (0..50)
            .map(|_| {
                let b = barrier.clone();
                tokio::spawn(async move { b.read_index().await })
            })
            .collect();
        tokio::task::yield_now().await;
        gate_tx.send_replace(1);
        assert_eq!(first.await.expect("join").expect("round"), 1);
        gate_tx.send_replace(2);
        for r in late {
            assert_eq!(
                r.await.expect("join").expect("round"),
                2,
                "late readers must not reuse round 1"
            );
        }
        assert_eq!(rounds.load(Ordering::SeqCst), 2, "51 readers, 2 rounds");
    }
}
