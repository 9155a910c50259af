//! The checker's clients: compare-and-set registers over both APIs, and
//! watchers that follow every change across reconnects.
//!
//! Each client loops until told to stop on its own node (clients are
//! spread over the nodes, so every node serves every kind of request): it
//! picks a key of its API and an operation, and records the invocation, the completion and what came
//! back in the [`Recorder`]. Every value a client writes is unique in the
//! run (`c<client>-<n>`), so a value read names the write that produced it.
//!
//! Half the REST registers are config maps, the other half custom
//! resources (`Register`, of the checker's own CustomResourceDefinition,
//! [`REGISTER_DEFINITION`]), so the custom-type write path (the node's
//! served types, the schema's pruning and validation) runs under the same
//! faults; a custom register's strategic merge patch is a merge patch
//! (kube's `415` for a custom type), with the same precondition.
//!
//! Both APIs' clients also read at an exact past revision (5% of their
//! operations: a REST list with `resourceVersionMatch=Exact`, an etcd
//! Range at `revision`), served from the watch cache's ring or the MVCC
//! history. The revision is one the client saw acknowledged
//! (`SeenRevisions`): mostly its latest, otherwise one from up to
//! `SEEN_WINDOW` (40 s) ago, at times older than the history the cluster
//! keeps (30 s), so refusals as compacted (`Failed`) come up too. What
//! such a read saw is the past: it does not update what the client knows
//! of the register.
//!
//! REST clients also send `dryRun=All` creates, updates and deletes (5%
//! of their operations). A dry run is no operation of the register model
//! and is not recorded; it is checked by what it must not do: its value is
//! unique, so had one been stored, whatever observed it would carry a
//! value no recorded operation wrote (the `phantom-value` check), and a
//! dry-run delete that took effect would contradict the reads after it.
//!
//! How answers map to outcomes, conservatively (an unknown outcome is never
//! wrong, only less informative):
//! - a definite answer is `Ok` (a compare that failed is `Ok` with
//!   `succeeded: false`: a REST `409` or `404`, an etcd Txn that took its
//!   failure branch);
//! - a refusal that cannot have taken effect (`429`, `400`, `422`, an etcd
//!   `InvalidArgument`) is `Failed`;
//! - anything else on a write (a timeout, a reset connection, a `5xx`) is
//!   `Unknown`: it may or may not have been applied. On a read it is
//!   `Failed`, as a read changes nothing.
//!
//! Layout: this file holds what every client shares (the recorder, the
//! client's loop state and outcome, what a client learns of a register,
//! the keys); `rest.rs` and `etcd.rs` are the two APIs' clients,
//! `watchers.rs` the watchers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::history::{Api, Op, OpKind, OpResult, Outcome};

mod etcd;
mod rest;
mod watchers;

pub use etcd::etcd_client;
pub use rest::rest_client;
pub use watchers::{etcd_watcher, rest_watcher, WatchProgress};

/// The namespace the REST clients write in.
pub const NAMESPACE: &str = "default";
/// History keys of the REST registers stored as config maps
/// (`rest/<name>`).
pub const REST_PREFIX: &str = "rest/";
/// History keys of the REST registers stored as custom resources
/// (`custom/<name>`).
pub const CUSTOM_PREFIX: &str = "custom/";

/// The CustomResourceDefinition of the custom registers: namespaced
/// `registers.chaos.kubestore.io`, whose schema keeps `data` (a map of
/// strings) and prunes anything else.
pub fn register_definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "registers.chaos.kubestore.io"},
        "spec": {
            "group": "chaos.kubestore.io",
            "scope": "Namespaced",
            "names": {"plural": "registers", "kind": "Register"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "data": {"type": "object", "additionalProperties": {"type": "string"}}}}}}]
        }
    })
}

/// What a REST register is stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestKind {
    ConfigMap,
    /// A custom resource of [`register_definition`].
    Register,
}

impl RestKind {
    /// Both kinds.
    pub const ALL: [RestKind; 2] = [RestKind::ConfigMap, RestKind::Register];

    /// The kind of REST register `i`: even ones are config maps, odd ones
    /// custom resources.
    pub fn of(i: usize) -> Self {
        if i.is_multiple_of(2) {
            RestKind::ConfigMap
        } else {
            RestKind::Register
        }
    }

    /// The prefix of its history keys.
    pub fn prefix(self) -> &'static str {
        match self {
            RestKind::ConfigMap => REST_PREFIX,
            RestKind::Register => CUSTOM_PREFIX,
        }
    }

    /// Its collection URL in the namespace, on `node`.
    pub fn collection(self, node: &Endpoint) -> String {
        match self {
            RestKind::ConfigMap => {
                format!("{}/api/v1/namespaces/{NAMESPACE}/configmaps", node.rest_url)
            }
            RestKind::Register => format!(
                "{}/apis/chaos.kubestore.io/v1/namespaces/{NAMESPACE}/registers",
                node.rest_url
            ),
        }
    }

    /// The URL of the object `name`, on `node`.
    pub fn object(self, node: &Endpoint, name: &str) -> String {
        format!("{}/{name}", self.collection(node))
    }

    /// An object of this kind with `metadata` and `data.v = value`.
    fn body(self, metadata: Value, value: &str) -> Value {
        let (api_version, kind) = match self {
            RestKind::ConfigMap => ("v1", "ConfigMap"),
            RestKind::Register => ("chaos.kubestore.io/v1", "Register"),
        };
        json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "data": {"v": value}})
    }
}
/// The etcd keys of the etcd registers.
pub const ETCD_PREFIX: &str = "/chaos/";

/// Where a node is reached.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub id: u64,
    pub rest_url: String,
    pub etcd_url: String,
}

/// The shared history being recorded, and the run's clock.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    next_id: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    pub fn new(start: Instant) -> Self {
        Self {
            start,
            next_id: AtomicU64::new(1),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Time since the run started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn record(&self, mut op: Op) {
        op.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// Everything recorded so far, in completion order.
    pub fn take(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The history key of REST register `i` and its object's name (its kind
/// is [`RestKind::of`]).
pub fn rest_key(i: usize) -> (String, String) {
    let name = format!("chaos-{i}");
    (format!("{}{name}", RestKind::of(i).prefix()), name)
}

/// The etcd key of etcd register `i` (also its history key).
pub fn etcd_key(i: usize) -> String {
    format!("{ETCD_PREFIX}k{i}")
}

/// What a client last knew of a key: its value and the revision that wrote
/// it (the guard of its next compare-and-set).
type Known = HashMap<String, Option<(String, u64)>>;

/// How far back a client keeps the revisions it saw, to read at exactly.
const SEEN_WINDOW: Duration = Duration::from_secs(40);
/// A client keeps one revision it saw per this much time.
const SEEN_EVERY: Duration = Duration::from_millis(250);

/// The revisions a client saw the store acknowledge (answered at, created,
/// or as an object's mod revision), for reads at an exact revision: the
/// latest, and one sample every [`SEEN_EVERY`] over the last
/// [`SEEN_WINDOW`].
#[derive(Debug, Default)]
struct SeenRevisions {
    latest: u64,
    /// `(when seen, the latest revision then)`, oldest first.
    samples: VecDeque<(Duration, u64)>,
}

impl SeenRevisions {
    /// Notes the revisions of an operation's answer, seen at `at`.
    fn note(&mut self, at: Duration, done: &Done) {
        if done.outcome != Outcome::Ok {
            return;
        }
        let Some(revision) = done.result.revision.max(done.result.mod_revision) else {
            return;
        };
        self.latest = self.latest.max(revision);
        if self
            .samples
            .back()
            .is_none_or(|&(last, _)| at >= last + SEEN_EVERY)
        {
            self.samples.push_back((at, self.latest));
        }
        while self
            .samples
            .front()
            .is_some_and(|&(when, _)| at.saturating_sub(when) > SEEN_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// A revision to read at: the latest seen (60%), else one sampled in
    /// the window; `None` before any was seen.
    fn pick(&self, rng: &mut StdRng) -> Option<u64> {
        if self.latest == 0 {
            return None;
        }
        if self.samples.is_empty() || rng.random_range(0..10) < 6 {
            return Some(self.latest);
        }
        let sample = rng.random_range(0..self.samples.len());
        self.samples.get(sample).map(|&(_, revision)| revision)
    }
}

/// One client's loop state.
struct Client {
    id: u32,
    rng: StdRng,
    written: u64,
    known: Known,
    /// Revisions it saw, to read at exactly.
    seen: SeenRevisions,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    keys: usize,
}

impl Client {
    fn new(
        id: u32,
        seed: u64,
        recorder: Arc<Recorder>,
        endpoints: Vec<Endpoint>,
        keys: usize,
    ) -> Self {
        Self {
            id,
            rng: StdRng::seed_from_u64(seed ^ (u64::from(id) << 32)),
            written: 0,
            known: HashMap::new(),
            seen: SeenRevisions::default(),
            recorder,
            endpoints,
            keys,
        }
    }

    fn next_value(&mut self) -> String {
        self.written += 1;
        format!("c{}-{}", self.id, self.written)
    }

    /// The client's own node: clients are spread over the nodes and stay
    /// on theirs, so a faulty node stalls only its own clients and each
    /// node's availability is measured by the clients it serves.
    fn pick_node(&mut self) -> Endpoint {
        let home = usize::try_from(self.id).unwrap_or(0) % self.endpoints.len();
        self.endpoints[home].clone()
    }

    /// Records one finished operation, and the revisions its answer
    /// showed.
    fn record(
        &mut self,
        node: u64,
        api: Api,
        key: &str,
        kind: OpKind,
        invoked: Duration,
        done: Done,
    ) {
        let completed = self.recorder.now();
        self.seen.note(completed, &done);
        self.recorder.record(Op {
            id: 0,
            client: self.id,
            node,
            api,
            key: key.to_string(),
            kind,
            invoked,
            completed,
            outcome: done.outcome,
            result: done.result,
            error: done.error,
        });
    }
}

/// How one operation ended.
struct Done {
    outcome: Outcome,
    result: OpResult,
    error: Option<String>,
}

impl Done {
    fn ok(result: OpResult) -> Self {
        Self {
            outcome: Outcome::Ok,
            result,
            error: None,
        }
    }

    fn not_ok(outcome: Outcome, error: String) -> Self {
        Self {
            outcome,
            result: OpResult::default(),
            error: Some(error),
        }
    }
}

/// What a client waits after an operation that did not succeed before it
/// tries again, as real clients do; without it a client of a dead node
/// spins, flooding the history with refused connections.
async fn back_off() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Updates what a client knows of `key` from an operation's answer. A
/// read at an exact revision teaches nothing: it saw the past, and a guard
/// from it would only fail.
fn learn(known: &mut Known, key: &str, kind: &OpKind, done: &Done) {
    if done.outcome != Outcome::Ok {
        // A write of unknown fate: the guard may be stale either way; read first.
        if !matches!(kind, OpKind::Read { .. } | OpKind::ReadAt { .. }) {
            known.remove(key);
        }
        return;
    }
    let r = &done.result;
    match kind {
        OpKind::ReadAt { .. } => {}
        OpKind::Read { .. } => {
            let state = match (&r.value, r.mod_revision) {
                (Some(v), Some(m)) => Some((v.clone(), m)),
                _ => None,
            };
            known.insert(key.to_string(), state);
        }
        OpKind::Put { value } => match r.revision {
            Some(rev) => {
                known.insert(key.to_string(), Some((value.clone(), rev)));
            }
            None => {
                known.remove(key);
            }
        },
        OpKind::Cas { value, .. } => {
            if !r.succeeded {
                known.remove(key);
                return;
            }
            match (value, r.revision) {
                (None, _) => {
                    known.insert(key.to_string(), None);
                }
                (Some(v), Some(rev)) => {
                    known.insert(key.to_string(), Some((v.clone(), rev)));
                }
                (Some(_), None) => {
                    known.remove(key);
                }
            }
        }
    }
}

/// `data.v` and `metadata.resourceVersion` of a register's object.
fn register_state(obj: &Value) -> (Option<String>, Option<u64>) {
    let value = obj
        .pointer("/data/v")
        .and_then(Value::as_str)
        .map(str::to_string);
    let rv = obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok());
    (value, rv)
}

/// How a request failed without an answer.
#[derive(Debug)]
struct SendError {
    /// The status, if the answer's head arrived.
    status: Option<StatusCode>,
    /// The connection was never made: the request did not leave.
    not_sent: bool,
    message: String,
}

/// Sends a request and reads its whole answer.
async fn send(req: reqwest::RequestBuilder) -> Result<(StatusCode, Value), SendError> {
    let resp = req.send().await.map_err(|e| SendError {
        status: None,
        not_sent: e.is_connect(),
        message: format!("{e}"),
    })?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| SendError {
        status: Some(status),
        not_sent: false,
        message: format!("{e}"),
    })?;
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok((status, body))
}

fn status_error(status: StatusCode, body: &Value) -> String {
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("{status}: {message}")
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Option<u64> {
    header.and_then(|h| u64::try_from(h.revision()).ok())
}
