//! etcd's Watch service: one bidirectional stream carries many watchers.
//!
//! Each watcher is a task with a cursor into the node's revision-ordered
//! event log (the same on every node), woken by the applied-state channel.
//! All of a stream's watchers send into one bounded channel, so responses
//! are ordered per watcher, a slow client only holds back its own stream,
//! and a watcher holds no more than one batch in memory.
//!
//! Invariants:
//! - Events are delivered in revision order, each exactly once, and the
//!   events of one revision are never split across responses (except with
//!   `fragment`, where the pieces are flagged as etcd does).
//! - A progress response claims revision `R` only once every watcher of
//!   the stream has sent all its events up to `R` into the channel ahead
//!   of it.
//! - A start revision below the compaction point answers `created`, then a
//!   response with `compact_revision` set and `canceled`, as etcd does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::etcdserverpb::watch_server::Watch;
use kubestore_proto::etcd::mvccpb;
use kubestore_storage::{EventKind, KeyRange, Revision, StoreError};
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::context::Context;
use super::convert;

/// Responses buffered per stream before its watchers wait.
const STREAM_QUEUE: usize = 64;
/// Revisions read from the event log per step.
const EVENT_BATCH: usize = 256;
/// A response is cut at a revision boundary beyond this many bytes of
/// events; with `fragment`, a single revision is cut too.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// etcd's id of a response that belongs to no single watcher.
const STREAM_WIDE_ID: i64 = -1;

#[derive(Debug, Clone)]
pub struct WatchService(pub(super) Context);

type Outbound = mpsc::Sender<Result<pb::WatchResponse, Status>>;

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let session = Session {
            ctx: self.0.clone(),
            tx,
            watchers: HashMap::new(),
            next_id: 0,
            delivered: Arc::new(Mutex::new(BTreeMap::new())),
        };
        let span = tracing::info_span!("etcd_watch_stream", node = self.0.node.id());
        tokio::spawn(tracing::Instrument::instrument(session.run(inbound), span));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Per watcher: the revision it has sent everything up to.
type Delivered = Arc<Mutex<BTreeMap<i64, u64>>>;

struct Session {
    ctx: Context,
    tx: Outbound,
    watchers: HashMap<i64, JoinHandle<()>>,
    next_id: i64,
    delivered: Delivered,
}

/// What one watcher selects.
#[derive(Debug, Clone)]
struct Spec {
    id: i64,
    range: KeyRange,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
    fragment: bool,
}

fn lock(d: &Delivered) -> std::sync::MutexGuard<'_, BTreeMap<i64, u64>> {
    d.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Session {
    async fn run(mut self, mut inbound: Streaming<pb::WatchRequest>) {
        loop {
            let next = tokio::select! {
                next = inbound.message() => next,
                _ = self.tx.closed() => break,
                _ = self.ctx.stopped() => break,
            };
            let req = match next {
                Ok(Some(req)) => req,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "watch stream ended");
                    break;
                }
            };
            use pb::watch_request::RequestUnion;
            let ok = match req.request_union {
                Some(RequestUnion::CreateRequest(c)) => self.create(c).await,
                Some(RequestUnion::CancelRequest(c)) => self.cancel(c.watch_id).await,
                Some(RequestUnion::ProgressRequest(_)) => self.progress().await,
                None => true,
            };
            if !ok {
                break;
            }
        }
        for (_, task) in self.watchers.drain() {
            task.abort();
        }
    }

    async fn send(&self, resp: pb::WatchResponse) -> bool {
        self.tx.send(Ok(resp)).await.is_ok()
    }

    async fn create(&mut self, c: pb::WatchCreateRequest) -> bool {
        let id = if c.watch_id != 0 {
            c.watch_id
        } else {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id
        };
        let current = self.ctx.node.store().applied().revision.0;
        if self.watchers.contains_key(&id) || c.key.is_empty() {
            let reason = if c.key.is_empty() {
                "etcdserver: key is not provided"
            } else {
                "etcdserver: duplicate watch ID"
            };
            return self
                .send(pb::WatchResponse {
                    header: self.ctx.header(current),
                    watch_id: id,
                    created: true,
                    canceled: true,
                    cancel_reason: reason.into(),
                    ..Default::default()
                })
                .await;
        }
        let spec = Spec {
            id,
            range: KeyRange {
                key: c.key,
                range_end: c.range_end,
            },
            prev_kv: c.prev_kv,
            no_put: c
                .filters
                .contains(&(pb::watch_create_request::FilterType::Noput as i32)),
            no_delete: c
                .filters
                .contains(&(pb::watch_create_request::FilterType::Nodelete as i32)),
            progress_notify: c.progress_notify,
            fragment: c.fragment,
        };
        // Start right after the requested revision, or from now.
        let after = if c.start_revision > 0 {
            c.start_revision as u64 - 1
        } else {
            current
        };
        lock(&self.delivered).insert(id, after.min(current));
        if !self
            .send(pb::WatchResponse {
                header: self.ctx.header(current),
                watch_id: id,
                created: true,
                ..Default::default()
            })
            .await
        {
            return false;
        }
        let follower = Follower {
            ctx: self.ctx.clone(),
            tx: self.tx.clone(),
            delivered: self.delivered.clone(),
            spec,
        };
        let span = tracing::debug_span!("etcd_watcher", id, after);
        self.watchers.insert(
            id,
            tokio::spawn(tracing::Instrument::instrument(follower.run(after), span)),
        );
        true
    }

    async fn cancel(&mut self, id: i64) -> bool {
        if let Some(task) = self.watchers.remove(&id) {
            task.abort();
            lock(&self.delivered).remove(&id);
        }
        let current = self.ctx.node.store().applied().revision.0;
        self.send(pb::WatchResponse {
            header: self.ctx.header(current),
            watch_id: id,
            canceled: true,
            ..Default::default()
        })
        .await
    }

    /// A progress response at the newest revision every watcher of the
    /// stream has fully sent.
    async fn progress(&self) -> bool {
        let current = self.ctx.node.store().applied().revision.0;
        let revision = lock(&self.delivered)
            .values()
            .copied()
            .min()
            .unwrap_or(current);
        self.send(pb::WatchResponse {
            header: self.ctx.header(revision),
            watch_id: STREAM_WIDE_ID,
            ..Default::default()
        })
        .await
    }
}

struct Follower {
    ctx: Context,
    tx: Outbound,
    delivered: Delivered,
    spec: Spec,
}

/// Why a watcher stops.
enum Stop {
    ClientGone,
    Cancelled,
}

impl Follower {
    async fn run(self, mut after: u64) {
        let store = self.ctx.node.store().clone();
        let mut applied = store.subscribe();
        let interval = self.ctx.options.progress_notify_interval;
        let mut next_progress = tokio::time::Instant::now() + interval;
        loop {
            loop {
                let current = store.applied().revision.0;
                let read = store
                    .run_blocking(move |s| s.events_after(Revision(after), EVENT_BATCH))
                    .await;
                match read {
                    Ok(batch) if batch.is_empty() => {
                        after = after.max(current);
                        self.publish(after);
                        break;
                    }
                    Ok(batch) => {
                        let last = batch.last().map_or(after, |(r, _)| r.0);
                        let events = batch
                            .into_iter()
                            .flat_map(|(_, events)| events)
                            .filter(|e| self.selects(e))
                            .map(|e| convert::event(e, self.spec.prev_kv))
                            .collect::<Vec<_>>();
                        if !events.is_empty() {
                            if self.send_events(events, last).await.is_err() {
                                return;
                            }
                            next_progress = tokio::time::Instant::now() + interval;
                        }
                        after = last;
                        self.publish(after);
                    }
                    Err(StoreError::Compacted { compacted, .. }) => {
                        let _ = self.cancel_compacted(compacted.0).await;
                        return;
                    }
                    Err(StoreError::Installing) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "watcher stops on a storage error");
                        let _ = self
                            .send(pb::WatchResponse {
                                header: self.ctx.header(after),
                                watch_id: self.spec.id,
                                canceled: true,
                                cancel_reason: e.to_string(),
                                ..Default::default()
                            })
                            .await;
                        return;
                    }
                }
            }
            tokio::select! {
                changed = applied.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(next_progress), if self.spec.progress_notify => {
                    // Idle: tell the client how far it is synced.
                    let progress = pb::WatchResponse {
                        header: self.ctx.header(after),
                        watch_id: self.spec.id,
                        ..Default::default()
                    };
                    if self.send(progress).await.is_err() {
                        return;
                    }
                    next_progress = tokio::time::Instant::now() + interval;
                }
                _ = self.tx.closed() => return,
            }
        }
    }

    fn publish(&self, revision: u64) {
        lock(&self.delivered).insert(self.spec.id, revision);
    }

    fn selects(&self, e: &kubestore_storage::Event) -> bool {
        self.spec.range.contains(&e.kv.key)
            && match e.kind {
                EventKind::Put => !self.spec.no_put,
                EventKind::Delete => !self.spec.no_delete,
            }
    }

    async fn send(&self, resp: pb::WatchResponse) -> Result<(), Stop> {
        self.tx.send(Ok(resp)).await.map_err(|_| Stop::ClientGone)
    }

    async fn cancel_compacted(&self, compacted: u64) -> Result<(), Stop> {
        lock(&self.delivered).remove(&self.spec.id);
        self.send(pb::WatchResponse {
            header: self.ctx.header(self.ctx.node.store().applied().revision.0),
            watch_id: self.spec.id,
            canceled: true,
            compact_revision: compacted as i64,
            cancel_reason: "etcdserver: mvcc: required revision has been compacted".into(),
            ..Default::default()
        })
        .await?;
        Err(Stop::Cancelled)
    }

    /// Sends the events of one batch (complete revisions up to `upto`):
    /// cut at revision boundaries when large; within a revision only with
    /// `fragment`.
    async fn send_events(&self, events: Vec<mvccpb::Event>, upto: u64) -> Result<(), Stop> {
        let mut pieces: Vec<Vec<mvccpb::Event>> = vec![Vec::new()];
        let mut size = 0usize;
        let mut last_rev = None;
        for e in events {
            let rev = e.kv.as_ref().map(|kv| kv.mod_revision);
            let len = e.encoded_len();
            let boundary = last_rev.is_some() && last_rev != rev;
            let current = pieces.last().map_or(0, Vec::len);
            if size + len > MAX_RESPONSE_BYTES && current > 0 && (boundary || self.spec.fragment) {
                pieces.push(Vec::new());
                size = 0;
            }
            size += len;
            last_rev = rev;
            if let Some(p) = pieces.last_mut() {
                p.push(e);
            }
        }
        let n = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            // A piece continues into the next only when it ends mid-revision.
            let next_same_rev = i + 1 < n;
            let fragment = self.spec.fragment && next_same_rev;
            self.send(pb::WatchResponse {
                header: self.ctx.header(upto),
                watch_id: self.spec.id,
                fragment,
                events: piece,
                ..Default::default()
            })
            .await?;
        }
        Ok(())
    }
}
