//! How a node joins and runs its Raft group ([`RaftNodeConfig`]), the
//! limits every replicated command meets ([`command_limits`]), and the
//! slice of the election timeout range each member draws from
//! (`election_window`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kubestore_storage::{DiskFaults, Limits, NodeId};

use crate::propose::{MAX_BATCH, MAX_BATCH_BYTES};

/// How a node joins and runs its Raft group.
#[derive(Debug, Clone)]
pub struct RaftNodeConfig {
    /// This node's member id (`--id`).
    pub id: NodeId,
    /// Where this node keeps its RocksDB database and snapshots.
    pub data_dir: PathBuf,
    /// Every member of the initial cluster, this node included: id → peer
    /// address (where it serves [`RaftNode::raft_service`](crate::RaftNode::raft_service) and
    /// [`RaftNode::cluster_service`](crate::RaftNode::cluster_service)). A node whose storage is empty
    /// bootstraps with exactly these.
    pub members: BTreeMap<NodeId, String>,
    /// Where this node's clients reach its gRPC API (the etcd API), as
    /// peers report it ([`RaftNode::member_client_addrs`](crate::RaftNode::member_client_addrs)); `None`: nowhere.
    pub client_addr: Option<String>,
    /// How often the leader sends heartbeats; openraft 0.9 also times out
    /// every AppendEntries after one interval.
    pub heartbeat_interval: Duration,
    /// The low end of the cluster's election timeout range; each member
    /// draws from its own slice of the range (`election_window`).
    pub election_timeout_min: Duration,
    /// The high end (exclusive) of the cluster's election timeout range.
    pub election_timeout_max: Duration,
    /// Build a snapshot (and purge the log before it) after this many entries.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind the snapshot, for lagging followers.
    pub log_entries_kept_after_snapshot: u64,
    /// How long a write or read barrier waits for a leader before failing.
    pub request_timeout: Duration,
    /// How long after a read-index round began the leader answers read
    /// indexes without another round (zero: every read runs a round).
    /// Must stay well below `election_timeout_max`, the followers' lease,
    /// and below `election_timeout_min`, the least a restarted voter waits
    /// before campaigning; [`RaftNode::start`](crate::RaftNode::start) refuses more than half of
    /// `election_timeout_min`.
    pub read_lease: Duration,
    /// What every command proposed through this node must meet:
    /// [`RaftNode::write`](crate::RaftNode::write) checks its command before proposing or
    /// forwarding it, and the leader checks every command a peer forwards
    /// before proposing it (a peer-port client is not trusted to have come
    /// through a front end). Front ends with tighter rules (the etcd API's
    /// [`Limits::ETCD`]) check those themselves first.
    pub command_limits: Limits,
    /// The disk faults the node's store obeys from its first moment
    /// (tests; the fault-injection endpoint changes them at run time).
    pub disk_faults: DiskFaults,
}

/// Most operations per txn branch [`command_limits`] allows: the
/// Kubernetes front end's deletecollection is one txn with a compare and a
/// delete per object, so its txns are not bounded by etcd's 128; this only
/// bounds the work of one forged command (its bytes bind first in practice).
pub const MAX_REPLICATED_TXN_OPS: usize = 1 << 20;

/// The limits on commands for a node whose front ends send commands of up
/// to `max_command_bytes` of keys and values: any number of batches the
/// proposer makes (`crate::propose`: at most its command count, and at
/// most its byte threshold plus the one command that crossed it).
pub fn command_limits(max_command_bytes: usize) -> Limits {
    Limits {
        max_txn_ops: MAX_REPLICATED_TXN_OPS,
        max_command_bytes,
        max_batch_commands: MAX_BATCH,
        max_batch_bytes: MAX_BATCH_BYTES as usize + max_command_bytes,
    }
}

impl RaftNodeConfig {
    /// Defaults for a node: 200 ms heartbeats, a 0.3–0.6 s election
    /// timeout range (each member draws from its own slice of it, see
    /// `election_window`; a dead leader is replaced once a follower's
    /// lease, its maximum, and then its own timeout have passed), a 150 ms
    /// read lease.
    pub fn new(id: NodeId, data_dir: PathBuf, members: BTreeMap<NodeId, String>) -> Self {
        Self {
            id,
            data_dir,
            members,
            client_addr: None,
            heartbeat_interval: Duration::from_millis(200),
            election_timeout_min: Duration::from_millis(300),
            election_timeout_max: Duration::from_millis(600),
            snapshot_after_entries: 10_000,
            log_entries_kept_after_snapshot: 1_000,
            request_timeout: Duration::from_secs(10),
            read_lease: Duration::from_millis(150),
            command_limits: command_limits(Limits::ETCD.max_command_bytes),
            disk_faults: DiskFaults::default(),
        }
    }
}

/// This node's own slice of the election timeout range.
///
/// openraft 0.9 draws a node's randomised election timeout once, when the
/// process starts, and keeps it. Two nodes that drew nearly the same one
/// become candidates at nearly the same moment after every lost leader,
/// split the vote and retry in step: the fault-schedule checker saw the
/// two survivors of a leader's loss take 3–7 s to elect, every time it was
/// the same leader that failed. So the range `[min, max)` is cut into one
/// slice per member, in id order, and each node draws in the first half of
/// its own: any two nodes' timeouts differ by at least half a slice (50 ms
/// for three members and the defaults), far more than a vote's round trip.
/// Each node's maximum, which openraft also uses as the lease in which its
/// followers refuse other candidates, stays above half the minimum, so the
/// read lease's bound still holds.
pub(crate) fn election_window(config: &RaftNodeConfig) -> (Duration, Duration) {
    let members = u32::try_from(config.members.len()).unwrap_or(1).max(1);
    let rank = config
        .members
        .keys()
        .position(|&id| id == config.id)
        .and_then(|r| u32::try_from(r).ok())
        .unwrap_or(0);
    let span = config
        .election_timeout_max
        .saturating_sub(config.election_timeout_min);
    let slice = span / members;
    let min = config.election_timeout_min + slice * rank;
    (min, min + (slice / 2).max(Duration::from_millis(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_draws_its_election_timeout_from_its_own_slice() {
        let members: BTreeMap<NodeId, String> =
            (1..=3).map(|i| (i, format!("127.0.0.1:{i}"))).collect();
        let windows: Vec<(Duration, Duration)> = (1..=3)
            .map(|id| {
                let config = RaftNodeConfig::new(id, PathBuf::from("d"), members.clone());
                election_window(&config)
            })
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(
            windows,
            vec![(ms(300), ms(350)), (ms(400), ms(450)), (ms(500), ms(550))]
        );
        // Any two draws differ by at least 50 ms, and every node's lease
        // (its maximum) is longer than the 150 ms read lease.
        for pair in windows.windows(2) {
            assert!(pair[1].0 - pair[0].1 >= ms(50));
        }
        assert!(windows.iter().all(|w| w.1 > ms(150)));
        let alone = RaftNodeConfig::new(1, PathBuf::from("d"), BTreeMap::from([(1, "a".into())]));
        assert_eq!(election_window(&alone), (ms(300), ms(450)));
    }
}
