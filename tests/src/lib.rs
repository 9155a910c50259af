//! The shared cluster harness of kubestore's integration tests.
//!
//! [`TestCluster::new`] starts N nodes in this process, on port 0 with
//! temporary directories; [`TestCluster::spawn`] starts N real `kubestore
//! serve` processes. Both offer `leader()`, `wait_for(..)`, kill, restart
//! and (in-process) isolation of a node, and a REST client per node.
//!
//! [`chaos`] is the fault-schedule checker built on it (`kubestore-chaos`);
//! [`clients`] starts the `kubestore cluster` launcher as a user does and
//! runs kubectl and helm against it.
//!
//! Waiting is event-driven where the harness can see events: convergence
//! and compaction of in-process nodes are awaited on their applied-state
//! channels ([`TestCluster::wait_converged`],
//! [`TestCluster::wait_compacted`]). Raft's own view (leaders, terms) and
//! every node of a process cluster are seen only through `/debug/cluster`,
//! which [`TestCluster::wait_for`] polls until its deadline.

pub mod chaos;
pub mod clients;
pub mod kube;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use kubestore_server::{RunningNode, ServeConfig};
use kubestore_storage::AppliedState;
use serde_json::Value;
use tokio::net::TcpListener;

pub use kube::KubeClient;

/// Installs a tracing subscriber once, honouring `KUBESTORE_LOG` (default:
/// warnings only, so failing tests show what went wrong).
pub fn init_tracing() {
    let filter = std::env::var("KUBESTORE_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

/// How a node of the cluster runs.
enum Slot {
    InProcess(Option<RunningNode>),
    Process(Option<tokio::process::Child>),
}

struct NodeSlot {
    id: u64,
    rest_addr: SocketAddr,
    grpc_addr: SocketAddr,
    peer_addr: SocketAddr,
    data_dir: PathBuf,
    slot: Slot,
}

/// A cluster of kubestore nodes for tests.
pub struct TestCluster {
    nodes: Vec<NodeSlot>,
    /// `--peers`: every node's peer address.
    peers: Vec<String>,
    options: ClusterOptions,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

/// Tuning of a test cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Build a Raft snapshot every this many entries (small values force
    /// followers to catch up by snapshot).
    pub snapshot_after_entries: u64,
    /// Log entries kept behind each snapshot (fewer than a follower lags
    /// by force a snapshot install).
    pub snapshot_catch_up_entries: u64,
    /// Seconds between watch bookmarks.
    pub watch_bookmark_interval_seconds: u64,
    /// History kept by the leader's periodic compaction, in seconds.
    pub history_retention_seconds: u64,
    /// Seconds between compaction checks.
    pub compaction_interval_seconds: u64,
    /// Events the watch cache keeps per type (small values send exact
    /// reads and old watches to storage history).
    pub watch_cache_events: usize,
    /// Seconds between progress notifications of idle etcd watches.
    pub etcd_progress_notify_seconds: u64,
    /// Nodes serve `/debug/faults` (`--fault-injection`).
    pub fault_injection: bool,
    /// Read-only requests in flight per node (0: no limit).
    pub max_requests_inflight: usize,
    /// Mutating requests in flight per node (0: no limit).
    pub max_mutating_requests_inflight: usize,
    /// Nodes keep transparent huge pages (`--transparent-huge-pages`).
    pub transparent_huge_pages: bool,
    /// The etcd API's NOSPACE quota in bytes (`--quota-backend-bytes`).
    pub quota_backend_bytes: u64,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            snapshot_after_entries: 10_000,
            snapshot_catch_up_entries: kubestore_server::config::DEFAULT_SNAPSHOT_CATCH_UP_ENTRIES,
            watch_bookmark_interval_seconds: 60,
            history_retention_seconds: 300,
            compaction_interval_seconds: 30,
            watch_cache_events: 4096,
            etcd_progress_notify_seconds: 600,
            fault_injection: false,
            max_requests_inflight: kubestore_server::config::DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight:
                kubestore_server::config::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            transparent_huge_pages: false,
            quota_backend_bytes: kubestore_server::config::DEFAULT_QUOTA_BACKEND_BYTES,
        }
    }
}

/// A node's three listeners: Kubernetes REST, etcd API, peer port.
struct NodeListeners {
    rest: TcpListener,
    grpc: TcpListener,
    peer: TcpListener,
}

impl NodeListeners {
    fn addrs(&self) -> anyhow::Result<NodeAddrs> {
        Ok(NodeAddrs {
            rest: self.rest.local_addr()?,
            grpc: self.grpc.local_addr()?,
            peer: self.peer.local_addr()?,
        })
    }
}

/// The addresses of [`NodeListeners`].
#[derive(Debug, Clone, Copy)]
struct NodeAddrs {
    rest: SocketAddr,
    grpc: SocketAddr,
    peer: SocketAddr,
}

/// The ports test nodes listen on: below Linux's default ephemeral range
/// (32768–60999), from which the kernel picks the local port of every
/// outgoing connection. A node that is stopped and started again binds
/// its old ports once more; had one come from the ephemeral range, a
/// connection made meanwhile (another node's, a client's, another test's)
/// could hold it as its local port, and the restart would fail with
/// `AddrInUse` however long it waited.
pub const LISTEN_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// The first of `n` consecutive ports of [`LISTEN_PORTS`] to try, taken
/// from a counter shared by the process's tests, so two calls never hand
/// out overlapping ports until the range wraps; it starts at a random
/// port, so test processes running side by side rarely try the same ones.
pub(crate) fn next_listen_ports(n: u16) -> u16 {
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicU32> = std::sync::OnceLock::new();
    let span = u32::from(LISTEN_PORTS.end - LISTEN_PORTS.start);
    let next = NEXT.get_or_init(|| std::sync::atomic::AtomicU32::new(rand::random_range(0..span)));
    let n = u32::from(n);
    assert!(n <= span, "{n} ports do not fit in {LISTEN_PORTS:?}");
    loop {
        let offset = next.fetch_add(n, std::sync::atomic::Ordering::Relaxed) % span;
        // A block that would run past the range's end is skipped.
        if offset + n <= span {
            return LISTEN_PORTS.start + offset as u16;
        }
    }
}

/// A listener on a free port of [`LISTEN_PORTS`].
async fn free_listener() -> anyhow::Result<TcpListener> {
    for _ in LISTEN_PORTS {
        match TcpListener::bind(("127.0.0.1", next_listen_ports(1))).await {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(anyhow!("no free port in {LISTEN_PORTS:?}"))
}

/// The `kubestore` binary: `KUBESTORE_BIN`, or the one in the target
/// directory of this executable (a binary such as `kubestore-chaos` sits
/// beside it in `target/<profile>/`, a test one level down in `deps/`).
pub fn kubestore_binary() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("KUBESTORE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("kubestore"))
        .collect();
    candidates
        .iter()
        .find(|bin| bin.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "kubestore not found at {candidates:?}: build it with `cargo build --workspace` first"
            )
        })
}

impl TestCluster {
    /// Starts `n` nodes in this process.
    pub async fn new(n: usize) -> anyhow::Result<Self> {
        Self::with_options(n, ClusterOptions::default()).await
    }

    pub async fn with_options(n: usize, options: ClusterOptions) -> anyhow::Result<Self> {
        let (mut cluster, listeners) = Self::empty(n, options).await?;
        for (i, listeners) in listeners.into_iter().enumerate() {
            let id = i as u64 + 1;
            let data_dir = cluster._dir.path().join(format!("node-{id}"));
            let addrs = listeners.addrs()?;
            let node = RunningNode::start(
                cluster.config(id, &data_dir, addrs),
                listeners.rest,
                listeners.grpc,
                listeners.peer,
            )
            .await?;
            cluster.nodes.push(NodeSlot {
                id,
                rest_addr: addrs.rest,
                grpc_addr: addrs.grpc,
                peer_addr: addrs.peer,
                data_dir,
                slot: Slot::InProcess(Some(node)),
            });
        }
        cluster.wait_for_leader(Duration::from_secs(30)).await?;
        cluster
            .wait_for_system_namespaces(Duration::from_secs(30))
            .await?;
        Ok(cluster)
    }

    /// Waits until the system namespaces are written (each node writes them
    /// in the background once there is a leader; a test's first request
    /// may be a create in `default`): read from a node's watch cache, then
    /// watched from the revision read until `default` is added. Neither
    /// takes a read barrier, so no test finds a read lease it did not
    /// take itself.
    async fn wait_for_system_namespaces(&self, timeout: Duration) -> anyhow::Result<()> {
        let Some(id) = self.ids().into_iter().find(|id| self.is_running(*id)) else {
            return Ok(());
        };
        let k = self.kube(id);
        let list = k
            .get("/api/v1/namespaces?fieldSelector=metadata.name%3Ddefault&resourceVersion=0")
            .await?;
        if !list.names().is_empty() {
            return Ok(());
        }
        let mut watch = k
            .watch(&format!(
                "/api/v1/namespaces?watch=1&fieldSelector=metadata.name%3Ddefault&resourceVersion={}",
                list.rv()
            ))
            .await?;
        match watch.next_event(timeout).await? {
            Some(event) if event["type"] == "ADDED" => Ok(()),
            other => bail!("waiting for the system namespaces: {other:?}"),
        }
    }

    /// A cluster with no node started yet, and `n` triples of bound (REST,
    /// etcd API, peer) listeners on free ports of [`LISTEN_PORTS`] whose
    /// peer addresses its peers list names.
    async fn empty(
        n: usize,
        options: ClusterOptions,
    ) -> anyhow::Result<(Self, Vec<NodeListeners>)> {
        init_tracing();
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(NodeListeners {
                rest: free_listener().await?,
                grpc: free_listener().await?,
                peer: free_listener().await?,
            });
        }
        let peers: Vec<String> = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| Ok(format!("{}={}", i + 1, l.peer.local_addr()?)))
            .collect::<anyhow::Result<_>>()?;
        let cluster = Self {
            nodes: Vec::new(),
            peers,
            options,
            _dir: tempfile::tempdir()?,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
        };
        Ok((cluster, listeners))
    }

    /// Starts `n` real `kubestore serve` processes.
    pub async fn spawn(n: usize, options: ClusterOptions) -> anyhow::Result<Self> {
        let (mut cluster, listeners) = Self::empty(n, options).await?;
        // The processes bind the reserved ports themselves once released here.
        let addrs = listeners
            .iter()
            .map(NodeListeners::addrs)
            .collect::<anyhow::Result<Vec<_>>>()?;
        drop(listeners);
        for (i, addrs) in addrs.into_iter().enumerate() {
            let id = i as u64 + 1;
            let data_dir = cluster._dir.path().join(format!("node-{id}"));
            cluster.nodes.push(NodeSlot {
                id,
                rest_addr: addrs.rest,
                grpc_addr: addrs.grpc,
                peer_addr: addrs.peer,
                data_dir,
                slot: Slot::Process(None),
            });
            cluster.start_process(id)?;
        }
        cluster.wait_for_leader(Duration::from_secs(60)).await?;
        Ok(cluster)
    }

    fn config(&self, id: u64, data_dir: &Path, addrs: NodeAddrs) -> ServeConfig {
        let mut c = ServeConfig::single_node(data_dir.to_path_buf());
        c.id = id;
        c.rest_addr = addrs.rest;
        c.grpc_addr = addrs.grpc;
        c.peer_addr = addrs.peer;
        c.peers = self.peers.clone();
        c.snapshot_after_entries = self.options.snapshot_after_entries;
        c.snapshot_catch_up_entries = self.options.snapshot_catch_up_entries;
        c.watch_bookmark_interval_seconds = self.options.watch_bookmark_interval_seconds;
        c.history_retention_seconds = self.options.history_retention_seconds;
        c.compaction_interval_seconds = self.options.compaction_interval_seconds;
        c.watch_cache_events = self.options.watch_cache_events;
        c.etcd_progress_notify_seconds = self.options.etcd_progress_notify_seconds;
        c.fault_injection = self.options.fault_injection;
        c.max_requests_inflight = self.options.max_requests_inflight;
        c.max_mutating_requests_inflight = self.options.max_mutating_requests_inflight;
        c.transparent_huge_pages = self.options.transparent_huge_pages;
        c.quota_backend_bytes = self.options.quota_backend_bytes;
        c
    }

    fn slot(&self, id: u64) -> anyhow::Result<&NodeSlot> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| anyhow!("no node {id}"))
    }

    fn slot_mut(&mut self, id: u64) -> anyhow::Result<&mut NodeSlot> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or_else(|| anyhow!("no node {id}"))
    }

    fn start_process(&mut self, id: u64) -> anyhow::Result<()> {
        let bin = kubestore_binary()?;
        let slot = self.slot(id)?;
        let addrs = NodeAddrs {
            rest: slot.rest_addr,
            grpc: slot.grpc_addr,
            peer: slot.peer_addr,
        };
        let config = self.config(id, &slot.data_dir, addrs);
        let slot = self.slot_mut(id)?;
        std::fs::create_dir_all(&slot.data_dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(slot.data_dir.with_extension("log"))?;
        let child = tokio::process::Command::new(bin)
            .args(config.to_args())
            .env(
                "KUBESTORE_LOG",
                std::env::var("KUBESTORE_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("spawning kubestore")?;
        slot.slot = Slot::Process(Some(child));
        Ok(())
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The REST base URL of a node.
    pub fn rest_url(&self, id: u64) -> String {
        self.slot(id)
            .map(|s| format!("http://{}", s.rest_addr))
            .unwrap_or_default()
    }

    /// The etcd API endpoint of a node (its client gRPC address).
    pub fn etcd_endpoint(&self, id: u64) -> String {
        self.slot(id)
            .map(|s| format!("http://{}", s.grpc_addr))
            .unwrap_or_default()
    }

    /// The peer endpoint of a node (Raft and cluster RPCs).
    pub fn peer_endpoint(&self, id: u64) -> String {
        self.slot(id)
            .map(|s| format!("http://{}", s.peer_addr))
            .unwrap_or_default()
    }

    /// An etcd client bound to one node.
    pub async fn etcd(&self, id: u64) -> anyhow::Result<etcd_client::Client> {
        Ok(etcd_client::Client::connect([self.etcd_endpoint(id)], None).await?)
    }

    /// A Kubernetes REST client bound to one node.
    pub fn kube(&self, id: u64) -> KubeClient {
        KubeClient::new(self.http.clone(), self.rest_url(id))
    }

    /// Where a spawned node writes its log.
    pub fn log_path(&self, id: u64) -> Option<PathBuf> {
        self.slot(id).ok().map(|s| s.data_dir.with_extension("log"))
    }

    /// `POST /debug/faults` on one node (started with
    /// `ClusterOptions::fault_injection`): the faults in `settings` (for
    /// example `{"apply_delay_ms": 1500}`) are in force once it returns.
    pub async fn inject_faults(&self, id: u64, settings: &Value) -> anyhow::Result<()> {
        let resp = self
            .http
            .post(format!("{}/debug/faults", self.rest_url(id)))
            .json(settings)
            .send()
            .await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "node {id} refused the faults {settings}: {}",
            resp.status()
        );
        Ok(())
    }

    /// `/debug/cluster` of one node, if it answers.
    pub async fn status(&self, id: u64) -> Option<Value> {
        let resp = self
            .http
            .get(format!("{}/debug/cluster", self.rest_url(id)))
            .send()
            .await
            .ok()?;
        resp.json().await.ok()
    }

    fn is_running(&self, id: u64) -> bool {
        match self.slot(id).map(|s| &s.slot) {
            Ok(Slot::InProcess(n)) => n.is_some(),
            Ok(Slot::Process(c)) => c.is_some(),
            Err(_) => false,
        }
    }

    /// Waits until `pred` holds for the statuses of every running node.
    pub async fn wait_for<F>(
        &self,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> anyhow::Result<Vec<Value>>
    where
        F: Fn(&[Value]) -> bool,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut statuses = Vec::new();
            for id in self.ids().into_iter().filter(|id| self.is_running(*id)) {
                match self.status(id).await {
                    Some(s) => statuses.push(s),
                    None => statuses.clear(),
                }
            }
            if !statuses.is_empty() && pred(&statuses) {
                return Ok(statuses);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; last statuses: {statuses:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every running node agrees on one leader, and returns it.
    pub async fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        let statuses = self
            .wait_for("a leader all running nodes agree on", timeout, |s| {
                let first = s[0]["leader_id"].as_u64();
                first.is_some()
                    && s.iter().all(|x| x["leader_id"].as_u64() == first)
                    && s.iter().any(|x| x["node_id"].as_u64() == first)
            })
            .await?;
        statuses[0]["leader_id"]
            .as_u64()
            .ok_or_else(|| anyhow!("no leader"))
    }

    /// The current leader.
    pub async fn leader(&self) -> anyhow::Result<u64> {
        self.wait_for_leader(Duration::from_secs(30)).await
    }

    /// Some node that is not the current leader.
    pub async fn follower(&self) -> anyhow::Result<u64> {
        let leader = self.leader().await?;
        self.ids()
            .into_iter()
            .find(|id| *id != leader)
            .ok_or_else(|| anyhow!("a cluster of one has no follower"))
    }

    /// Waits until every running node has applied the same log index and
    /// reports the same revision.
    pub async fn wait_converged(&self, timeout: Duration) -> anyhow::Result<u64> {
        let what = "all nodes at the same applied index and revision";
        let same = |s: &[AppliedState]| {
            s.iter()
                .all(|x| (x.log_index, x.revision) == (s[0].log_index, s[0].revision))
        };
        if let Some(states) = self.wait_applied(what, timeout, same).await {
            return Ok(states?[0].revision.0);
        }
        let statuses = self
            .wait_for(what, timeout, |s| {
                let a = (&s[0]["applied_index"], &s[0]["revision"]);
                s.iter().all(|x| (&x["applied_index"], &x["revision"]) == a)
                    && s.len() == self.ids().iter().filter(|id| self.is_running(**id)).count()
            })
            .await?;
        statuses[0]["revision"]
            .as_u64()
            .ok_or_else(|| anyhow!("no revision"))
    }

    /// Waits until every running node has compacted its history to at
    /// least `revision`.
    pub async fn wait_compacted(&self, revision: u64, timeout: Duration) -> anyhow::Result<()> {
        let what = format!("every node compacted to {revision}");
        let done = |s: &[AppliedState]| s.iter().all(|x| x.compacted.0 >= revision);
        if let Some(states) = self.wait_applied(&what, timeout, done).await {
            return states.map(drop);
        }
        self.wait_for(&what, timeout, |s| {
            s.iter()
                .all(|x| x["compacted_revision"].as_u64() >= Some(revision))
        })
        .await
        .map(drop)
    }

    /// Waits until `pred` holds for the applied states of every running
    /// node, woken by the nodes' applied-state channels rather than by a
    /// timer. Only for a cluster whose running nodes are all in this
    /// process (`None` otherwise: a separate process's state is seen only
    /// through `/debug/cluster`, see [`TestCluster::wait_for`]).
    async fn wait_applied<F>(
        &self,
        what: &str,
        timeout: Duration,
        pred: F,
    ) -> Option<anyhow::Result<Vec<AppliedState>>>
    where
        F: Fn(&[AppliedState]) -> bool,
    {
        let mut channels = Vec::new();
        for slot in self.nodes.iter().filter(|n| self.is_running(n.id)) {
            match &slot.slot {
                Slot::InProcess(Some(node)) => channels.push(node.raft.store().subscribe()),
                _ => return None,
            }
        }
        if channels.is_empty() {
            return None;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        Some(loop {
            // Marked seen before the check: a change after it wakes the wait.
            let states: Vec<AppliedState> = channels
                .iter_mut()
                .map(|c| *c.borrow_and_update())
                .collect();
            if pred(&states) {
                break Ok(states);
            }
            let changed =
                futures::future::select_all(channels.iter_mut().map(|c| Box::pin(c.changed())));
            match tokio::time::timeout_at(deadline, changed).await {
                Ok((Ok(()), _, _)) => {}
                Ok((Err(_), _, _)) => break Err(anyhow!("a node stopped while waiting for {what}")),
                Err(_) => {
                    break Err(anyhow!(
                        "timed out after {timeout:?} waiting for {what}; last applied states: {states:?}"
                    ))
                }
            }
        })
    }

    /// Stops a node abruptly: an in-process node loses its servers and Raft
    /// at once; a process gets SIGKILL.
    pub async fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        let slot = self.slot_mut(id)?;
        match &mut slot.slot {
            Slot::InProcess(node) => {
                if let Some(n) = node.take() {
                    n.shutdown().await;
                }
            }
            Slot::Process(child) => {
                if let Some(mut c) = child.take() {
                    c.kill().await?;
                }
            }
        }
        Ok(())
    }

    /// Starts a stopped in-process node again on the same addresses and
    /// data, its store obeying `faults` from its first moment (before any
    /// peer can reach it).
    pub async fn restart_with_faults(
        &mut self,
        id: u64,
        faults: kubestore_storage::DiskFaults,
    ) -> anyhow::Result<()> {
        if !matches!(self.slot(id)?.slot, Slot::InProcess(None)) {
            bail!("node {id} is not a stopped in-process node");
        }
        self.start_in_process(id, faults).await
    }

    /// Starts a stopped node again on the same addresses and data.
    pub async fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        if matches!(self.slot(id)?.slot, Slot::InProcess(_)) {
            self.start_in_process(id, kubestore_storage::DiskFaults::default())
                .await
        } else {
            self.start_process(id)
        }
    }

    /// Starts in-process node `id` on its addresses and data, its store
    /// obeying `faults`.
    async fn start_in_process(
        &mut self,
        id: u64,
        faults: kubestore_storage::DiskFaults,
    ) -> anyhow::Result<()> {
        let s = self.slot(id)?;
        let addrs = NodeAddrs {
            rest: s.rest_addr,
            grpc: s.grpc_addr,
            peer: s.peer_addr,
        };
        let mut config = self.config(id, &s.data_dir.clone(), addrs);
        config.disk_faults = faults;
        let rest = bind_again(addrs.rest).await?;
        let grpc = bind_again(addrs.grpc).await?;
        let peer = bind_again(addrs.peer).await?;
        let node = RunningNode::start(config, rest, grpc, peer).await?;
        self.slot_mut(id)?.slot = Slot::InProcess(Some(node));
        Ok(())
    }

    /// Sends `signal` to a spawned node's process (SIGSTOP pauses it,
    /// SIGCONT resumes it).
    pub fn signal(&self, id: u64, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
        let pid = i32::try_from(self.pid(id)?).context("pid out of range")?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)?;
        Ok(())
    }

    /// The process id of a spawned node.
    pub fn pid(&self, id: u64) -> anyhow::Result<u32> {
        let Slot::Process(Some(child)) = &self.slot(id)?.slot else {
            bail!("node {id} is not a running process");
        };
        child.id().ok_or_else(|| anyhow!("node {id} has exited"))
    }

    /// If the node's process has exited (crashed: the harness's own kills
    /// leave no process behind), its exit status; the process is reaped,
    /// so the node no longer counts as running and can be restarted.
    pub fn exit_status(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let slot = self.slot_mut(id).ok()?;
        let Slot::Process(child @ Some(_)) = &mut slot.slot else {
            return None;
        };
        let status = child.as_mut()?.try_wait().ok().flatten()?;
        *child = None;
        Some(status)
    }

    /// Whether the node runs (in this process or as a child process).
    pub fn running(&self, id: u64) -> bool {
        self.is_running(id)
    }

    /// Copies every spawned node's log into `dir` as `node-<id>.log`.
    pub fn save_logs(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        for id in self.ids() {
            if let Some(log) = self.log_path(id).filter(|p| p.exists()) {
                std::fs::copy(&log, dir.join(format!("node-{id}.log")))?;
            }
        }
        Ok(())
    }

    /// Cuts an in-process node off from its peers (or reconnects it).
    pub fn isolate(&self, id: u64, isolated: bool) -> anyhow::Result<()> {
        match &self.slot(id)?.slot {
            Slot::InProcess(Some(n)) => {
                n.raft.faults().set_isolated(isolated);
                Ok(())
            }
            _ => bail!("node {id} is not a running in-process node"),
        }
    }

    /// The in-process node, for direct access in tests.
    pub fn node(&self, id: u64) -> Option<&RunningNode> {
        match &self.slot(id).ok()?.slot {
            Slot::InProcess(n) => n.as_ref(),
            Slot::Process(_) => None,
        }
    }

    /// Shuts every node down (in-process nodes release their databases).
    pub async fn shutdown(mut self) {
        for id in self.ids() {
            let _ = self.kill(id).await;
        }
    }
}

/// Rebinds an address a stopped node just released (the OS may take a
/// moment to let it go).
async fn bind_again(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let mut last = None;
    for _ in 0..100 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(anyhow!("cannot bind {addr} again: {last:?}"))
}
