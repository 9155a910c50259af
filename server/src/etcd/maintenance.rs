//! etcd's Maintenance service: Status, Alarm, HashKV, Hash, Snapshot and
//! Defragment. MoveLeader and Downgrade answer `Unimplemented`.

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::etcdserverpb::maintenance_server::Maintenance;
use kubestore_storage::{KeyRange, RangeRequest, Revision};
use sha2::Digest;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{errors, raft_status, store_status, EtcdContext, Fnv64, ETCD_VERSION};
use crate::limits::RequestClass;

/// Bytes per Snapshot response.
const SNAPSHOT_CHUNK: usize = 64 * 1024;
/// The first bytes of a snapshot stream. The format is kubestore's own
/// (bincode of the revision and every key-value at it, zero-padded to a
/// multiple of 512 bytes), not etcd's bbolt; like etcd's, it ends with the
/// SHA-256 of everything before it, which `etcdctl snapshot save` checks.
pub const SNAPSHOT_MAGIC: &[u8] = b"kubestore-snapshot-v1\n";
/// etcdctl recognises the checksum by the size: a multiple of this plus 32.
const SNAPSHOT_ALIGN: usize = 512;

#[derive(Debug, Clone)]
pub struct MaintenanceService(pub(super) EtcdContext);

impl MaintenanceService {
    /// FNV-1a over every key-value at `revision` (0: current), folded to
    /// 32 bits: equal on every node that applied the same log.
    fn hash_at(&self, revision: i64) -> Result<(u32, u64), Status> {
        let store = self.0.node.store();
        let resp = store
            .range(&RangeRequest {
                range: KeyRange {
                    key: vec![0],
                    range_end: vec![0],
                },
                revision: (revision > 0).then_some(Revision(revision as u64)),
                ..RangeRequest::default()
            })
            .map_err(store_status)?;
        let mut h = Fnv64::default();
        for kv in &resp.kvs {
            h.write(&kv.key);
            h.write(&kv.create_revision.0.to_be_bytes());
            h.write(&kv.mod_revision.0.to_be_bytes());
            h.write(&kv.version.to_be_bytes());
            h.write(&kv.lease.to_be_bytes());
            h.write(&kv.value);
        }
        let full = h.finish();
        Ok(((full ^ (full >> 32)) as u32, resp.revision.0))
    }

    fn alarms(&self) -> Vec<pb::AlarmMember> {
        if self.0.over_quota() {
            vec![pb::AlarmMember {
                member_id: self.0.node.id(),
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
            // themselves once the database is below it again.
            return Err(errors::not_supported("activating or deactivating alarms"));
        }
        let current = self.0.node.store().applied().revision.0;
        Ok(Response::new(pb::AlarmResponse {
            header: self.0.header(current),
            alarms: self.alarms(),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let st = self.0.node.status().await.map_err(raft_status)?;
        let size = self.0.node.store().size_on_disk() as i64;
        let errors = self
            .alarms()
            .iter()
            .map(|_| "memberID:0 alarm:NOSPACE".to_string())
            .collect();
        Ok(Response::new(pb::StatusResponse {
            header: self.0.header(st.revision),
            version: ETCD_VERSION.into(),
            db_size: size,
            leader: st.leader_id.unwrap_or(0),
            raft_index: st.committed_index,
            raft_term: st.term,
            raft_applied_index: st.applied_index,
            errors,
            db_size_in_use: size,
            is_learner: false,
            db_size_quota: self.0.options.quota_bytes as i64,
            ..Default::default()
        }))
    }

    async fn defragment(
        &self,
        _request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        // RocksDB compacts its files in the background: nothing to do.
        let current = self.0.node.store().applied().revision.0;
        Ok(Response::new(pb::DefragmentResponse {
            header: self.0.header(current),
        }))
    }

    async fn hash(
        &self,
        _request: Request<pb::HashRequest>,
    ) -> Result<Response<pb::HashResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::ReadOnly)?;
        let (hash, revision) = self.hash_at(0)?;
        Ok(Response::new(pb::HashResponse {
            header: self.0.header(revision),
            hash,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn hash_kv(
        &self,
        request: Request<pb::HashKvRequest>,
    ) -> Result<Response<pb::HashKvResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::ReadOnly)?;
        let (hash, revision) = self.hash_at(request.into_inner().revision)?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.0.header(self.0.node.store().applied().revision.0),
            hash,
            compact_revision: self.0.node.store().applied().compacted.0 as i64,
            hash_revision: revision as i64,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn snapshot(
        &self,
        _request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let store = self.0.node.store();
        let all = store
            .range(&RangeRequest {
                range: KeyRange {
                    key: vec![0],
                    range_end: vec![0],
                },
                ..RangeRequest::default()
            })
            .map_err(store_status)?;
        let mut blob = SNAPSHOT_MAGIC.to_vec();
        let body = bincode::serialize(&(all.revision, &all.kvs))
            .map_err(|e| Status::internal(format!("encoding the snapshot: {e}")))?;
        blob.extend_from_slice(&body);
        blob.resize(blob.len().div_ceil(SNAPSHOT_ALIGN) * SNAPSHOT_ALIGN, 0);
        let digest = sha2::Sha256::digest(&blob);
        blob.extend_from_slice(&digest);
        let header = self.0.header(all.revision.0);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let total = blob.len();
            let mut sent = 0;
            for chunk in blob.chunks(SNAPSHOT_CHUNK) {
                sent += chunk.len();
                let resp = pb::SnapshotResponse {
                    header,
                    remaining_bytes: (total - sent) as u64,
                    blob: chunk.to_vec(),
                    ..Default::default()
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn move_leader(
        &self,
        _request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        Err(errors::not_supported("MoveLeader"))
    }

    async fn downgrade(
        &self,
        _request: Request<pb::DowngradeRequest>,
    ) -> Result<Response<pb::DowngradeResponse>, Status> {
        Err(errors::not_supported("Downgrade"))
    }
}
