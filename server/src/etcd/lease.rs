//! etcd's Lease service and the lease keeper that expires leases.
//!
//! Grants, keep-alives and revokes are log entries, so every node knows
//! every lease, its TTL and how often it was renewed. Time is not
//! replicated: each node's [`LeaseKeeper`] restarts a lease's clock when it
//! sees the lease granted or renewed, and only the leader acts on an
//! expired clock, by proposing a revoke that deletes the lease's keys in
//! one revision. After a failover the new leader already holds clocks for
//! every lease (from the renewals it applied), so remaining TTLs carry
//! over, as etcd re-arms them on promotion; a freshly restarted node starts
//! every clock at the full TTL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::etcdserverpb::lease_server::Lease;
use kubestore_storage::{ApplyError, Command, LeaseId, LeaseRecord, MIN_LEASE_TTL};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::context::{validate, Context};
use super::status;
use crate::limits::RequestClass;
use crate::write::{self, LeaseAnswer, WriteError};

/// How often the keeper looks for expired leases.
const TICK: Duration = Duration::from_millis(250);

/// One node's lease clocks: id → (renewals seen, deadline).
#[derive(Debug, Clone, Default)]
pub struct LeaseKeeper {
    clocks: Arc<Mutex<HashMap<i64, (u64, Instant)>>>,
}

impl LeaseKeeper {
    fn clocks(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (u64, Instant)>> {
        self.clocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Seconds left on lease `id` by this node's clock (the full TTL if the
    /// keeper has not seen it yet).
    pub fn remaining(&self, lease: &LeaseRecord) -> i64 {
        match self.clocks().get(&lease.id.0) {
            Some((_, deadline)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                left.as_secs_f64().ceil() as i64
            }
            None => lease.ttl,
        }
    }

    /// Brings the clocks in line with the store's leases: a new lease or a
    /// renewal restarts a clock, a revoked lease drops it. Returns the
    /// leases whose clock ran out, each with the renewal count its clock
    /// last saw (the condition of its expiry).
    fn sync(&self, leases: &[LeaseRecord], now: Instant) -> Vec<(i64, u64)> {
        let mut clocks = self.clocks();
        let live: HashMap<i64, &LeaseRecord> = leases.iter().map(|l| (l.id.0, l)).collect();
        clocks.retain(|id, _| live.contains_key(id));
        for lease in leases {
            let fresh = now + Duration::from_secs(lease.ttl.max(0) as u64);
            match clocks.get_mut(&lease.id.0) {
                Some((renewals, deadline)) if *renewals != lease.renewals => {
                    *renewals = lease.renewals;
                    *deadline = fresh;
                }
                Some(_) => {}
                None => {
                    clocks.insert(lease.id.0, (lease.renewals, fresh));
                }
            }
        }
        clocks
            .iter()
            .filter(|(_, (_, deadline))| *deadline <= now)
            .map(|(id, (renewals, _))| (*id, *renewals))
            .collect()
    }

    /// Runs until `stop`: follows the store's leases and, on the leader,
    /// revokes the expired ones through the log.
    pub async fn run(self, ctx: Context, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            // A scan of every lease: off the async workers.
            let leases = match ctx.node.store().run_blocking(|s| s.leases()).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(error = %e, "lease keeper cannot read leases yet");
                    continue;
                }
            };
            let expired = self.sync(&leases, Instant::now());
            if ctx.node.current_leader() != Some(ctx.node.id()) {
                continue;
            }
            for (id, renewals) in expired {
                // Conditional on the renewals this clock saw: if this node
                // led on a stale view (paused, deposed), a renewal the
                // majority committed meanwhile refuses the expiry in apply.
                let span = tracing::info_span!("lease_expire", lease = id, renewals);
                let revoked = tracing::Instrument::instrument(
                    write::lease(
                        &ctx.node,
                        Command::LeaseExpire {
                            id: LeaseId(id),
                            renewals,
                        },
                    ),
                    span,
                )
                .await;
                match revoked {
                    Ok((LeaseAnswer::Revoked { deleted }, revision)) => {
                        tracing::info!(lease = id, deleted, revision = revision.0, "lease expired");
                    }
                    Ok(_)
                    | Err(WriteError::Apply {
                        error: ApplyError::LeaseNotFound,
                        ..
                    })
                    | Err(WriteError::Unexpected(_)) => {}
                    Err(WriteError::Apply {
                        error: ApplyError::LeaseRenewed,
                        ..
                    }) => {
                        tracing::info!(
                            lease = id,
                            "lease renewed since its expiry was decided; kept"
                        );
                    }
                    Err(WriteError::Apply { error, .. }) => {
                        tracing::warn!(lease = id, %error, "expiring a lease failed")
                    }
                    Err(WriteError::Raft(e)) => {
                        tracing::debug!(lease = id, error = %e, "expiring a lease failed; retried next tick")
                    }
                }
            }
        }
    }
}

/// The command of a LeaseGrant: a TTL below etcd's minimum (about 1.5
/// election timeouts) is raised to it, an id of 0 becomes a random
/// positive one (as etcd picks it), and a TTL above etcd's maximum is
/// refused ("too large lease TTL").
fn grant_command(req: &pb::LeaseGrantRequest) -> Result<Command, Status> {
    let ttl = req.ttl.max(MIN_LEASE_TTL);
    let id = if req.id != 0 {
        req.id
    } else {
        (rand::random::<u64>() >> 1).max(1) as i64
    };
    let grant = Command::LeaseGrant {
        id: LeaseId(id),
        ttl,
    };
    validate(&grant)?;
    Ok(grant)
}

#[derive(Debug, Clone)]
pub struct LeaseService {
    pub(super) ctx: Context,
    pub(super) keeper: LeaseKeeper,
}

impl LeaseService {
    async fn keep_alive_once(&self, id: i64) -> Result<pb::LeaseKeepAliveResponse, Status> {
        let (ttl, revision) =
            match write::lease(&self.ctx.node, Command::LeaseKeepAlive { id: LeaseId(id) }).await {
                Ok((LeaseAnswer::Lease(l), revision)) => (l.ttl, revision),
                // etcd answers an unknown lease with TTL 0 on the stream.
                Err(WriteError::Apply {
                    error: ApplyError::LeaseNotFound,
                    revision,
                }) => (0, revision),
                Ok((other, _)) => return Err(status::unexpected_answer(&other)),
                Err(e) => return Err(status::write(e)),
            };
        Ok(pb::LeaseKeepAliveResponse {
            header: self.ctx.header(revision.0),
            id,
            ttl,
        })
    }
}

#[tonic::async_trait]
impl Lease for LeaseService {
    type LeaseKeepAliveStream = ReceiverStream<Result<pb::LeaseKeepAliveResponse, Status>>;

    #[tracing::instrument(level = "debug", skip_all)]
    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        let _admitted = self.ctx.admit(RequestClass::Mutating)?;
        let grant = grant_command(&request.into_inner())?;
        // As etcd: a grant takes space, so NOSPACE refuses it.
        if self.ctx.over_quota() {
            return Err(status::no_space());
        }
        match write::lease(&self.ctx.node, grant).await {
            Ok((LeaseAnswer::Lease(l), revision)) => Ok(Response::new(pb::LeaseGrantResponse {
                header: self.ctx.header(revision.0),
                id: l.id.0,
                ttl: l.ttl,
                error: String::new(),
            })),
            Ok((other, _)) => Err(status::unexpected_answer(&other)),
            Err(e) => Err(status::write(e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let _admitted = self.ctx.admit(RequestClass::Mutating)?;
        let id = request.into_inner().id;
        let (_, revision) = write::lease(&self.ctx.node, Command::LeaseRevoke { id: LeaseId(id) })
            .await
            .map_err(status::write)?;
        Ok(Response::new(pb::LeaseRevokeResponse {
            header: self.ctx.header(revision.0),
        }))
    }

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let service = self.clone();
        let span = tracing::info_span!("etcd_lease_keep_alive", node = self.ctx.node.id());
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                loop {
                    let req = tokio::select! {
                        next = inbound.message() => match next {
                            Ok(Some(req)) => req,
                            _ => return,
                        },
                        _ = tx.closed() => return,
                        _ = service.ctx.stopped() => return,
                    };
                    let resp = service.keep_alive_once(req.id).await;
                    if tx.send(resp).await.is_err() {
                        return;
                    }
                }
            },
            span,
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let _admitted = self.ctx.admit(RequestClass::ReadOnly)?;
        let req = request.into_inner();
        self.ctx
            .node
            .linearizable_barrier()
            .await
            .map_err(status::raft)?;
        let current = self.ctx.node.store().applied().revision.0;
        let id = req.id;
        // Scans the lease's attached keys: off the async workers.
        let found = self
            .ctx
            .node
            .store()
            .run_blocking(move |s| s.lease(LeaseId(id)))
            .await
            .map_err(status::store)?;
        let resp = match found {
            Some((lease, keys)) => pb::LeaseTimeToLiveResponse {
                header: self.ctx.header(current),
                id: lease.id.0,
                ttl: self.keeper.remaining(&lease),
                granted_ttl: lease.ttl,
                keys: if req.keys { keys } else { Vec::new() },
            },
            // etcd: an expired or unknown lease has TTL -1.
            None => pb::LeaseTimeToLiveResponse {
                header: self.ctx.header(current),
                id: req.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            },
        };
        Ok(Response::new(resp))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn lease_leases(
        &self,
        _request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        self.ctx
            .node
            .linearizable_barrier()
            .await
            .map_err(status::raft)?;
        let current = self.ctx.node.store().applied().revision.0;
        let leases = self
            .ctx
            .node
            .store()
            .run_blocking(|s| s.leases())
            .await
            .map_err(status::store)?
            .into_iter()
            .map(|l| pb::LeaseStatus { id: l.id.0 })
            .collect();
        Ok(Response::new(pb::LeaseLeasesResponse {
            header: self.ctx.header(current),
            leases,
        }))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;

    proptest! {
        #![proptest_config(fuzz::config())]

        /// Any TTL and id a client sends is a grant or etcd's refusal.
        #[test]
        fn any_lease_grant_is_a_command_or_out_of_range(
            ttl in fuzz::edge_i64(),
            id in fuzz::edge_i64(),
        ) {
            match grant_command(&pb::LeaseGrantRequest { ttl, id }) {
                Ok(Command::LeaseGrant { id: granted, ttl: granted_ttl }) => {
                    prop_assert!(granted_ttl >= MIN_LEASE_TTL);
                    prop_assert!(granted_ttl >= ttl);
                    prop_assert!(granted != LeaseId::NONE);
                    prop_assert!(id == 0 || granted == LeaseId(id));
                }
                Ok(other) => prop_assert!(false, "not a grant: {other:?}"),
                Err(s) => prop_assert_eq!(s.code(), tonic::Code::OutOfRange, "{:?}", s),
            }
        }
    }

    #[test]
    fn clocks_restart_on_renewal_and_report_expiry() {
        let keeper = LeaseKeeper::default();
        let t0 = Instant::now();
        let lease = |renewals| LeaseRecord {
            id: LeaseId(7),
            ttl: 10,
            renewals,
        };
        assert!(keeper.sync(&[lease(0)], t0).is_empty());
        let later = t0 + Duration::from_secs(9);
        assert!(keeper.sync(&[lease(0)], later).is_empty());
        // A renewal at 9 s restarts the clock: not expired at 11 s.
        assert!(keeper.sync(&[lease(1)], later).is_empty());
        assert!(keeper
            .sync(&[lease(1)], t0 + Duration::from_secs(11))
            .is_empty());
        assert_eq!(
            keeper.sync(&[lease(1)], t0 + Duration::from_secs(20)),
            vec![(7, 1)],
            "an expiry carries the renewal count its clock saw"
        );
        // A revoked lease loses its clock.
        assert!(keeper.sync(&[], t0 + Duration::from_secs(30)).is_empty());
        assert!(keeper.clocks().is_empty());
    }
}
