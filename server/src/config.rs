//! Configuration of one node. Every flag has an environment variable of
//! the same name (`--rest-addr` = `KUBESTORE_REST_ADDR`), and the defaults
//! run a single node on 127.0.0.1 with its data in `./kubestore-data`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use kubestore_storage::{DiskFaults, NodeId};

/// Default body limit: kube's own limit for a request body is 3 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Milliseconds between the leader's heartbeats by default (etcd's
/// `--heartbeat-interval`). openraft 0.9 also uses it as the timeout of
/// every AppendEntries call, which waits for the follower's fsync: at 100 ms
/// a follower whose disk took 100 ms more per fsync (the checker's slow
/// disk) could never acknowledge an append and fell behind for good.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 200;
/// The minimum election timeout in milliseconds by default (etcd's
/// `--election-timeout`; etcd uses 1000). openraft 0.9 waits a randomised
/// timeout between this and twice this, after a leader lease of twice this,
/// so a dead leader is replaced within about 0.9–1.2 s, which keeps failover
/// within 3 s.
pub const DEFAULT_ELECTION_TIMEOUT_MS: u64 = 300;
/// The leader's read lease by default (see `--read-lease-ms`): half the
/// default minimum election timeout.
pub const DEFAULT_READ_LEASE_MS: u64 = DEFAULT_ELECTION_TIMEOUT_MS / 2;
/// Log entries kept behind each snapshot by default: etcd's
/// `SnapshotCatchUpEntries`.
pub const DEFAULT_SNAPSHOT_CATCH_UP_ENTRIES: u64 = 5_000;
/// kube-apiserver's default `--max-requests-inflight`.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// kube-apiserver's default `--max-mutating-requests-inflight`.
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;
/// etcd's default `--quota-backend-bytes`: 2 GiB.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeConfig {
    /// This node's id in the Raft group (1, 2, 3, ...).
    #[arg(long, env = "KUBESTORE_ID", default_value_t = 1)]
    pub id: NodeId,
    /// Where this node keeps its database and snapshots.
    #[arg(long, env = "KUBESTORE_DATA_DIR", default_value = "kubestore-data")]
    pub data_dir: PathBuf,
    /// Address of the Kubernetes REST API.
    #[arg(long, env = "KUBESTORE_REST_ADDR", default_value = "127.0.0.1:8080")]
    pub rest_addr: SocketAddr,
    /// Address of the etcd v3 API (gRPC), for clients only: it serves no
    /// node-to-node RPC.
    #[arg(long, env = "KUBESTORE_GRPC_ADDR", default_value = "127.0.0.1:2379")]
    pub grpc_addr: SocketAddr,
    /// The etcd API address clients reach this node at, if not
    /// `--grpc-addr` (what etcd's MemberList reports as its client URL).
    #[arg(long, env = "KUBESTORE_ADVERTISE_CLIENT_ADDR")]
    pub advertise_client_addr: Option<String>,
    /// Address of the peer port: Raft replication, write forwarding and
    /// read indexes between nodes, and nothing else (etcd's peer port).
    #[arg(long, env = "KUBESTORE_PEER_ADDR", default_value = "127.0.0.1:2380")]
    pub peer_addr: SocketAddr,
    /// The peer address other nodes dial to reach this node, if not
    /// `--peer-addr` (when it listens on 0.0.0.0, say).
    #[arg(long, env = "KUBESTORE_ADVERTISE_PEER_ADDR")]
    pub advertise_peer_addr: Option<String>,
    /// Every member of the cluster as `id=host:port` (peer addresses),
    /// comma-separated, this node included. Empty: a single-node cluster.
    #[arg(long, env = "KUBESTORE_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, env = "KUBESTORE_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Seconds between watch bookmarks (for watches that allow them).
    #[arg(
        long,
        env = "KUBESTORE_WATCH_BOOKMARK_INTERVAL_SECONDS",
        default_value_t = 60
    )]
    pub watch_bookmark_interval_seconds: u64,
    /// Keep at least this many seconds of history (older revisions: 410).
    #[arg(
        long,
        env = "KUBESTORE_HISTORY_RETENTION_SECONDS",
        default_value_t = 300
    )]
    pub history_retention_seconds: u64,
    /// Keep at most this many revisions of history.
    #[arg(
        long,
        env = "KUBESTORE_HISTORY_MAX_REVISIONS",
        default_value_t = 1_000_000
    )]
    pub history_max_revisions: u64,
    /// Seconds between the leader's compaction checks.
    #[arg(
        long,
        env = "KUBESTORE_COMPACTION_INTERVAL_SECONDS",
        default_value_t = 30
    )]
    pub compaction_interval_seconds: u64,
    /// Build a Raft snapshot (and purge the log behind it) every this many entries.
    #[arg(
        long,
        env = "KUBESTORE_SNAPSHOT_AFTER_ENTRIES",
        default_value_t = 10_000
    )]
    pub snapshot_after_entries: u64,
    /// Log entries kept behind each snapshot (etcd's
    /// `--snapshot-catchup-entries`, also 5,000): a follower that lags by
    /// fewer catches up by replication from the log, more cheaply than by
    /// receiving and installing a whole snapshot.
    #[arg(
        long,
        env = "KUBESTORE_SNAPSHOT_CATCH_UP_ENTRIES",
        default_value_t = DEFAULT_SNAPSHOT_CATCH_UP_ENTRIES
    )]
    pub snapshot_catch_up_entries: u64,
    /// Events the watch cache keeps per resource type (with a snapshot per
    /// revision); older exact reads and watches come from storage history.
    #[arg(long, env = "KUBESTORE_WATCH_CACHE_EVENTS", default_value_t = 4096)]
    pub watch_cache_events: usize,
    /// Seconds the watch cache keeps an event at most.
    #[arg(long, env = "KUBESTORE_WATCH_CACHE_SECONDS", default_value_t = 150)]
    pub watch_cache_seconds: u64,
    /// Seconds between progress notifications of idle etcd watches that
    /// asked for them (etcd's default: 10 minutes).
    #[arg(
        long,
        env = "KUBESTORE_ETCD_PROGRESS_NOTIFY_SECONDS",
        default_value_t = 600
    )]
    pub etcd_progress_notify_seconds: u64,
    /// Database size above which puts and lease grants through the etcd
    /// API are refused and the NOSPACE alarm is raised (etcd's
    /// `--quota-backend-bytes`); reads and deletes still pass.
    #[arg(long, env = "KUBESTORE_QUOTA_BACKEND_BYTES", default_value_t = DEFAULT_QUOTA_BACKEND_BYTES)]
    pub quota_backend_bytes: u64,
    /// Milliseconds between the leader's heartbeats (as etcd's
    /// `--heartbeat-interval`), also openraft's timeout of one
    /// AppendEntries call (which includes the follower's fsync). Must be
    /// below the election timeout.
    #[arg(long, env = "KUBESTORE_HEARTBEAT_INTERVAL", default_value_t = DEFAULT_HEARTBEAT_INTERVAL_MS)]
    pub heartbeat_interval: u64,
    /// Minimum election timeout in milliseconds (as etcd's
    /// `--election-timeout`); each election waits a random timeout between
    /// this and twice this. Lower fails over faster; too low for the
    /// machine's load causes needless elections.
    #[arg(long, env = "KUBESTORE_ELECTION_TIMEOUT", default_value_t = DEFAULT_ELECTION_TIMEOUT_MS)]
    pub election_timeout: u64,
    /// Milliseconds after a read-index round began during which the leader
    /// answers linearizable reads without another heartbeat round (0: a
    /// round for every read, as etcd does). At most half the minimum
    /// election timeout; safe while the nodes' clocks run at rates within
    /// 4x of each other.
    #[arg(long, env = "KUBESTORE_READ_LEASE_MS", default_value_t = DEFAULT_READ_LEASE_MS)]
    pub read_lease_ms: u64,

    /// Read-only requests (REST and etcd API, watches exempt) a node works
    /// on at once; more are refused with 429 / ResourceExhausted (0: no limit).
    #[arg(long, env = "KUBESTORE_MAX_REQUESTS_INFLIGHT", default_value_t = DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,

    /// Mutating requests a node works on at once; more are refused with
    /// 429 / ResourceExhausted (0: no limit).
    #[arg(
        long,
        env = "KUBESTORE_MAX_MUTATING_REQUESTS_INFLIGHT",
        default_value_t = DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT
    )]
    pub max_mutating_requests_inflight: usize,

    /// Serve `POST /debug/faults` (cut the node off from its peers, slow
    /// its disk or its apply). For the fault-schedule checker and tests;
    /// never on a production node.
    #[arg(long, env = "KUBESTORE_FAULT_INJECTION")]
    pub fault_injection: bool,

    /// Let the kernel back this process's heap with transparent huge pages.
    /// Off by default: the allocator asks for them on every region it maps,
    /// so with the kernel's `madvise` mode a node's resident memory grows
    /// in 2 MiB steps and holds 12-15% more than without them (an idle watch
    /// measured 16-22 KiB with them, 5.2-5.7 KiB without; see BENCHMARKS.md,
    /// "Watch fan-out").
    #[arg(long, env = "KUBESTORE_TRANSPARENT_HUGE_PAGES")]
    pub transparent_huge_pages: bool,

    /// The disk faults the node's store obeys from its first moment: for
    /// nodes a test starts in its own process (not a flag; a `serve`
    /// process starts without and takes them from `/debug/faults`).
    #[arg(skip)]
    pub disk_faults: DiskFaults,
}

impl ServeConfig {
    /// The defaults of `kubestore serve` with no flags.
    pub fn single_node(data_dir: PathBuf) -> Self {
        Self {
            id: 1,
            data_dir,
            rest_addr: ([127, 0, 0, 1], 8080).into(),
            grpc_addr: ([127, 0, 0, 1], 2379).into(),
            advertise_client_addr: None,
            peer_addr: ([127, 0, 0, 1], 2380).into(),
            advertise_peer_addr: None,
            peers: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            watch_bookmark_interval_seconds: 60,
            history_retention_seconds: 300,
            history_max_revisions: 1_000_000,
            compaction_interval_seconds: 30,
            snapshot_after_entries: 10_000,
            snapshot_catch_up_entries: DEFAULT_SNAPSHOT_CATCH_UP_ENTRIES,
            watch_cache_events: 4096,
            watch_cache_seconds: 150,
            etcd_progress_notify_seconds: 600,
            quota_backend_bytes: DEFAULT_QUOTA_BACKEND_BYTES,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL_MS,
            election_timeout: DEFAULT_ELECTION_TIMEOUT_MS,
            read_lease_ms: DEFAULT_READ_LEASE_MS,
            max_requests_inflight: DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            fault_injection: false,
            transparent_huge_pages: false,
            disk_faults: DiskFaults::default(),
        }
    }

    /// The command line of `kubestore serve` with exactly this
    /// configuration, every flag spelled out (so a changed default cannot
    /// make a launched node differ from what was configured). The one
    /// builder of `serve` command lines: the launcher, the load generator
    /// and the test harness start nodes with it.
    pub fn to_args(&self) -> Vec<OsString> {
        // Destructured whole: a new field does not compile until it is here.
        let Self {
            id,
            data_dir,
            rest_addr,
            grpc_addr,
            advertise_client_addr,
            peer_addr,
            advertise_peer_addr,
            peers,
            max_body_bytes,
            watch_bookmark_interval_seconds,
            history_retention_seconds,
            history_max_revisions,
            compaction_interval_seconds,
            snapshot_after_entries,
            snapshot_catch_up_entries,
            watch_cache_events,
            watch_cache_seconds,
            etcd_progress_notify_seconds,
            quota_backend_bytes,
            heartbeat_interval,
            election_timeout,
            read_lease_ms,
            max_requests_inflight,
            max_mutating_requests_inflight,
            fault_injection,
            transparent_huge_pages,
            // In-process only: a process cannot be handed a live handle.
            disk_faults: _,
        } = self;
        let mut args = vec![OsString::from("serve")];
        let mut flag = |name: &str, value: OsString| {
            args.push(format!("--{name}").into());
            args.push(value);
        };
        flag("id", id.to_string().into());
        flag("data-dir", data_dir.clone().into_os_string());
        flag("rest-addr", rest_addr.to_string().into());
        flag("grpc-addr", grpc_addr.to_string().into());
        if let Some(a) = advertise_client_addr {
            flag("advertise-client-addr", a.into());
        }
        flag("peer-addr", peer_addr.to_string().into());
        if let Some(a) = advertise_peer_addr {
            flag("advertise-peer-addr", a.into());
        }
        if !peers.is_empty() {
            flag("peers", peers.join(",").into());
        }
        for (name, value) in [
            ("max-body-bytes", *max_body_bytes as u64),
            (
                "watch-bookmark-interval-seconds",
                *watch_bookmark_interval_seconds,
            ),
            ("history-retention-seconds", *history_retention_seconds),
            ("history-max-revisions", *history_max_revisions),
            ("compaction-interval-seconds", *compaction_interval_seconds),
            ("snapshot-after-entries", *snapshot_after_entries),
            ("snapshot-catch-up-entries", *snapshot_catch_up_entries),
            ("watch-cache-events", *watch_cache_events as u64),
            ("watch-cache-seconds", *watch_cache_seconds),
            (
                "etcd-progress-notify-seconds",
                *etcd_progress_notify_seconds,
            ),
            ("quota-backend-bytes", *quota_backend_bytes),
            ("heartbeat-interval", *heartbeat_interval),
            ("election-timeout", *election_timeout),
            ("read-lease-ms", *read_lease_ms),
            ("max-requests-inflight", *max_requests_inflight as u64),
            (
                "max-mutating-requests-inflight",
                *max_mutating_requests_inflight as u64,
            ),
        ] {
            flag(name, value.to_string().into());
        }
        if *fault_injection {
            args.push("--fault-injection".into());
        }
        if *transparent_huge_pages {
            args.push("--transparent-huge-pages".into());
        }
        args
    }

    /// The members map (id → peer address), from `--peers` or this node
    /// alone at `advertised`, its advertised peer address.
    pub fn members(&self, advertised: &str) -> Result<BTreeMap<NodeId, String>, String> {
        if self.peers.is_empty() {
            return Ok(BTreeMap::from([(self.id, advertised.to_string())]));
        }
        let mut members = BTreeMap::new();
        for p in &self.peers {
            let (id, addr) = p
                .split_once('=')
                .ok_or_else(|| format!("peer {p:?} is not of the form id=host:port"))?;
            let id: NodeId = id
                .trim()
                .parse()
                .map_err(|_| format!("peer id {id:?} is not a number"))?;
            members.insert(id, addr.trim().to_string());
        }
        if !members.contains_key(&self.id) {
            return Err(format!("--peers does not list this node's id {}", self.id));
        }
        Ok(members)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Cmd {
        Serve(ServeConfig),
    }

    #[test]
    fn a_config_survives_its_own_command_line() {
        let mut c = ServeConfig::single_node("data dir/é".into());
        c.id = 2;
        c.rest_addr = ([127, 0, 0, 2], 18080).into();
        c.advertise_client_addr = Some("10.0.0.2:2379".into());
        c.advertise_peer_addr = Some("10.0.0.2:2380".into());
        c.peers = vec!["1=h:1".into(), "2=h:2".into()];
        c.snapshot_after_entries = 77;
        c.snapshot_catch_up_entries = 33;
        c.election_timeout = 450;
        c.max_mutating_requests_inflight = 0;
        c.fault_injection = true;
        c.transparent_huge_pages = true;
        let argv = std::iter::once(OsString::from("kubestore")).chain(c.to_args());
        let Cmd::Serve(parsed) = Cli::try_parse_from(argv).expect("parses").command;
        assert_eq!(format!("{parsed:?}"), format!("{c:?}"));
        // And the defaults, with nothing optional set.
        let d = ServeConfig::single_node("d".into());
        let argv = std::iter::once(OsString::from("kubestore")).chain(d.to_args());
        let Cmd::Serve(parsed) = Cli::try_parse_from(argv).expect("parses").command;
        assert_eq!(format!("{parsed:?}"), format!("{d:?}"));
    }

    #[test]
    fn peers_parse_and_must_include_self() {
        let mut c = ServeConfig::single_node("d".into());
        assert_eq!(
            c.members("a:1").expect("ok"),
            BTreeMap::from([(1, "a:1".to_string())])
        );
        c.peers = vec!["1=h:1".into(), "2=h:2".into()];
        assert_eq!(c.members("ignored").expect("ok").len(), 2);
        c.id = 3;
        assert!(c.members("x").is_err());
        c.peers = vec!["x=h:1".into()];
        assert!(c.members("x").is_err());
    }
}
