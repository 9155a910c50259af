//! etcd's KV service: Range, Put, DeleteRange, Txn and Compact.

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::etcdserverpb::kv_server::Kv;
use kubestore_storage::{Command, Op, OpResponse, Revision, Txn};
use prost::Message;
use tonic::{Request, Response, Status};

use super::context::{validate, Context, MAX_REQUEST_BYTES};
use super::{convert, status};
use crate::compaction;
use crate::limits::RequestClass;
use crate::write;

#[derive(Debug, Clone)]
pub struct KvService(pub(super) Context);

fn too_large(len: usize) -> Result<(), Status> {
    if len > MAX_REQUEST_BYTES {
        Err(status::request_too_large())
    } else {
        Ok(())
    }
}

impl KvService {
    /// Runs one transaction through Raft; its response and revision. The
    /// command is validated first (etcd's limits), then the quota checked:
    /// over it, a transaction that puts is refused with NOSPACE; ranges and
    /// deletes pass, as etcd lets them, so space can still be freed.
    async fn write(&self, txn: Txn) -> Result<(kubestore_storage::TxnResponse, u64), Status> {
        let ctx = &self.0;
        let puts = txn_puts(&txn);
        let cmd = Command::Txn(txn);
        validate(&cmd)?;
        if puts && ctx.over_quota() {
            return Err(status::no_space());
        }
        let (resp, revision) = write::txn(&ctx.node, cmd).await.map_err(status::write)?;
        Ok((resp, revision.0))
    }
}

/// Whether a transaction may put (either branch, at any depth: etcd 3.5
/// counts only the top level's puts, so this refuses a nested put that
/// etcd would let past its quota).
fn txn_puts(txn: &Txn) -> bool {
    txn.success.iter().chain(&txn.failure).any(|op| match op {
        Op::Range(_) | Op::Delete(_) => false,
        Op::Put(_) => true,
        Op::Txn(t) => txn_puts(t),
    })
}

#[tonic::async_trait]
impl Kv for KvService {
    #[tracing::instrument(level = "debug", skip_all, fields(node = self.0.node.id()))]
    async fn range(
        &self,
        request: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::ReadOnly)?;
        let req = request.into_inner();
        let read = convert::range_request(&req)?;
        if !req.serializable {
            self.0
                .node
                .linearizable_barrier()
                .await
                .map_err(status::raft)?;
        }
        let store = self.0.node.store();
        let resp = if read.range.is_single() {
            // One key is one point read (now, its `kv` row; at an old
            // revision, one seek back in its history): served on this
            // worker, where a hop to the blocking pool (a thread woken, a
            // context switch each way) cost more than the read.
            store.range(&read)
        } else {
            // A range may scan the whole keyspace: off the async workers.
            store.run_blocking(move |store| store.range(&read)).await
        }
        .map_err(status::store)?;
        // The header carries the store's current revision, also for a
        // read at an older one, as etcd's does: a client reads "how far
        // the store is" from it whatever revision it asked to read at.
        // The applied revision after the read is at least the one read.
        let revision = match req.revision {
            r if r > 0 => resp.revision.max(store.applied().revision).0,
            _ => resp.revision.0,
        };
        let mut out = convert::range_response(convert::shape_range(&req, resp));
        out.header = self.0.header(revision);
        Ok(Response::new(out))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(node = self.0.node.id()))]
    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::Mutating)?;
        let req = request.into_inner();
        too_large(req.encoded_len())?;
        let put = convert::put_request(req);
        let (resp, revision) = self
            .write(Txn {
                success: vec![Op::Put(put)],
                ..Txn::default()
            })
            .await?;
        let prev_kv = match resp.responses.into_iter().next() {
            Some(OpResponse::Put { prev_kv }) => prev_kv.map(convert::kv),
            _ => None,
        };
        Ok(Response::new(pb::PutResponse {
            header: self.0.header(revision),
            prev_kv,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(node = self.0.node.id()))]
    async fn delete_range(
        &self,
        request: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::Mutating)?;
        let del = convert::delete_request(request.into_inner());
        let (resp, revision) = self
            .write(Txn {
                success: vec![Op::Delete(del)],
                ..Txn::default()
            })
            .await?;
        let (deleted, prev_kvs) = match resp.responses.into_iter().next() {
            Some(OpResponse::Delete(d)) => (
                d.deleted as i64,
                d.prev_kvs.into_iter().map(convert::kv).collect(),
            ),
            _ => (0, Vec::new()),
        };
        Ok(Response::new(pb::DeleteRangeResponse {
            header: self.0.header(revision),
            deleted,
            prev_kvs,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(node = self.0.node.id()))]
    async fn txn(
        &self,
        request: Request<pb::TxnRequest>,
    ) -> Result<Response<pb::TxnResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::Mutating)?;
        let req = request.into_inner();
        too_large(req.encoded_len())?;
        let txn = convert::txn(req.clone())?;
        let (resp, revision) = self.write(txn).await?;
        let mut out = convert::txn_response(Some(&req), resp, revision);
        out.header = self.0.header(revision);
        Ok(Response::new(out))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(node = self.0.node.id()))]
    async fn compact(
        &self,
        request: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        let _admitted = self.0.admit(RequestClass::Mutating)?;
        let req = request.into_inner();
        let revision = req.revision.max(0) as u64;
        compaction::compact(&self.0.node, revision)
            .await
            .map_err(status::compact)?;
        // Applied, the compaction is logical; `physical` waits until this
        // node has also deleted the history it made unreachable, which
        // takes time linear in that history: as long as the purge moves.
        let node = &self.0.node;
        if req.physical
            && !node
                .store()
                .wait_purged(Revision(revision), node.request_timeout())
                .await
        {
            return Err(status::timeout());
        }
        let current = self.0.node.store().applied().revision;
        Ok(Response::new(pb::CompactionResponse {
            header: self.0.header(current.max(Revision(revision)).0),
        }))
    }
}
