//! What every etcd service of a node shares ([`Context`]: the Raft node,
//! the options, the cluster id, the stop signal), etcd's version and
//! request limits, and the check of a command against etcd's limits. The
//! services depend on this module, never on `etcd/mod.rs`, which builds
//! them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubestore_proto::etcd::etcdserverpb::ResponseHeader;
use kubestore_raft::RaftNode;
use kubestore_storage::{Command, Limits};
use tonic::Status;

use super::status;

/// The etcd server version kubestore reports (clients gate features on it).
pub const ETCD_VERSION: &str = "3.5.16";
/// The cluster version (major.minor) etcd reports beside it.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";
/// etcd's default `--max-request-bytes` (1.5 MiB), on a request's encoded
/// size; the command it becomes is held to [`Limits::ETCD`] (its op count,
/// `--max-txn-ops`, and its keys and values, at most this many bytes).
pub const MAX_REQUEST_BYTES: usize = Limits::ETCD.max_command_bytes;

/// Settings of the etcd front end (`--etcd-progress-notify-seconds`,
/// `--quota-backend-bytes`).
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// How often a watch created with `progress_notify` gets a progress
    /// response while idle (etcd's default is 10 minutes).
    pub progress_notify_interval: Duration,
    /// Refuse writes once the database is larger than this (etcd's
    /// `--quota-backend-bytes`); the NOSPACE alarm is raised.
    pub quota_bytes: u64,
    /// Requests in flight, shared with the REST front end.
    pub limits: crate::limits::InflightLimits,
}

/// What every etcd service of a node shares. Cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Context {
    pub(super) node: RaftNode,
    pub(super) options: EtcdOptions,
    /// Turns true when the node shuts down: long-lived streams (watch,
    /// keep-alive) end so the gRPC server's graceful shutdown can finish.
    pub(super) stop: tokio::sync::watch::Receiver<bool>,
    /// Derived once from the membership (fixed at bootstrap), not per
    /// response.
    cluster_id: Arc<std::sync::OnceLock<u64>>,
    /// The database's size as the quota check reads it.
    db_size: Arc<DbSizeGauge>,
}

/// How old the size the quota check reads may be. Writes admitted in that
/// window may take the database past the quota, as etcd's own check
/// (made before a proposal, while others are in flight) lets them.
pub(super) const DB_SIZE_REFRESH: Duration = Duration::from_millis(100);

/// The database's size for the quota check, read from storage at most
/// once per [`DB_SIZE_REFRESH`]. Reading it (two RocksDB properties of
/// each column family, under RocksDB's mutex) on every write took 4.3% of
/// the three nodes' CPU under etcd-API puts (BENCHMARKS.md, "The quota
/// check reads a cached size").
#[derive(Debug)]
struct DbSizeGauge {
    /// How old a reading may be ([`DB_SIZE_REFRESH`]).
    refresh: Duration,
    /// When the gauge was made: `read_at` counts from here.
    epoch: Instant,
    /// Microseconds after `epoch` of the last read, plus one (0: never read).
    read_at: AtomicU64,
    /// The size that read found, in bytes ([`DbSizeGauge::UNREAD`] until
    /// the first read stores one).
    bytes: AtomicU64,
}

impl DbSizeGauge {
    /// No size stored yet: a caller finding it reads one itself.
    const UNREAD: u64 = u64::MAX;

    fn new(refresh: Duration) -> Self {
        Self {
            refresh,
            epoch: Instant::now(),
            read_at: AtomicU64::new(0),
            bytes: AtomicU64::new(Self::UNREAD),
        }
    }

    /// The size, read again by `read` when the last reading is older than
    /// the refresh interval (by one caller; the others use the last one).
    fn get(&self, read: impl FnOnce() -> u64) -> u64 {
        let now = self.epoch.elapsed().as_micros() as u64 + 1;
        let last = self.read_at.load(Ordering::Acquire);
        let stale = last == 0 || now.saturating_sub(last) >= self.refresh.as_micros() as u64;
        if stale
            && self
                .read_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let bytes = read().min(Self::UNREAD - 1);
            self.bytes.store(bytes, Ordering::Release);
            return bytes;
        }
        match self.bytes.load(Ordering::Acquire) {
            // Another caller is making the first reading: make one too.
            Self::UNREAD => read(),
            bytes => bytes,
        }
    }
}

impl Context {
    pub(super) fn new(
        node: RaftNode,
        options: EtcdOptions,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            node,
            options,
            stop,
            cluster_id: Arc::default(),
            db_size: Arc::new(DbSizeGauge::new(DB_SIZE_REFRESH)),
        }
    }

    /// Takes an in-flight slot for a unary request, or refuses it with
    /// etcd's `ResourceExhausted` "too many requests".
    pub(super) fn admit(
        &self,
        class: crate::limits::RequestClass,
    ) -> Result<crate::limits::Admitted, Status> {
        self.options
            .limits
            .admit(class)
            .map_err(|_| status::too_many_requests())
    }

    /// Resolves once the node is shutting down.
    pub(super) async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// A stable id for the cluster: derived from its initial members, so
    /// every node reports the same one.
    fn cluster_id(&self) -> u64 {
        if let Some(id) = self.cluster_id.get() {
            return *id;
        }
        let members = self.node.members();
        let mut h = Fnv64::default();
        for (id, addr) in &members {
            h.write(&id.to_be_bytes());
            h.write(addr.as_bytes());
        }
        // Kept once the membership is known (it is fixed from then on).
        if members.is_empty() {
            h.finish()
        } else {
            *self.cluster_id.get_or_init(|| h.finish())
        }
    }

    /// The header of a response served at `revision`.
    pub(super) fn header(&self, revision: u64) -> Option<ResponseHeader> {
        Some(ResponseHeader {
            cluster_id: self.cluster_id(),
            member_id: self.node.id(),
            revision: revision as i64,
            raft_term: self.node.current_term(),
        })
    }

    /// The NOSPACE alarm is raised while the database exceeds the quota
    /// (its size read at most [`DB_SIZE_REFRESH`] ago).
    pub(super) fn over_quota(&self) -> bool {
        let store = self.node.store();
        self.db_size.get(|| store.size_on_disk()) > self.options.quota_bytes
    }
}

/// Checks a command the etcd API is about to propose against etcd's limits
/// ([`Limits::ETCD`]), with etcd's errors. The leader checks every
/// forwarded command the same way (with the node's limits, which are at
/// least these), so this is the front end's answer, not the only check.
pub(super) fn validate(cmd: &Command) -> Result<(), Status> {
    cmd.validate(&Limits::ETCD).map_err(status::invalid)
}

/// FNV-1a, 64 bit: a stable hash across processes and versions (std's
/// hasher is neither), for the cluster id and HashKV. Hand-written: eight
/// lines, where a crate would add a dependency for one function.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    pub(super) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(super) fn finish(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn the_size_is_read_once_per_refresh_interval() {
        let reads = Cell::new(0u64);
        let read = || {
            reads.set(reads.get() + 1);
            reads.get() * 1000
        };
        let hourly = DbSizeGauge::new(Duration::from_secs(3600));
        assert_eq!(hourly.get(read), 1000);
        assert_eq!(hourly.get(read), 1000);
        assert_eq!(hourly.get(read), 1000);
        assert_eq!(reads.get(), 1, "one reading serves the whole interval");

        let always = DbSizeGauge::new(Duration::ZERO);
        assert_eq!(always.get(read), 2000);
        assert_eq!(always.get(read), 3000);
        assert_eq!(reads.get(), 3, "a stale reading is replaced");
    }

    #[test]
    fn a_caller_that_loses_the_first_reading_reads_for_itself() {
        let gauge = DbSizeGauge::new(Duration::from_secs(3600));
        // Another caller has claimed the first reading and not stored it.
        gauge.read_at.store(1, Ordering::Release);
        assert_eq!(gauge.get(|| 7), 7, "not the empty placeholder");
        gauge.bytes.store(5, Ordering::Release);
        assert_eq!(gauge.get(|| 7), 5, "the stored reading, once there");
    }
}
