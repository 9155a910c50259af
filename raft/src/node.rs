//! The Raft node's core: [`RaftNode::start`] (storage, openraft,
//! bootstrap of the static membership; its configuration is
//! [`crate::config`]), leader
//! tracking, membership and client addresses, and status for `/readyz`,
//! `/livez` and `/debug/cluster`.
//!
//! The two operations the front ends need live beside it:
//! [`RaftNode::write`] in `forward.rs` (from any node; followers
//! forward to the leader) and [`RaftNode::linearizable_barrier`] in
//! `read_index.rs` (from any node). What peers call on this node is
//! served by [`crate::cluster_rpc`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubestore_proto::raft::cluster_service_client::ClusterServiceClient;
use kubestore_proto::raft::raft_service_server::RaftServiceServer;
use kubestore_proto::raft::{
    ClientAddrRequest, ForwardRequest, ForwardResponse, ReadIndexRequest, ReadIndexResponse,
};
use kubestore_storage::{Limits, LogIndex, Node, NodeId, Revision, Store, TypeConfig};
use openraft::error::RaftError;
use openraft::metrics::RaftServerMetrics;
use openraft::{Raft, ServerState, SnapshotPolicy};
use tonic::transport::Channel;
use tracing::{instrument, Instrument};

use crate::call_stream::{LeaderStream, StreamKind};
use crate::config::{election_window, RaftNodeConfig};
use crate::election::{self, LeaderContact};
use crate::error::{ConfigError, ProtocolError, RaftNodeError, Unreachable};
use crate::lease::ReadLease;
use crate::network::{self, Faults, NetworkFactory, RaftRpcServer, MAX_MESSAGE_BYTES};
use crate::propose::Proposer;
use crate::read::ReadBarrier;
use crate::session::ClientSession;

/// How long one attempt at the leader (a forwarded write, a read-index
/// request) may go unanswered before the caller looks for the leader again
/// and retries there: longer than an election (at most 1 s), far shorter
/// than a request's deadline, so a paused or cut-off leader costs a
/// request one attempt, not its whole deadline.
pub const PEER_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1_500);

/// Tells the followers a commit index that was held back from them (the
/// leader's own copy of its entries was not on disk yet) as soon as it is:
/// a heartbeat carries it, instead of the next entry or the next timed
/// heartbeat, so a follower's reads do not wait for either. Ends with Raft.
async fn release_held_commits(
    durability: kubestore_storage::LogDurability,
    raft: Raft<TypeConfig>,
) {
    loop {
        durability.released().await;
        if raft.trigger().heartbeat().await.is_err() {
            return;
        }
    }
}

/// Logs every change of this node's role, term or known leader at `info`
/// (the elections a fault causes, with when each node learned of them),
/// until Raft shuts down. It follows openraft's server metrics, which
/// change only with the vote, role, leader or membership, not with every
/// entry.
async fn log_role_changes(
    id: NodeId,
    mut metrics: tokio::sync::watch::Receiver<RaftServerMetrics<NodeId, Node>>,
) {
    let mut last = None;
    loop {
        let now = {
            let m = metrics.borrow_and_update();
            (m.state, m.vote.leader_id().term, m.current_leader)
        };
        if last != Some(now) {
            let (state, term, leader) = now;
            tracing::info!(node = id, ?state, term, ?leader, "raft role");
            last = Some(now);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// A snapshot of the node's Raft view, for `/debug/cluster` and tests.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClusterStatus {
    /// This node's id.
    pub node_id: NodeId,
    /// The leader this node knows of, if any.
    pub leader_id: Option<NodeId>,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    /// The Raft term this node is in.
    pub term: u64,
    /// The index of the last entry in this node's log (0: empty).
    pub last_log_index: LogIndex,
    /// The highest index this node knows to be committed.
    pub committed_index: LogIndex,
    /// The last index this node's state machine applied.
    pub applied_index: LogIndex,
    /// The store's current revision.
    pub revision: Revision,
    /// The store's compaction point.
    pub compacted_revision: Revision,
    /// The last index the current snapshot covers, if there is one.
    pub snapshot_index: Option<LogIndex>,
    /// The last index purged from the log, if any was.
    pub purged_index: Option<LogIndex>,
    /// Every member of the current membership.
    pub members: Vec<Member>,
    /// Read-index rounds this node ran as the leader.
    pub read_index_rounds: u64,
    /// Read indexes this node answered from its lease, as the leader.
    pub leased_read_indexes: u64,
    /// Streams this node opened to forward writes to a leader (one per
    /// leader it forwarded to while the stream to it stayed up).
    pub forward_streams_opened: u64,
    /// Streams this node opened to ask a leader for read indexes (one per
    /// leader it asked while the stream to it stayed up).
    pub read_index_streams_opened: u64,
    /// Streams this node opened to send AppendEntries to its followers, as
    /// the leader (one per follower while the stream to it stays up).
    pub entries_streams_opened: u64,
}

/// One member of the Raft group, as the membership records it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Member {
    /// Its member id.
    pub id: NodeId,
    /// Its peer address (`--peer-addr`), where its Raft and cluster
    /// services are.
    pub addr: String,
}

/// The state behind every clone of a [`RaftNode`]; the forwarding, read
/// index and cluster RPC modules reach it through [`RaftNode::inner`].
pub(crate) struct Inner {
    pub(crate) id: NodeId,
    pub(crate) raft: Raft<TypeConfig>,
    pub(crate) store: Store,
    pub(crate) faults: Faults,
    pub(crate) request_timeout: Duration,
    pub(crate) election_timeout_max: Duration,
    /// When this node last heard from its leader (see [`crate::election`]).
    pub(crate) leader_contact: LeaderContact,
    pub(crate) peers: Mutex<HashMap<NodeId, ClusterServiceClient<Channel>>>,
    /// The stream forwarded writes travel on to the leader.
    pub(crate) forward_streams: LeaderStream<ForwardRequest, ForwardResponse>,
    /// The stream a follower asks the leader for read indexes on.
    pub(crate) read_index_streams: LeaderStream<ReadIndexRequest, ReadIndexResponse>,
    /// The network's count of streams opened to send AppendEntries.
    pub(crate) entries_streams_opened: Arc<AtomicU64>,
    /// This node's client address ([`RaftNodeConfig::client_addr`]).
    pub(crate) client_addr: Option<String>,
    /// Peers' client addresses, as they answered `ClientAddr` (fixed for a
    /// process's life, so kept once learned).
    pub(crate) peer_client_addrs: Mutex<HashMap<NodeId, String>>,
    pub(crate) barrier: ReadBarrier,
    pub(crate) lease: ReadLease,
    pub(crate) read_index_rounds: AtomicU64,
    pub(crate) leased_read_indexes: AtomicU64,
    pub(crate) proposer: Proposer,
    /// This process's proposal ids (exactly-once writes).
    pub(crate) session: ClientSession,
    /// [`RaftNodeConfig::command_limits`].
    pub(crate) command_limits: Limits,
    /// The store's background compactor, awaited by [`RaftNode::shutdown`].
    compactor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How far this node's log is on disk.
    log_durability: kubestore_storage::LogDurability,
}

/// The proposer's handle on its node ([`crate::propose::Submit`] is
/// implemented for it with the forwarding code); weak, so that the
/// batching task does not keep a shut-down node alive.
#[derive(Clone)]
pub(crate) struct WeakNode(pub(crate) std::sync::Weak<Inner>);

/// A running Raft node. Cheap to clone.
#[derive(Clone)]
pub struct RaftNode {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for RaftNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode")
            .field("id", &self.inner.id)
            .finish()
    }
}

impl RaftNode {
    /// Opens storage, starts openraft, and bootstraps the cluster from
    /// `config.members` if this node has never been initialized. The caller
    /// serves [`RaftNode::raft_service`] and [`RaftNode::cluster_service`]
    /// on the node's peer address, and nothing else there.
    #[instrument(skip_all, fields(node = config.id))]
    pub async fn start(config: RaftNodeConfig) -> Result<Self, RaftNodeError> {
        if !config.members.contains_key(&config.id) {
            return Err(RaftNodeError::Config(ConfigError::NotAMember {
                id: config.id,
                members: config.members.keys().copied().collect(),
            }));
        }
        if config.read_lease > config.election_timeout_min / 2 {
            return Err(RaftNodeError::Config(ConfigError::ReadLeaseTooLong {
                lease: config.read_lease,
                election_timeout_min: config.election_timeout_min,
            }));
        }
        let (own_min, own_max) = election_window(&config);
        let raft_config = openraft::Config {
            cluster_name: "kubestore".into(),
            heartbeat_interval: config.heartbeat_interval.as_millis() as u64,
            election_timeout_min: own_min.as_millis() as u64,
            election_timeout_max: own_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_after_entries),
            max_in_snapshot_log_to_keep: config.log_entries_kept_after_snapshot,
            // Entries are batches of up to 1 MiB (plus one command of up
            // to 1.5 MiB): 32 of them stay under MAX_MESSAGE_BYTES.
            max_payload_entries: 32,
            // Bounds each snapshot chunk RPC, and the last one returns only
            // once the follower has installed the snapshot (many seconds at
            // a million objects). At 5 s that last chunk timed out, and the
            // leader sent the whole snapshot again. A dead follower fails a
            // chunk at once (connection refused); only a paused one holds a
            // chunk this long, and then nothing else waits on it.
            install_snapshot_timeout: 120_000,
            ..Default::default()
        };
        let raft_config = Arc::new(
            raft_config
                .validate()
                .map_err(|e| RaftNodeError::Config(ConfigError::Openraft(Arc::new(e))))?,
        );
        let (log_store, state_machine, store) =
            kubestore_storage::open_with_faults(&config.data_dir, config.disk_faults.clone())?;
        let session = ClientSession::new(config.id, store.boot_epoch());
        let faults = Faults::default();
        // The leader's own appends are reported before their fsync, which
        // overlaps the followers' (see `kubestore_storage::LogDurability`).
        let log_store = log_store.leading_as(config.id);
        let durability = log_store.durability().clone();
        let network =
            NetworkFactory::new(faults.clone(), store.timings().clone(), durability.clone());
        let entries_streams_opened = Arc::clone(&network.entries_streams_opened);
        let raft = Raft::new(config.id, raft_config, network, log_store, state_machine).await?;
        tokio::spawn(
            release_held_commits(durability.clone(), raft.clone()).instrument(
                tracing::debug_span!("release_held_commits", node = config.id),
            ),
        );
        tokio::spawn(log_role_changes(config.id, raft.server_metrics()));
        // Stopped and awaited by `shutdown`: it holds the database open.
        let compactor = tokio::spawn(
            store
                .clone()
                .run_compactor()
                .instrument(tracing::info_span!("compactor", node = config.id)),
        );
        let leader_contact = LeaderContact::new();
        election::spawn(
            config.id,
            raft.clone(),
            store.subscribe_installing(),
            leader_contact.clone(),
            own_max + own_min,
        );

        let timings = store.timings().clone();
        let node = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let proposer = Proposer::spawn(config.id, WeakNode(weak.clone()), timings);
            let weak = weak.clone();
            let barrier = ReadBarrier::spawn(move || {
                let weak = weak.clone();
                async move {
                    match weak.upgrade() {
                        Some(inner) => RaftNode { inner }.fetch_read_index().await,
                        None => Err(RaftNodeError::ShuttingDown),
                    }
                }
            });
            Inner {
                id: config.id,
                raft,
                store,
                faults,
                request_timeout: config.request_timeout,
                election_timeout_max: config.election_timeout_max,
                leader_contact,
                peers: Mutex::new(HashMap::new()),
                forward_streams: LeaderStream::new(StreamKind::Forward),
                read_index_streams: LeaderStream::new(StreamKind::ReadIndex),
                entries_streams_opened,
                client_addr: config.client_addr.clone(),
                peer_client_addrs: Mutex::new(HashMap::new()),
                barrier,
                lease: ReadLease::new(config.read_lease),
                read_index_rounds: AtomicU64::new(0),
                leased_read_indexes: AtomicU64::new(0),
                proposer,
                session,
                command_limits: config.command_limits,
                compactor: Mutex::new(Some(compactor)),
                log_durability: durability,
            }
        });
        let node = RaftNode { inner: node };

        if !node.inner.raft.is_initialized().await? {
            let members: BTreeMap<NodeId, Node> = config
                .members
                .iter()
                .map(|(id, addr)| (*id, Node { addr: addr.clone() }))
                .collect();
            tracing::info!(?members, "bootstrapping a new cluster");
            match node.inner.raft.initialize(members).await {
                Ok(()) => {}
                // Another member's bootstrap reached us first: nothing to do.
                Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => {}
                Err(RaftError::APIError(e)) => {
                    return Err(ProtocolError::Initialize(Arc::new(e)).into())
                }
                Err(RaftError::Fatal(e)) => return Err(e.into()),
            }
        }
        Ok(node)
    }

    /// This node's member id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// How long a request may wait on this node for the cluster (a
    /// proposal, a read index, a forward) before it fails.
    pub fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// The read handle on this node's store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Fault injection for tests.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// The Raft replication service, to be served on the node's peer port.
    pub fn raft_service(&self) -> RaftServiceServer<RaftRpcServer> {
        RaftServiceServer::new(self.raft_rpc_server())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn raft_rpc_server(&self) -> RaftRpcServer {
        RaftRpcServer {
            raft: self.inner.raft.clone(),
            timings: self.inner.store.timings().clone(),
            faults: self.inner.faults.clone(),
            leader_contact: self.inner.leader_contact.clone(),
        }
    }

    /// Serves a leader's stream of AppendEntries on `connection`.
    pub(crate) fn serve_entries(&self, connection: tokio::net::TcpStream) {
        self.raft_rpc_server().serve_entries(connection);
    }

    /// The leader this node knows of now, if any (it may have been deposed
    /// since; writes and read indexes find out and retry).
    pub fn current_leader(&self) -> Option<NodeId> {
        self.inner.raft.metrics().borrow().current_leader
    }

    /// The Raft term this node is in.
    pub fn current_term(&self) -> u64 {
        self.inner.raft.metrics().borrow().current_term
    }

    /// The members of the cluster by id, with their advertised addresses.
    pub fn members(&self) -> BTreeMap<NodeId, String> {
        self.inner
            .raft
            .metrics()
            .borrow()
            .membership_config
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect()
    }

    /// Every member's client address (its etcd API), by id: this node's
    /// own, and each peer's as it answers `ClientAddr` on its peer port
    /// (asked once per peer, within `timeout`). A member that has not
    /// answered yet, or has no client address, is left out.
    #[instrument(level = "debug", skip_all, fields(node = self.inner.id))]
    pub async fn member_client_addrs(&self, timeout: Duration) -> BTreeMap<NodeId, String> {
        let mut known = BTreeMap::new();
        let mut unknown = Vec::new();
        {
            let cached = self
                .inner
                .peer_client_addrs
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for id in self.members().into_keys() {
                if id == self.inner.id {
                    if let Some(own) = &self.inner.client_addr {
                        known.insert(id, own.clone());
                    }
                } else if let Some(addr) = cached.get(&id) {
                    known.insert(id, addr.clone());
                } else {
                    unknown.push(id);
                }
            }
        }
        let asks = unknown.into_iter().map(|peer| async move {
            let mut client = self.peer_client(peer).ok()?;
            let reply = tokio::time::timeout(timeout, client.client_addr(ClientAddrRequest {}))
                .await
                .ok()?
                .map_err(|status| {
                    tracing::debug!(peer, %status, "peer did not say its client address");
                })
                .ok()?;
            let addr = reply.into_inner().client_addr;
            (!addr.is_empty()).then_some((peer, addr))
        });
        let learned: Vec<(NodeId, String)> = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        let mut cached = self
            .inner
            .peer_client_addrs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (peer, addr) in learned {
            cached.insert(peer, addr.clone());
            known.insert(peer, addr);
        }
        known
    }

    /// Waits until the leader this node knows of is no longer `known` (an
    /// election, or this node learning of one) and returns the new one:
    /// what a task that runs on the leader only waits on, instead of
    /// polling [`RaftNode::current_leader`].
    pub async fn leader_changed(
        &self,
        known: Option<NodeId>,
    ) -> Result<Option<NodeId>, RaftNodeError> {
        let mut metrics = self.inner.raft.metrics();
        let changed = metrics
            .wait_for(|m| m.current_leader != known)
            .await
            .map_err(|_| RaftNodeError::ShuttingDown)?;
        Ok(changed.current_leader)
    }

    /// Waits until some leader is known.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, RaftNodeError> {
        let mut metrics = self.inner.raft.metrics();
        let outcome =
            match tokio::time::timeout(timeout, metrics.wait_for(|m| m.current_leader.is_some()))
                .await
            {
                Ok(Ok(m)) => m.current_leader.ok_or(RaftNodeError::NoLeader),
                Ok(Err(_)) => Err(RaftNodeError::ShuttingDown),
                Err(_) => Err(RaftNodeError::Timeout("a leader")),
            };
        outcome
    }

    /// Resolves once an attempt at `leader` should be abandoned for another
    /// leader: never when `leader` is this node (the local attempt ends on
    /// its own when this node stops leading, see `write_local`), else once
    /// another leader is known.
    pub(crate) async fn rerouted_from(&self, leader: NodeId) {
        if leader == self.inner.id {
            std::future::pending::<()>().await;
        }
        self.leader_moved_from(leader).await;
    }

    /// The term this node leads in, if it is the leader now.
    pub(crate) fn leading_term(&self) -> Option<u64> {
        let m = self.inner.raft.metrics();
        let m = m.borrow();
        (m.state == ServerState::Leader && m.current_leader == Some(self.inner.id))
            .then_some(m.current_term)
    }

    /// Resolves once this node no longer leads in `term` (another term, or
    /// another role). Never resolves if Raft stops: the pending call fails
    /// on its own then.
    pub(crate) async fn stopped_leading(&self, term: u64) {
        let id = self.inner.id;
        let mut metrics = self.inner.raft.metrics();
        let moved = metrics.wait_for(|m| {
            m.current_term != term || m.state != ServerState::Leader || m.current_leader != Some(id)
        });
        if moved.await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves once this node knows of a leader other than `leader`.
    async fn leader_moved_from(&self, leader: NodeId) {
        let mut metrics = self.inner.raft.metrics();
        if metrics
            .wait_for(|m| m.current_leader.is_some_and(|l| l != leader))
            .await
            .is_err()
        {
            // Raft stopped: the attempt itself will fail.
            std::future::pending::<()>().await;
        }
    }

    /// Waits a little for leadership to move away from `stale`.
    pub(crate) async fn pause_for_election(
        &self,
        deadline: tokio::time::Instant,
        stale: NodeId,
    ) -> Result<(), RaftNodeError> {
        let mut metrics = self.inner.raft.metrics();
        let until = deadline.min(tokio::time::Instant::now() + Duration::from_millis(300));
        let wait = metrics.wait_for(|m| m.current_leader.is_some_and(|l| l != stale));
        let stopped = matches!(tokio::time::timeout_at(until, wait).await, Ok(Err(_)));
        if stopped {
            return Err(RaftNodeError::ShuttingDown);
        }
        Ok(())
    }

    pub(crate) fn peer_client(
        &self,
        peer: NodeId,
    ) -> Result<ClusterServiceClient<Channel>, RaftNodeError> {
        let mut peers = self.inner.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = peers.get(&peer) {
            return Ok(c.clone());
        }
        let addr = self.peer_addr(peer)?;
        let channel = network::channel(&addr).map_err(|e| RaftNodeError::Unreachable {
            node: peer,
            cause: Unreachable::Address(Arc::new(e)),
        })?;
        let client = ClusterServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        peers.insert(peer, client.clone());
        Ok(client)
    }

    /// The peer port address of member `peer`, as the membership gives it.
    pub(crate) fn peer_addr(&self, peer: NodeId) -> Result<String, RaftNodeError> {
        self.inner
            .raft
            .metrics()
            .borrow()
            .membership_config
            .nodes()
            .find(|(id, _)| **id == peer)
            .map(|(_, n)| n.addr.clone())
            .ok_or(RaftNodeError::Unreachable {
                node: peer,
                cause: Unreachable::NotAMember,
            })
    }

    /// Whether this node is in touch with a leader that leads: it knows a
    /// leader and, when it is that leader, a quorum acknowledged it within
    /// the last maximum election timeout (a leader cut off from its
    /// followers keeps its role in openraft 0.9 but loses this). An error
    /// says why not.
    pub fn leader_contact(&self) -> Result<NodeId, String> {
        let m = self.inner.raft.metrics().borrow().clone();
        let Some(leader) = m.current_leader else {
            return Err(format!(
                "no leader known ({:?} in term {})",
                m.state, m.current_term
            ));
        };
        if leader == self.inner.id {
            let limit = self.inner.election_timeout_max.as_millis();
            match m.millis_since_quorum_ack {
                Some(ms) if u128::from(ms) <= limit => {}
                Some(ms) => {
                    return Err(format!(
                        "this node leads but no quorum acknowledged it for {ms} ms"
                    ))
                }
                None => return Err("this node leads but no quorum acknowledged it yet".into()),
            }
        }
        Ok(leader)
    }

    /// Why the Raft core stopped on its own (a storage error is fatal to
    /// openraft 0.9), or `None` while it runs. A node whose core stopped
    /// serves nothing and must be restarted: `/livez` fails and `serve`
    /// exits.
    pub fn core_stopped(&self) -> Option<String> {
        match &self.inner.raft.metrics().borrow().running_state {
            Ok(()) => None,
            Err(fatal) => Some(fatal.to_string()),
        }
    }

    /// Resolves when the Raft core stops on its own, with the reason (see
    /// [`RaftNode::core_stopped`]); a shutdown asked for also ends it.
    ///
    /// Waits on the server metrics, which change only with the role, term
    /// or membership and close when the core exits (its last act is to
    /// record why in the full metrics), not on the full metrics: those
    /// change with every append and apply, and a waiter there would wake
    /// a parked runtime thread for each write.
    pub async fn core_stopped_wait(&self) -> String {
        let mut server = self.inner.raft.server_metrics();
        loop {
            if let Some(reason) = self.core_stopped() {
                return reason;
            }
            if server.changed().await.is_err() {
                return self
                    .core_stopped()
                    .unwrap_or_else(|| "the raft core is gone".into());
            }
        }
    }

    /// How many committed entries this node has not applied yet.
    pub async fn apply_lag(&self) -> Result<u64, RaftNodeError> {
        let committed = self
            .inner
            .raft
            .with_raft_state(|st| st.committed.map_or(0, |l| l.index))
            .await?;
        Ok(committed.saturating_sub(self.inner.store.applied().log_index.0))
    }

    /// The index of the last entry of this node's log that is on disk. A
    /// leader's own entries are replicated before their fsync, so while it
    /// leads this may trail its log (see `kubestore_storage::LogDurability`).
    pub fn log_synced_index(&self) -> u64 {
        self.inner.log_durability.synced_index()
    }

    /// Waits up to `timeout` until this node's last log index and last
    /// applied index (in openraft's metrics) satisfy `done`.
    pub async fn wait_for_log(
        &self,
        timeout: Duration,
        what: &'static str,
        done: impl Fn(u64, u64) -> bool + Send + 'static,
    ) -> Result<(), RaftNodeError> {
        self.inner
            .raft
            .wait(Some(timeout))
            .metrics(
                move |m| {
                    done(
                        m.last_log_index.unwrap_or(0),
                        m.last_applied.map_or(0, |l| l.index),
                    )
                },
                what,
            )
            .await
            .map(|_| ())
            .map_err(|_| RaftNodeError::Timeout(what))
    }

    /// The node's Raft view right now.
    pub async fn status(&self) -> Result<ClusterStatus, RaftNodeError> {
        let committed = self
            .inner
            .raft
            .with_raft_state(|st| st.committed.map_or(0, |l| l.index))
            .await?;
        let m = self.inner.raft.metrics().borrow().clone();
        let applied = self.inner.store.applied();
        Ok(ClusterStatus {
            node_id: self.inner.id,
            leader_id: m.current_leader,
            state: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            }
            .into(),
            term: m.current_term,
            last_log_index: LogIndex(m.last_log_index.unwrap_or(0)),
            committed_index: LogIndex(committed),
            applied_index: LogIndex(m.last_applied.map_or(0, |l| l.index)),
            revision: applied.revision,
            compacted_revision: applied.compacted,
            snapshot_index: m.snapshot.map(|l| LogIndex(l.index)),
            purged_index: m.purged.map(|l| LogIndex(l.index)),
            members: m
                .membership_config
                .nodes()
                .map(|(id, n)| Member {
                    id: *id,
                    addr: n.addr.clone(),
                })
                .collect(),
            read_index_rounds: self.inner.read_index_rounds.load(Ordering::Relaxed),
            leased_read_indexes: self.inner.leased_read_indexes.load(Ordering::Relaxed),
            forward_streams_opened: self.inner.forward_streams.opened(),
            read_index_streams_opened: self.inner.read_index_streams.opened(),
            entries_streams_opened: self.inner.entries_streams_opened.load(Ordering::Relaxed),
        })
    }

    /// Asks openraft to build a snapshot now (and purge the log behind it).
    pub async fn trigger_snapshot(&self) -> Result<(), RaftNodeError> {
        self.inner
            .raft
            .trigger()
            .snapshot()
            .await
            .map_err(RaftNodeError::from)
    }

    /// Stops openraft and the store's compactor. Storage is closed when the
    /// last handle is dropped.
    pub async fn shutdown(&self) -> Result<(), RaftNodeError> {
        let stopped = self
            .inner
            .raft
            .shutdown()
            .await
            .map_err(|e| ProtocolError::Shutdown(Arc::new(e)).into());
        self.inner.store.stop_compactor();
        let compactor = self
            .inner
            .compactor
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(task) = compactor {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "the compactor task failed");
            }
        }
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_lease_beyond_half_the_minimum_election_timeout_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("node");
        let members = BTreeMap::from([(1, "127.0.0.1:1".to_string())]);
        let mut config = RaftNodeConfig::new(1, data_dir.clone(), members);
        config.read_lease = config.election_timeout_min / 2 + Duration::from_millis(1);
        match RaftNode::start(config).await {
            Err(RaftNodeError::Config(e @ ConfigError::ReadLeaseTooLong { .. })) => assert!(
                e.to_string().contains("read lease"),
                "unexpected message: {e}"
            ),
            Err(e) => panic!("expected a configuration error, got {e}"),
            Ok(_) => panic!("a lease longer than half the minimum election timeout was accepted"),
        }
        assert!(!data_dir.exists(), "storage was opened before the check");
    }

    #[tokio::test]
    async fn waiting_for_the_core_to_stop_resolves_when_it_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = BTreeMap::from([(1, "127.0.0.1:1".to_string())]);
        let config = RaftNodeConfig::new(1, dir.path().join("node"), members);
        let node = RaftNode::start(config).await.expect("start");
        node.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a one-member cluster elects itself");
        let waiter = tokio::spawn({
            let node = node.clone();
            async move { node.core_stopped_wait().await }
        });
        for i in 0..10u8 {
            let put = kubestore_storage::PutRequest::new(vec![b'k', i], vec![i]);
            let txn = kubestore_storage::Txn {
                success: vec![kubestore_storage::Op::Put(put)],
                ..Default::default()
            };
            node.write(kubestore_storage::Command::Txn(txn))
                .await
                .expect("write");
        }
        assert_eq!(node.core_stopped(), None, "the core runs");
        node.shutdown().await.expect("shutdown");
        let reason = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the waiter ends once the core stops")
            .expect("the waiter task");
        assert!(!reason.is_empty());
        assert_eq!(node.core_stopped().as_deref(), Some(reason.as_str()));
    }
}
