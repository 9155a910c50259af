//! etcd's Maintenance service: Status, Alarm, HashKV, Hash, Snapshot and
//! Defragment. MoveLeader and Downgrade answer `Unimplemented`.
//!
//! Hash, HashKV and Snapshot read the whole keyspace. They stream: each
//! reads one consistent RocksDB view one key-value at a time on tokio's
//! blocking pool (never on the async workers that drive Raft), Snapshot
//! sending [`SNAPSHOT_CHUNK`]-byte chunks as it reads, so the memory they
//! take does not grow with the database. At most
//! [`MAX_MAINTENANCE_INFLIGHT`] of them run at a time per node; more are
//! answered `ResourceExhausted` ("etcdserver: too many requests"), which
//! etcd clients retry.

use std::ops::ControlFlow;
use std::sync::Arc;

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::etcdserverpb::maintenance_server::Maintenance;
use kubestore_storage::{KeyRange, KeyValue, Revision, StoreError};
use sha2::Digest;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::context::{Context, Fnv64, ETCD_VERSION};
use super::status;
use crate::limits::RequestClass;

/// Bytes per Snapshot response.
const SNAPSHOT_CHUNK: usize = 64 * 1024;
/// Snapshot responses queued between the reading thread and the gRPC
/// stream: with the chunk size, what one snapshot holds in memory.
const SNAPSHOT_QUEUE: usize = 4;
/// The first bytes of a snapshot stream. The format is kubestore's own
/// (bincode of the revision and every key-value at it, zero-padded to a
/// multiple of 512 bytes), not etcd's bbolt; like etcd's, it ends with the
/// SHA-256 of everything before it, which `etcdctl snapshot save` checks.
pub const SNAPSHOT_MAGIC: &[u8] = b"kubestore-snapshot-v1\n";
/// etcdctl recognises the checksum by the size: a multiple of this plus 32.
const SNAPSHOT_ALIGN: usize = 512;
/// Hash, HashKV and Snapshot calls a node serves at once.
pub const MAX_MAINTENANCE_INFLIGHT: usize = 2;

/// The whole keyspace (etcd's `\0`..`\0`).
fn everything() -> KeyRange {
    KeyRange {
        key: vec![0],
        range_end: vec![0],
    }
}

/// Why a snapshot stream stopped before its end.
#[derive(Debug, thiserror::Error)]
enum SnapshotError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("encoding the snapshot: {0}")]
    Encode(#[from] bincode::Error),
    #[error("the client closed the snapshot stream")]
    ClientGone,
    #[error("the snapshot view changed between its two passes ({0})")]
    Inconsistent(String),
}

/// The etcd Maintenance service of one node.
#[derive(Debug, Clone)]
pub struct MaintenanceService {
    ctx: Context,
    /// Slots for the calls that read the whole keyspace.
    heavy: Arc<Semaphore>,
}

impl MaintenanceService {
    pub(super) fn new(ctx: Context, heavy: Arc<Semaphore>) -> Self {
        Self { ctx, heavy }
    }

    /// A slot for a keyspace-wide call, or etcd's "too many requests".
    fn heavy_slot(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.heavy.clone().try_acquire_owned().map_err(|_| {
            tracing::debug!("maintenance call refused: {MAX_MAINTENANCE_INFLIGHT} in flight");
            status::too_many_requests()
        })
    }

    /// FNV-1a over every key-value at `revision` (`None`: current), folded
    /// to 32 bits, equal on every node that applied the same log; with the
    /// revision hashed at, and the view's current and compacted revisions.
    /// Streams on the blocking pool, holding one key-value at a time.
    async fn hash_at(
        &self,
        revision: Option<Revision>,
    ) -> Result<(u32, Revision, Revision, Revision), Status> {
        let _slot = self.heavy_slot()?;
        self.ctx
            .node
            .store()
            .run_blocking(move |store| {
                store.read_view(|view| {
                    let mut h = Fnv64::default();
                    let at = view.scan(&everything(), revision, |kv| {
                        h.write(&kv.key);
                        h.write(&kv.create_revision.0.to_be_bytes());
                        h.write(&kv.mod_revision.0.to_be_bytes());
                        h.write(&kv.version.to_be_bytes());
                        h.write(&kv.lease.0.to_be_bytes());
                        h.write(&kv.value);
                        Ok(ControlFlow::Continue(()))
                    })?;
                    let full = h.finish();
                    Ok((
                        (full ^ (full >> 32)) as u32,
                        at,
                        view.revision(),
                        view.compacted(),
                    ))
                })
            })
            .await
            .map_err(status::store)
    }

    fn alarms(&self) -> Vec<pb::AlarmMember> {
        if self.ctx.over_quota() {
            vec![pb::AlarmMember {
                member_id: self.ctx.node.id(),
                alarm: pb::AlarmType::Nospace as i32,
            }]
        } else {
            Vec::new()
        }
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    type SnapshotStream = ReceiverStream<Result<pb::SnapshotResponse, Status>>;

    #[tracing::instrument(level = "debug", skip_all)]
    async fn alarm(
        &self,
        request: Request<pb::AlarmRequest>,
    ) -> Result<Response<pb::AlarmResponse>, Status> {
        let req = request.into_inner();
        if req.action != pb::alarm_request::AlarmAction::Get as i32 {
            // Alarms here are derived from the quota, not stored: they clear
            // themselves once the database is below it again (as the quota
            // check reads its size: within `DB_SIZE_REFRESH`).
            return Err(status::not_supported("activating or deactivating alarms"));
        }
        let current = self.ctx.node.store().applied().revision.0;
        Ok(Response::new(pb::AlarmResponse {
            header: self.ctx.header(current),
            alarms: self.alarms(),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let st = self.ctx.node.status().await.map_err(status::raft)?;
        let size = self.ctx.node.store().size_on_disk() as i64;
        let errors = self
            .alarms()
            .iter()
            .map(|_| "memberID:0 alarm:NOSPACE".to_string())
            .collect();
        Ok(Response::new(pb::StatusResponse {
            header: self.ctx.header(st.revision.0),
            version: ETCD_VERSION.into(),
            db_size: size,
            leader: st.leader_id.unwrap_or(0),
            raft_index: st.committed_index.0,
            raft_term: st.term,
            raft_applied_index: st.applied_index.0,
            errors,
            db_size_in_use: size,
            is_learner: false,
            db_size_quota: self.ctx.options.quota_bytes as i64,
            ..Default::default()
        }))
    }

    async fn defragment(
        &self,
        _request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        // RocksDB compacts its files in the background: nothing to do.
        let current = self.ctx.node.store().applied().revision.0;
        Ok(Response::new(pb::DefragmentResponse {
            header: self.ctx.header(current),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(node = self.ctx.node.id()))]
    async fn hash(
        &self,
        _request: Request<pb::HashRequest>,
    ) -> Result<Response<pb::HashResponse>, Status> {
        let _admitted = self.ctx.admit(RequestClass::ReadOnly)?;
        let (hash, revision, _, _) = self.hash_at(None).await?;
        Ok(Response::new(pb::HashResponse {
            header: self.ctx.header(revision.0),
            hash,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(node = self.ctx.node.id()))]
    async fn hash_kv(
        &self,
        request: Request<pb::HashKvRequest>,
    ) -> Result<Response<pb::HashKvResponse>, Status> {
        let _admitted = self.ctx.admit(RequestClass::ReadOnly)?;
        let revision = request.into_inner().revision;
        let at = (revision > 0).then_some(Revision(revision as u64));
        let (hash, hashed, current, compacted) = self.hash_at(at).await?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.ctx.header(current.0),
            hash,
            compact_revision: compacted.0 as i64,
            hash_revision: hashed.0 as i64,
        }))
    }

    /// Streams the keyspace from one consistent view, read one key-value
    /// at a time on the blocking pool: one pass sizes it (so every
    /// response's `remaining_bytes` is exact and the bincode length prefix
    /// known up front), a second encodes it into chunks as it reads. The
    /// last chunk, which carries the checksum, goes out only once the view
    /// proved consistent (no snapshot install ran meanwhile); otherwise
    /// the stream ends with an error and the client has no valid file.
    #[tracing::instrument(level = "debug", skip_all, fields(node = self.ctx.node.id()))]
    async fn snapshot(
        &self,
        _request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let slot = self.heavy_slot()?;
        let (tx, rx) = tokio::sync::mpsc::channel(SNAPSHOT_QUEUE);
        let ctx = self.ctx.clone();
        let store = ctx.node.store().clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let mut header = None;
            let streamed = store.read_view(|view| {
                let revision = view.revision();
                header = ctx.header(revision.0);
                let send = |blob: Vec<u8>, remaining: u64| {
                    let resp = pb::SnapshotResponse {
                        header,
                        remaining_bytes: remaining,
                        blob,
                        ..Default::default()
                    };
                    match tx.blocking_send(Ok(resp)) {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(_) => ControlFlow::Break(()),
                    }
                };
                let pass = |visit: &mut dyn FnMut(&KeyValue) -> ControlFlow<()>| {
                    view.scan(&everything(), Some(revision), |kv| Ok(visit(&kv)))?;
                    Ok(())
                };
                encode_snapshot(revision, pass, send)
            });
            // The reading is done: the next call may start while the last
            // chunk is on its way.
            drop(slot);
            let last = match streamed {
                Ok(last) => Ok(pb::SnapshotResponse {
                    header,
                    remaining_bytes: 0,
                    blob: last,
                    ..Default::default()
                }),
                Err(SnapshotError::ClientGone) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "etcd snapshot failed");
                    Err(match e {
                        SnapshotError::Store(e) => status::store(e),
                        other => status::internal(&other),
                    })
                }
            };
            let _ = tx.blocking_send(last);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn move_leader(
        &self,
        _request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        Err(status::not_supported("MoveLeader"))
    }

    async fn downgrade(
        &self,
        _request: Request<pb::DowngradeRequest>,
    ) -> Result<Response<pb::DowngradeResponse>, Status> {
        Err(status::not_supported("Downgrade"))
    }
}

/// Writes a snapshot stream: cuts it into [`SNAPSHOT_CHUNK`]-byte chunks
/// for `send` (with the bytes that remain after each), keeps the running
/// SHA-256, and holds back the last chunk.
struct ChunkWriter<F> {
    send: F,
    buf: Vec<u8>,
    digest: sha2::Sha256,
    sent: u64,
    total: u64,
}

impl<F: FnMut(Vec<u8>, u64) -> ControlFlow<()>> ChunkWriter<F> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.digest.update(bytes);
        self.append(bytes)
    }

    /// Adds bytes to the stream without hashing them (the checksum itself).
    fn append(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.buf.extend_from_slice(bytes);
        // Strictly more than a chunk: the last chunk is never sent here.
        while self.buf.len() > SNAPSHOT_CHUNK {
            let rest = self.buf.split_off(SNAPSHOT_CHUNK);
            let chunk = std::mem::replace(&mut self.buf, rest);
            self.sent += chunk.len() as u64;
            let remaining = self.total.saturating_sub(self.sent);
            if (self.send)(chunk, remaining).is_break() {
                return Err(SnapshotError::ClientGone);
            }
        }
        Ok(())
    }
}

/// Runs `pass` once, handing every key-value to `each` until one fails;
/// that failure, or the pass's own, is the result.
fn try_pass<P, E>(
    pass: &mut P,
    mut each: impl FnMut(&KeyValue) -> Result<(), E>,
) -> Result<(), SnapshotError>
where
    P: FnMut(&mut dyn FnMut(&KeyValue) -> ControlFlow<()>) -> Result<(), SnapshotError>,
    E: Into<SnapshotError>,
{
    let mut failed = None;
    pass(&mut |kv| match each(kv) {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => {
            failed = Some(e);
            ControlFlow::Break(())
        }
    })?;
    failed.map_or(Ok(()), |e| Err(e.into()))
}

/// Encodes the snapshot of the key-values `pass` visits at `revision`:
/// [`SNAPSHOT_MAGIC`], then bincode of `(revision, Vec<KeyValue>)`, zeros
/// up to a multiple of [`SNAPSHOT_ALIGN`], then the SHA-256 of all that.
/// `pass` runs twice and must visit the same key-values both times (a
/// consistent view): first to size the stream, then to encode it. Every
/// chunk but the last goes to `send` as it fills; the last is returned.
fn encode_snapshot<P, F>(revision: Revision, mut pass: P, send: F) -> Result<Vec<u8>, SnapshotError>
where
    P: FnMut(&mut dyn FnMut(&KeyValue) -> ControlFlow<()>) -> Result<(), SnapshotError>,
    F: FnMut(Vec<u8>, u64) -> ControlFlow<()>,
{
    let (mut count, mut size) = (0u64, 0u64);
    try_pass(&mut pass, |kv| {
        size += bincode::serialized_size(kv)?;
        count += 1;
        Ok::<_, bincode::Error>(())
    })?;
    let head = [
        SNAPSHOT_MAGIC.to_vec(),
        bincode::serialize(&revision)?,
        // bincode's length prefix of the Vec<KeyValue>.
        bincode::serialize(&count)?,
    ]
    .concat();
    let body = head.len() as u64 + size;
    let padded = body.div_ceil(SNAPSHOT_ALIGN as u64) * SNAPSHOT_ALIGN as u64;
    let mut out = ChunkWriter {
        send,
        buf: Vec::with_capacity(2 * SNAPSHOT_CHUNK),
        digest: sha2::Sha256::new(),
        sent: 0,
        total: padded + 32,
    };
    out.write(&head)?;
    let mut written = 0u64;
    try_pass(&mut pass, |kv| {
        out.write(&bincode::serialize(kv)?)?;
        written += 1;
        Ok::<_, SnapshotError>(())
    })?;
    let encoded = out.sent + out.buf.len() as u64;
    if written != count || encoded != body {
        return Err(SnapshotError::Inconsistent(format!(
            "{count} key-values, {body} bytes sized; {written}, {encoded} encoded"
        )));
    }
    out.write(&vec![0; (padded - body) as usize])?;
    let digest = std::mem::take(&mut out.digest).finalize();
    out.append(&digest)?;
    Ok(out.buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(i: usize, value_len: usize) -> KeyValue {
        KeyValue {
            key: format!("key/{i:05}").into_bytes().into(),
            create_revision: Revision(i as u64 + 1),
            mod_revision: Revision(i as u64 + 2),
            version: 3,
            value: vec![(i % 251) as u8; value_len].into(),
            lease: kubestore_storage::LeaseId(i as i64),
        }
    }

    /// The snapshot as it was built before it streamed: one buffer.
    fn whole(revision: Revision, kvs: &[KeyValue]) -> Vec<u8> {
        let mut blob = SNAPSHOT_MAGIC.to_vec();
        blob.extend_from_slice(&bincode::serialize(&(revision, kvs)).expect("encode"));
        blob.resize(blob.len().div_ceil(SNAPSHOT_ALIGN) * SNAPSHOT_ALIGN, 0);
        let digest = sha2::Sha256::digest(&blob);
        blob.extend_from_slice(&digest);
        blob
    }

    /// Streams `kvs`; the chunks (the held-back last one included) and the
    /// `remaining_bytes` each was sent with.
    fn streamed(revision: Revision, kvs: &[KeyValue]) -> Vec<(Vec<u8>, u64)> {
        let mut chunks = Vec::new();
        let last = encode_snapshot(
            revision,
            |visit| {
                for kv in kvs {
                    if visit(kv).is_break() {
                        break;
                    }
                }
                Ok(())
            },
            |chunk, remaining| {
                chunks.push((chunk, remaining));
                ControlFlow::Continue(())
            },
        )
        .expect("encode");
        chunks.push((last, 0));
        chunks
    }

    #[test]
    fn the_streamed_snapshot_is_the_format_etcdctl_accepts_byte_for_byte() {
        for (n, value_len) in [(0, 0), (1, 10), (300, 1_000), (40, 20_000)] {
            let kvs: Vec<KeyValue> = (0..n).map(|i| kv(i, value_len)).collect();
            let expected = whole(Revision(77), &kvs);
            let chunks = streamed(Revision(77), &kvs);
            let joined: Vec<u8> = chunks.iter().flat_map(|(c, _)| c.clone()).collect();
            assert_eq!(joined, expected, "{n} key-values of {value_len} bytes");
            // etcdctl's check: a multiple of 512 plus a SHA-256.
            assert_eq!(joined.len() % SNAPSHOT_ALIGN, 32);
            // Bounded chunks, and an exact countdown of what is left.
            let mut left = joined.len() as u64;
            for (chunk, remaining) in &chunks {
                assert!(!chunk.is_empty() && chunk.len() <= SNAPSHOT_CHUNK);
                left -= chunk.len() as u64;
                assert_eq!(*remaining, left);
            }
        }
    }

    #[test]
    fn a_view_that_changes_between_the_passes_is_refused_not_sent_whole() {
        let kvs: Vec<KeyValue> = (0..10).map(|i| kv(i, 100)).collect();
        let mut passes = 0;
        let result = encode_snapshot(
            Revision(5),
            |visit| {
                passes += 1;
                // The second pass sees one key-value fewer.
                for kv in &kvs[..kvs.len() - (passes - 1)] {
                    let _ = visit(kv);
                }
                Ok(())
            },
            |_, _| ControlFlow::Continue(()),
        );
        assert!(
            matches!(result, Err(SnapshotError::Inconsistent(_))),
            "{result:?}"
        );
    }

    #[test]
    fn a_closed_stream_stops_the_encoding() {
        let kvs: Vec<KeyValue> = (0..100).map(|i| kv(i, 10_000)).collect();
        let mut visited = 0;
        let mut sends = 0;
        let result = encode_snapshot(
            Revision(5),
            |visit| {
                for kv in &kvs {
                    visited += 1;
                    if visit(kv).is_break() {
                        break;
                    }
                }
                Ok(())
            },
            |_, _| {
                sends += 1;
                ControlFlow::Break(())
            },
        );
        assert!(
            matches!(result, Err(SnapshotError::ClientGone)),
            "{result:?}"
        );
        assert_eq!(sends, 1, "nothing is sent after the client left");
        assert!(
            visited < 2 * kvs.len(),
            "the second pass stopped early ({visited} visits)"
        );
    }
}
