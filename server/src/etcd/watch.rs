//! etcd's Watch service: one bidirectional stream carries many watchers.
//!
//! Each watcher is a task with an event cursor (`Store::events`) into the
//! node's revision-ordered event log (the same on every node), woken by
//! the applied-state channel; each step reads one batch of whole
//! revisions, from storage's ring of recent events on the watcher's own
//! task when the ring holds them, else on the blocking pool, and the
//! cursor's `Compacted` outcome cancels the watcher.
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
use kubestore_storage::{EventKind, EventStep, KeyRange, Revision, StoreError};
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::context::Context;
use super::convert;

/// Responses buffered per stream before its watchers wait.
const STREAM_QUEUE: usize = 64;
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

impl Spec {
    fn new(id: i64, c: pb::WatchCreateRequest) -> Self {
        use pb::watch_create_request::FilterType;
        Spec {
            id,
            range: KeyRange {
                key: c.key,
                range_end: c.range_end,
            },
            prev_kv: c.prev_kv,
            no_put: c.filters.contains(&(FilterType::Noput as i32)),
            no_delete: c.filters.contains(&(FilterType::Nodelete as i32)),
            progress_notify: c.progress_notify,
            fragment: c.fragment,
        }
    }

    /// Whether the watcher sends `e`: its key is in range and its kind is
    /// not filtered out.
    fn selects(&self, e: &kubestore_storage::Event) -> bool {
        self.range.contains(&e.kv.key)
            && match e.kind {
                EventKind::Put => !self.no_put,
                EventKind::Delete => !self.no_delete,
            }
    }
}

/// The revision a new watcher's cursor starts after: right before the
/// requested start revision, or the current revision when none is asked
/// for (etcd's `start_revision` 0 or negative: from now).
fn start_after(start_revision: i64, current: u64) -> u64 {
    if start_revision > 0 {
        start_revision as u64 - 1
    } else {
        current
    }
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
        let after = start_after(c.start_revision, current);
        let spec = Spec::new(id, c);
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
    async fn run(self, after: u64) {
        let store = self.ctx.node.store().clone();
        let mut applied = store.subscribe();
        let mut cursor = store.events(Revision(after));
        let interval = self.ctx.options.progress_notify_interval;
        let mut next_progress = tokio::time::Instant::now() + interval;
        loop {
            loop {
                match cursor.next().await {
                    Ok(EventStep::CaughtUp { revision }) => {
                        self.publish(revision.0);
                        break;
                    }
                    Ok(EventStep::Events(batch)) => {
                        let last = cursor.after().0;
                        let events = batch
                            .iter()
                            .flat_map(|(_, events)| events.iter())
                            .filter(|e| self.spec.selects(e))
                            .map(|e| convert::event(e, self.spec.prev_kv))
                            .collect::<Vec<_>>();
                        if !events.is_empty() {
                            if self.send_events(events, last).await.is_err() {
                                return;
                            }
                            next_progress = tokio::time::Instant::now() + interval;
                        }
                        self.publish(last);
                    }
                    Ok(EventStep::Compacted { compacted, .. }) => {
                        let _ = self.cancel_compacted(compacted.0).await;
                        return;
                    }
                    Err(StoreError::Installing) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "watcher stops on a storage error");
                        let _ = self
                            .send(pb::WatchResponse {
                                header: self.ctx.header(cursor.after().0),
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
                        header: self.ctx.header(cursor.after().0),
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

    /// Sends the events of one batch (complete revisions up to `upto`),
    /// in the pieces [`pieces`] cuts.
    async fn send_events(&self, events: Vec<mvccpb::Event>, upto: u64) -> Result<(), Stop> {
        for (events, fragment) in pieces(events, self.spec.fragment) {
            self.send(pb::WatchResponse {
                header: self.ctx.header(upto),
                watch_id: self.spec.id,
                fragment,
                events,
                ..Default::default()
            })
            .await?;
        }
        Ok(())
    }
}

/// Cuts one batch of events (whole revisions, ascending) into responses of
/// about [`MAX_RESPONSE_BYTES`]: at revision boundaries, and within a
/// revision only with `fragment`. Each piece comes with its `fragment`
/// flag, set when more of the batch follows it (etcd flags every piece of
/// a fragmented response but the last). A single event larger than the
/// bound is a piece of its own, never cut.
fn pieces(events: Vec<mvccpb::Event>, fragment: bool) -> Vec<(Vec<mvccpb::Event>, bool)> {
    let mut pieces: Vec<Vec<mvccpb::Event>> = vec![Vec::new()];
    let mut size = 0usize;
    let mut last_rev = None;
    for e in events {
        let rev = e.kv.as_ref().map(|kv| kv.mod_revision);
        let len = e.encoded_len();
        let boundary = last_rev.is_some() && last_rev != rev;
        let current = pieces.last().map_or(0, Vec::len);
        if size + len > MAX_RESPONSE_BYTES && current > 0 && (boundary || fragment) {
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
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| (piece, fragment && i + 1 < n))
        .collect()
}

#[cfg(test)]
mod tests {
    use kubestore_storage::{Event, KeyValue, LeaseId};

    use super::*;

    fn create(
        key: &str,
        range_end: &str,
        filters: &[pb::watch_create_request::FilterType],
    ) -> Spec {
        Spec::new(
            7,
            pb::WatchCreateRequest {
                key: key.as_bytes().to_vec(),
                range_end: range_end.as_bytes().to_vec(),
                filters: filters.iter().map(|f| *f as i32).collect(),
                ..Default::default()
            },
        )
    }

    fn stored(kind: EventKind, key: &str) -> Event {
        Event {
            kind,
            kv: KeyValue {
                key: bytes::Bytes::copy_from_slice(key.as_bytes()),
                create_revision: Revision(1),
                mod_revision: Revision(2),
                version: 1,
                value: bytes::Bytes::new(),
                lease: LeaseId::NONE,
            },
            prev_kv: None,
        }
    }

    /// An event of `bytes` value bytes at `revision`.
    fn event(revision: i64, bytes: usize) -> mvccpb::Event {
        mvccpb::Event {
            r#type: mvccpb::event::EventType::Put as i32,
            kv: Some(mvccpb::KeyValue {
                key: format!("k{revision}").into_bytes(),
                mod_revision: revision,
                value: vec![b'x'; bytes],
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    /// Each piece as (its events' revisions, its fragment flag).
    fn shape(pieces: Vec<(Vec<mvccpb::Event>, bool)>) -> Vec<(Vec<i64>, bool)> {
        pieces
            .into_iter()
            .map(|(events, fragment)| {
                let revs = events
                    .iter()
                    .map(|e| e.kv.as_ref().map_or(0, |kv| kv.mod_revision))
                    .collect();
                (revs, fragment)
            })
            .collect()
    }

    #[test]
    fn a_watcher_selects_its_key_or_range_and_drops_filtered_kinds() {
        use pb::watch_create_request::FilterType;
        let single = create("a", "", &[]);
        assert!(single.selects(&stored(EventKind::Put, "a")));
        assert!(
            !single.selects(&stored(EventKind::Put, "ab")),
            "one key only"
        );

        let prefix = create("a", "b", &[]);
        assert!(prefix.selects(&stored(EventKind::Put, "ab")));
        assert!(prefix.selects(&stored(EventKind::Delete, "a")));
        assert!(
            !prefix.selects(&stored(EventKind::Put, "b")),
            "end excluded"
        );

        let all = create("\0", "\0", &[]);
        assert!(
            all.selects(&stored(EventKind::Put, "zzz")),
            "[0]: every key"
        );

        let no_put = create("a", "b", &[FilterType::Noput]);
        assert!(!no_put.selects(&stored(EventKind::Put, "a")));
        assert!(no_put.selects(&stored(EventKind::Delete, "a")));

        let no_delete = create("a", "b", &[FilterType::Nodelete]);
        assert!(no_delete.selects(&stored(EventKind::Put, "a")));
        assert!(!no_delete.selects(&stored(EventKind::Delete, "a")));
    }

    #[test]
    fn a_watcher_starts_right_before_its_start_revision_or_at_the_current_one() {
        assert_eq!(start_after(5, 9), 4);
        assert_eq!(start_after(1, 9), 0, "from the first revision");
        assert_eq!(start_after(20, 9), 19, "a future start waits for it");
        assert_eq!(start_after(0, 9), 9, "no start: from now");
        assert_eq!(start_after(-3, 9), 9, "a negative start: from now");
    }

    #[test]
    fn a_small_batch_is_one_response_without_the_fragment_flag() {
        let events = vec![event(1, 10), event(2, 10), event(2, 10)];
        assert_eq!(
            shape(pieces(events.clone(), false)),
            vec![(vec![1, 2, 2], false)]
        );
        assert_eq!(shape(pieces(events, true)), vec![(vec![1, 2, 2], false)]);
        assert_eq!(shape(pieces(Vec::new(), false)), vec![(vec![], false)]);
    }

    #[test]
    fn a_large_batch_is_cut_at_revision_boundaries_only() {
        let big = MAX_RESPONSE_BYTES / 3;
        // Revision 2 alone holds more than a response's bound.
        let events = vec![
            event(1, big),
            event(2, big),
            event(2, big),
            event(2, big),
            event(3, big),
        ];
        assert_eq!(
            shape(pieces(events, false)),
            vec![(vec![1, 2, 2, 2], false), (vec![3], false)],
            "revision 2 is never split without fragment, even past the bound"
        );
    }

    #[test]
    fn with_fragment_a_revision_is_cut_too_and_every_piece_but_the_last_is_flagged() {
        let big = MAX_RESPONSE_BYTES / 3;
        let events = vec![
            event(1, big),
            event(2, big),
            event(2, big),
            event(2, big),
            event(3, big),
        ];
        let cut = shape(pieces(events, true));
        assert_eq!(
            cut,
            vec![(vec![1, 2], true), (vec![2, 2], true), (vec![3], false)]
        );
    }

    #[test]
    fn one_event_over_the_bound_is_sent_whole() {
        let events = vec![event(1, MAX_RESPONSE_BYTES + 1), event(2, 10)];
        assert_eq!(
            shape(pieces(events, true)),
            vec![(vec![1], true), (vec![2], false)]
        );
    }
}
