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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::history::{Api, Op, OpKind, OpResult, Outcome, WatchEvent, WatchLog};

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

/// One client's loop state.
struct Client {
    id: u32,
    rng: StdRng,
    written: u64,
    known: Known,
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

    /// Records one finished operation.
    fn record(&self, node: u64, api: Api, key: &str, kind: OpKind, invoked: Duration, done: Done) {
        self.recorder.record(Op {
            id: 0,
            client: self.id,
            node,
            api,
            key: key.to_string(),
            kind,
            invoked,
            completed: self.recorder.now(),
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

/// Runs one REST client until `stop` turns true.
pub async fn rest_client(
    id: u32,
    seed: u64,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    keys: usize,
    op_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let http = match reqwest::Client::builder()
        .timeout(op_timeout)
        .connect_timeout(Duration::from_secs(1))
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot build an HTTP client");
            return;
        }
    };
    let mut c = Client::new(id, seed, recorder, endpoints, keys);
    while !*stop.borrow_and_update() {
        let node = c.pick_node();
        let i = c.rng.random_range(0..c.keys);
        let (key, name) = rest_key(i);
        let rk = RestKind::of(i);
        let roll = c.rng.random_range(0..100);
        let invoked = c.recorder.now();
        let (kind, done) = match roll {
            0..=24 => rest_get(&http, &node, rk, &name).await,
            25..=44 => rest_list(&http, &node, rk, &name).await,
            45..=49 => {
                // A dry-run write: no operation of the model, so it is not
                // recorded. Its value is unique like any other: had it been
                // stored, a read, a watch event or the final state would
                // carry a value no operation wrote (`phantom-value`), and a
                // dry-run delete that took effect would show as a read of
                // an absent key the model says is present.
                let known = c.known.get(&key).cloned().flatten();
                let value = c.next_value();
                let delete = c.rng.random_range(0..2) == 0;
                if !rest_dry_run(&http, &node, rk, &name, known, &value, delete).await {
                    back_off().await;
                }
                continue;
            }
            _ => {
                let known = c.known.get(&key).cloned().flatten();
                let value = c.next_value();
                match known {
                    None if roll >= 85 => rest_apply(&http, &node, rk, &name, None, &value).await,
                    None => rest_create(&http, &node, rk, &name, &value).await,
                    Some((old, rv)) if roll < 62 => {
                        rest_update(&http, &node, rk, &name, &old, rv, &value).await
                    }
                    Some((old, _)) if roll < 70 => {
                        rest_json_patch(&http, &node, rk, &name, &old, &value).await
                    }
                    Some((old, rv)) if roll < 76 => {
                        rest_merge_patch(&http, &node, rk, &name, &old, rv, &value).await
                    }
                    Some((old, rv)) if roll < 90 => {
                        rest_apply(&http, &node, rk, &name, Some((&old, rv)), &value).await
                    }
                    Some((old, rv)) => rest_delete(&http, &node, rk, &name, &old, rv).await,
                }
            }
        };
        let failed = done.outcome != Outcome::Ok;
        learn(&mut c.known, &key, &kind, &done);
        c.record(node.id, Api::Rest, &key, kind, invoked, done);
        if failed {
            back_off().await;
        }
    }
}

/// What a client waits after an operation that did not succeed before it
/// tries again, as real clients do; without it a client of a dead node
/// spins, flooding the history with refused connections.
async fn back_off() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Updates what a client knows of `key` from an operation's answer.
fn learn(known: &mut Known, key: &str, kind: &OpKind, done: &Done) {
    if done.outcome != Outcome::Ok {
        // A write of unknown fate: the guard may be stale either way; read first.
        if !matches!(kind, OpKind::Read { .. }) {
            known.remove(key);
        }
        return;
    }
    let r = &done.result;
    match kind {
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

/// A write's outcome when the server did not answer with a definite
/// status: refused, or never sent (`Failed`), or else unknown.
fn write_failure(status: Option<StatusCode>, not_sent: bool, error: String) -> Done {
    let refused = matches!(
        status,
        Some(
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::BAD_REQUEST
                | StatusCode::UNPROCESSABLE_ENTITY
        )
    );
    if refused || not_sent {
        Done::not_ok(Outcome::Failed, error)
    } else {
        Done::not_ok(Outcome::Unknown, error)
    }
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

async fn rest_get(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
) -> (OpKind, Done) {
    let kind = OpKind::Read { linearizable: true };
    let done = match send(http.get(rk.object(node, name))).await {
        Ok((StatusCode::OK, body)) => {
            let (value, mod_revision) = register_state(&body);
            Done::ok(OpResult {
                value,
                mod_revision,
                ..OpResult::default()
            })
        }
        Ok((StatusCode::NOT_FOUND, _)) => Done::ok(OpResult::default()),
        Ok((status, body)) => Done::not_ok(Outcome::Failed, status_error(status, &body)),
        Err(e) => Done::not_ok(Outcome::Failed, e.message),
    };
    (kind, done)
}

async fn rest_list(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
) -> (OpKind, Done) {
    let kind = OpKind::Read { linearizable: true };
    let url = format!(
        "{}?fieldSelector=metadata.name%3D{name}",
        rk.collection(node)
    );
    let done = match send(http.get(url)).await {
        Ok((StatusCode::OK, body)) => {
            let revision = body
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok());
            let (value, mod_revision) = body
                .pointer("/items/0")
                .map(register_state)
                .unwrap_or((None, None));
            Done::ok(OpResult {
                value,
                mod_revision,
                revision,
                ..OpResult::default()
            })
        }
        Ok((status, body)) => Done::not_ok(Outcome::Failed, status_error(status, &body)),
        Err(e) => Done::not_ok(Outcome::Failed, e.message),
    };
    (kind, done)
}

/// A write's answer: 2xx took effect, 409/404 is a failed compare.
fn rest_write_done(answer: Result<(StatusCode, Value), SendError>) -> Done {
    match answer {
        Ok((status, body)) if status.is_success() => {
            let (_, revision) = register_state(&body);
            Done::ok(OpResult {
                succeeded: true,
                revision,
                ..OpResult::default()
            })
        }
        Ok((StatusCode::CONFLICT | StatusCode::NOT_FOUND, _)) => Done::ok(OpResult::default()),
        Ok((status, body)) => write_failure(Some(status), false, status_error(status, &body)),
        Err(e) => write_failure(e.status, e.not_sent, e.message),
    }
}

async fn rest_create(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    value: &str,
) -> (OpKind, Done) {
    let kind = OpKind::Cas {
        expect: None,
        value: Some(value.to_string()),
    };
    let url = rk.collection(node);
    let body = rk.body(json!({"name": name}), value);
    (
        kind,
        rest_write_done(send(http.post(url).json(&body)).await),
    )
}

async fn rest_update(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    old: &str,
    rv: u64,
    value: &str,
) -> (OpKind, Done) {
    let kind = OpKind::Cas {
        expect: Some(old.to_string()),
        value: Some(value.to_string()),
    };
    let body = rk.body(
        json!({"name": name, "resourceVersion": rv.to_string()}),
        value,
    );
    (
        kind,
        rest_write_done(send(http.put(rk.object(node, name)).json(&body)).await),
    )
}

/// A JSON patch (RFC 6902) whose `test` compares `data.v` with the value
/// the client last saw, then replaces it: a compare-and-set on the value
/// (values are unique, so on the version too), decided by the server on
/// the object as it is when the patch applies. A failed test is `422`, an
/// absent object `404`: both a compare-and-set that did not apply.
async fn rest_json_patch(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    old: &str,
    value: &str,
) -> (OpKind, Done) {
    let kind = OpKind::Cas {
        expect: Some(old.to_string()),
        value: Some(value.to_string()),
    };
    let ops = json!([
        {"op": "test", "path": "/data/v", "value": old},
        {"op": "replace", "path": "/data/v", "value": value},
    ]);
    let req = http
        .patch(rk.object(node, name))
        .header("content-type", "application/json-patch+json")
        .body(ops.to_string());
    let done = match send(req).await {
        Ok((StatusCode::UNPROCESSABLE_ENTITY, _)) => Done::ok(OpResult::default()),
        answer => rest_write_done(answer),
    };
    (kind, done)
}

/// A strategic merge patch (a JSON merge patch for a custom register,
/// which takes no strategic one) of `data.v` carrying the revision the
/// client last saw as `metadata.resourceVersion`: a precondition, so a
/// compare-and-set like an update (`409` on another revision).
async fn rest_merge_patch(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    old: &str,
    rv: u64,
    value: &str,
) -> (OpKind, Done) {
    let kind = OpKind::Cas {
        expect: Some(old.to_string()),
        value: Some(value.to_string()),
    };
    let body = json!({"metadata": {"resourceVersion": rv.to_string()}, "data": {"v": value}});
    let media = match rk {
        RestKind::ConfigMap => "application/strategic-merge-patch+json",
        RestKind::Register => "application/merge-patch+json",
    };
    let req = http
        .patch(rk.object(node, name))
        .header("content-type", media)
        .body(body.to_string());
    (kind, rest_write_done(send(req).await))
}

/// A server-side apply (`application/apply-patch+yaml`, one manager for
/// every client, forced, so appliers never conflict on `data.v`). With an
/// expected state, its `metadata.resourceVersion` is a precondition: a
/// compare-and-set like an update (`409` on another revision, `404` when
/// absent). Without, a blind write that creates or overwrites: a register
/// put, which a `409` (kube's bounded create/update race) did not apply.
async fn rest_apply(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    expect: Option<(&str, u64)>,
    value: &str,
) -> (OpKind, Done) {
    let mut meta = json!({"name": name});
    let kind = match expect {
        Some((old, rv)) => {
            meta["resourceVersion"] = json!(rv.to_string());
            OpKind::Cas {
                expect: Some(old.to_string()),
                value: Some(value.to_string()),
            }
        }
        None => OpKind::Put {
            value: value.to_string(),
        },
    };
    let body = rk.body(meta, value);
    let req = http
        .patch(format!(
            "{}?fieldManager=chaos&force=true",
            rk.object(node, name)
        ))
        .header("content-type", "application/apply-patch+yaml")
        .body(body.to_string());
    let answer = send(req).await;
    let done = match (&kind, answer) {
        (OpKind::Put { .. }, Ok((status, body))) if status.is_client_error() => {
            Done::not_ok(Outcome::Failed, status_error(status, &body))
        }
        (_, answer) => rest_write_done(answer),
    };
    (kind, done)
}

async fn rest_delete(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    old: &str,
    rv: u64,
) -> (OpKind, Done) {
    let kind = OpKind::Cas {
        expect: Some(old.to_string()),
        value: None,
    };
    let body = json!({"preconditions": {"resourceVersion": rv.to_string()}});
    let mut done = rest_write_done(send(http.delete(rk.object(node, name)).json(&body)).await);
    // A delete answers the object as it was: its revision is not the deletion's.
    done.result.revision = None;
    (kind, done)
}

/// One `dryRun=All` write of the register `name` (a create when the
/// client knows it absent, else an update or a delete guarded by what it
/// knows); whether the server answered it (any status).
async fn rest_dry_run(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    known: Option<(String, u64)>,
    value: &str,
    delete: bool,
) -> bool {
    let dry = |url: String| format!("{url}?dryRun=All");
    let req = match known {
        None => http
            .post(dry(rk.collection(node)))
            .json(&rk.body(json!({"name": name}), value)),
        Some((_, rv)) if !delete => http.put(dry(rk.object(node, name))).json(&rk.body(
            json!({"name": name, "resourceVersion": rv.to_string()}),
            value,
        )),
        Some((_, rv)) => http
            .delete(dry(rk.object(node, name)))
            .json(&json!({"preconditions": {"resourceVersion": rv.to_string()}})),
    };
    send(req).await.is_ok()
}

/// Runs one etcd-API client until `stop` turns true.
pub async fn etcd_client(
    id: u32,
    seed: u64,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    keys: usize,
    op_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut clients = HashMap::new();
    for e in &endpoints {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(op_timeout);
        // A balanced channel: it connects (and reconnects) on its own, so a
        // node that is down now is reached once it is back.
        let client = etcd_client::Client::connect([e.etcd_url.clone()], Some(options)).await;
        match client {
            Ok(client) => {
                clients.insert(e.id, client);
            }
            Err(err) => tracing::error!(error = %err, node = e.id, "etcd client"),
        }
    }
    let mut c = Client::new(id, seed, recorder, endpoints, keys);
    while !*stop.borrow_and_update() {
        let node = c.pick_node();
        let Some(client) = clients.get(&node.id).cloned() else {
            break;
        };
        let key = etcd_key(c.rng.random_range(0..c.keys));
        let plan = c.plan_etcd(&key);
        let invoked = c.recorder.now();
        let kind = plan.kind();
        let done = match tokio::time::timeout(op_timeout, plan.run(client, &key)).await {
            Ok(done) => done,
            Err(_) => {
                let outcome = if matches!(kind, OpKind::Read { .. }) {
                    Outcome::Failed
                } else {
                    Outcome::Unknown
                };
                Done::not_ok(outcome, "no answer within the client's timeout".into())
            }
        };
        let failed = done.outcome != Outcome::Ok;
        learn(&mut c.known, &key, &kind, &done);
        c.record(node.id, Api::Etcd, &key, kind, invoked, done);
        if failed {
            back_off().await;
        }
    }
}

/// One etcd-API operation, decided before it is sent.
enum EtcdPlan {
    Get {
        linearizable: bool,
    },
    Put {
        value: String,
    },
    /// Compare-and-set against what the client knew (`None`: absent).
    Cas {
        known: Option<(String, u64)>,
        value: Option<String>,
    },
}

impl Client {
    fn plan_etcd(&mut self, key: &str) -> EtcdPlan {
        let roll = self.rng.random_range(0..100);
        match roll {
            0..=29 => EtcdPlan::Get { linearizable: true },
            30..=39 => EtcdPlan::Get {
                linearizable: false,
            },
            40..=54 => EtcdPlan::Put {
                value: self.next_value(),
            },
            _ => {
                let known = self.known.get(key).cloned().flatten();
                // Deletes only of a key known to exist.
                let value = if roll >= 92 && known.is_some() {
                    None
                } else {
                    Some(self.next_value())
                };
                EtcdPlan::Cas { known, value }
            }
        }
    }
}

impl EtcdPlan {
    fn kind(&self) -> OpKind {
        match self {
            EtcdPlan::Get { linearizable } => OpKind::Read {
                linearizable: *linearizable,
            },
            EtcdPlan::Put { value } => OpKind::Put {
                value: value.clone(),
            },
            EtcdPlan::Cas { known, value } => OpKind::Cas {
                expect: known.as_ref().map(|(v, _)| v.clone()),
                value: value.clone(),
            },
        }
    }

    async fn run(self, client: etcd_client::Client, key: &str) -> Done {
        match self {
            EtcdPlan::Get { linearizable } => etcd_get(client, key, linearizable).await,
            EtcdPlan::Put { value } => etcd_put(client, key, value).await,
            EtcdPlan::Cas { known, value } => etcd_cas(client, key, known, value).await,
        }
    }
}

fn etcd_failure(is_write: bool, e: &etcd_client::Error) -> Done {
    // Refused by the server, or never sent (no connection could be made).
    let definite = matches!(
        e,
        etcd_client::Error::GRpcStatus(s) if matches!(
            s.code(),
            tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition | tonic::Code::ResourceExhausted
        ) || (s.code() == tonic::Code::Unavailable && s.message().contains("tcp connect error"))
    );
    let outcome = if !is_write || definite {
        Outcome::Failed
    } else {
        Outcome::Unknown
    };
    Done::not_ok(outcome, e.to_string())
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Option<u64> {
    header.and_then(|h| u64::try_from(h.revision()).ok())
}

async fn etcd_get(mut client: etcd_client::Client, key: &str, linearizable: bool) -> Done {
    let options = (!linearizable).then(|| GetOptions::new().with_serializable());
    match client.get(key, options).await {
        Ok(resp) => {
            let kv = resp.kvs().first();
            Done::ok(OpResult {
                value: kv.map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                mod_revision: kv.and_then(|kv| u64::try_from(kv.mod_revision()).ok()),
                revision: header_revision(resp.header()),
                succeeded: false,
            })
        }
        Err(e) => etcd_failure(false, &e),
    }
}

async fn etcd_put(mut client: etcd_client::Client, key: &str, value: String) -> Done {
    match client.put(key, value, None).await {
        Ok(resp) => Done::ok(OpResult {
            succeeded: true,
            revision: header_revision(resp.header()),
            ..OpResult::default()
        }),
        Err(e) => etcd_failure(true, &e),
    }
}

/// Compare-and-set on the key's mod revision (or its absence), as a
/// kube-apiserver guards an update: `Txn[MOD(key) == rev → Put | Delete,
/// else Range]`.
async fn etcd_cas(
    mut client: etcd_client::Client,
    key: &str,
    known: Option<(String, u64)>,
    value: Option<String>,
) -> Done {
    let guard = match &known {
        Some((_, rev)) => Compare::mod_revision(
            key,
            CompareOp::Equal,
            i64::try_from(*rev).unwrap_or(i64::MAX),
        ),
        None => Compare::create_revision(key, CompareOp::Equal, 0),
    };
    let then = match value {
        Some(v) => TxnOp::put(key, v, None),
        None => TxnOp::delete(key, None),
    };
    let txn = Txn::new()
        .when([guard])
        .and_then([then])
        .or_else([TxnOp::get(key, None)]);
    match client.txn(txn).await {
        Ok(resp) => {
            let revision = header_revision(resp.header());
            if resp.succeeded() {
                return Done::ok(OpResult {
                    succeeded: true,
                    revision,
                    ..OpResult::default()
                });
            }
            // The failure branch read the key: what the compare saw.
            let seen = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g),
                _ => None,
            });
            let kv = seen.as_ref().and_then(|g| g.kvs().first());
            Done::ok(OpResult {
                succeeded: false,
                revision,
                value: kv.map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                mod_revision: kv.and_then(|kv| u64::try_from(kv.mod_revision()).ok()),
            })
        }
        Err(e) => etcd_failure(true, &e),
    }
}

/// How long a watch may stay silent (no event, bookmark or progress
/// notification, which come every second) before it is taken for dead and
/// resumed on another node.
const WATCH_SILENCE: Duration = Duration::from_secs(5);

/// A watcher's progress, shared with the runner so it can wait until the
/// watcher has caught up with the final revision.
#[derive(Debug)]
pub struct WatchProgress {
    logs: Mutex<Vec<WatchLog>>,
    covered: watch::Sender<u64>,
}

impl Default for WatchProgress {
    fn default() -> Self {
        Self {
            logs: Mutex::new(Vec::new()),
            covered: watch::Sender::new(0),
        }
    }
}

impl WatchProgress {
    /// Waits until the current log has received everything up to
    /// `revision`; `false` if `timeout` passed first.
    pub async fn caught_up(&self, revision: u64, timeout: Duration) -> bool {
        let mut covered = self.covered.subscribe();
        let reached = tokio::time::timeout(timeout, covered.wait_for(|c| *c >= revision)).await;
        matches!(reached, Ok(Ok(_)))
    }

    fn set_covered(&self, revision: u64) {
        self.covered.send_replace(revision);
    }

    pub fn take(&self) -> Vec<WatchLog> {
        std::mem::take(&mut *self.logs.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, log: WatchLog) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(log);
    }
}

/// One watcher's current log and where it resumes.
struct Follow {
    log: WatchLog,
}

impl Follow {
    fn event(
        &mut self,
        node: u64,
        key: String,
        revision: u64,
        value: Option<String>,
        received: Duration,
    ) {
        self.log.events.push(WatchEvent {
            watcher: self.log.watcher,
            node,
            key,
            revision,
            value,
            received,
        });
        self.log.covered_until = self.log.covered_until.max(revision);
    }

    fn resume_from(&self) -> u64 {
        self.log.covered_until
    }
}

/// Follows every REST register of kind `rk` with `watch=1` across nodes
/// until `stop`: each reconnect resumes after the last revision received,
/// on a node picked at random. A `410` starts a new log from a fresh list.
pub async fn rest_watcher(
    watcher: u32,
    rk: RestKind,
    seed: u64,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    progress: Arc<WatchProgress>,
    mut stop: watch::Receiver<bool>,
) {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_default();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5741_5443 ^ u64::from(watcher));
    let mut follow: Option<Follow> = None;
    while !*stop.borrow_and_update() {
        let node = endpoints[rng.random_range(0..endpoints.len())].clone();
        let Some(f) = follow.as_mut() else {
            // Start (again): the list's revision is where the log begins.
            let url = rk.collection(&node);
            if let Ok((StatusCode::OK, body)) = send(http.get(url).timeout(WATCH_SILENCE)).await {
                if let Some(rv) = body
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                {
                    follow = Some(new_follow(watcher, rk.prefix(), rv));
                    progress.set_covered(rv);
                }
            }
            continue;
        };
        let url = format!(
            "{}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds=60",
            rk.collection(&node),
            f.resume_from()
        );
        let Ok(resp) = http.get(url).send().await else {
            f.log.reconnects += 1;
            continue;
        };
        if resp.status() != StatusCode::OK {
            f.log.reconnects += 1;
            continue;
        }
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        let expired = loop {
            let next = tokio::select! {
                next = tokio::time::timeout(WATCH_SILENCE, body.next()) => next,
                _ = stop.changed() => break false,
            };
            let Ok(Some(Ok(chunk))) = next else {
                break false;
            };
            buf.extend_from_slice(&chunk);
            let mut gone = false;
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                gone |= rest_watch_event(f, rk, node.id, &event, recorder.now());
            }
            progress.set_covered(f.log.covered_until);
            if gone {
                break true;
            }
        };
        end_of_stream(&mut follow, &progress, expired);
    }
    if let Some(f) = follow {
        progress.push(f.log);
    }
}

/// After a watch stream ended: an expired log (`410`, compacted) is
/// finished and the watcher starts a new one from a fresh read; otherwise
/// the same log resumes on a reconnect.
fn end_of_stream(follow: &mut Option<Follow>, progress: &WatchProgress, expired: bool) {
    if expired {
        if let Some(f) = follow.take() {
            progress.push(f.log);
        }
    } else if let Some(f) = follow.as_mut() {
        f.log.reconnects += 1;
    }
}

fn new_follow(watcher: u32, prefix: &str, start: u64) -> Follow {
    Follow {
        log: WatchLog {
            watcher,
            prefix: prefix.to_string(),
            start_revision: start,
            covered_until: start,
            events: Vec::new(),
            reconnects: 0,
        },
    }
}

/// Takes one watch event line; `true` when the watch expired (`410`).
fn rest_watch_event(
    f: &mut Follow,
    rk: RestKind,
    node: u64,
    event: &Value,
    received: Duration,
) -> bool {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let obj = event.get("object").cloned().unwrap_or(Value::Null);
    let (value, rv) = register_state(&obj);
    match kind {
        "ADDED" | "MODIFIED" | "DELETED" => {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(rv) = rv {
                let value = if kind == "DELETED" { None } else { value };
                f.event(node, format!("{}{name}", rk.prefix()), rv, value, received);
            }
            false
        }
        "BOOKMARK" => {
            if let Some(rv) = rv {
                f.log.covered_until = f.log.covered_until.max(rv);
            }
            false
        }
        _ => obj.get("code").and_then(Value::as_u64) == Some(410),
    }
}

/// Follows the etcd registers with a prefix watch across nodes until
/// `stop`, resuming after the last revision received (progress
/// notifications count as received).
pub async fn etcd_watcher(
    watcher: u32,
    seed: u64,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    progress: Arc<WatchProgress>,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x4554_4344);
    let mut follow: Option<Follow> = None;
    while !*stop.borrow_and_update() {
        let node = endpoints[rng.random_range(0..endpoints.len())].clone();
        let options =
            etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(1));
        let connect = etcd_client::Client::connect([node.etcd_url.clone()], Some(options));
        let Ok(Ok(mut client)) = tokio::time::timeout(WATCH_SILENCE, connect).await else {
            continue;
        };
        let Some(f) = follow.as_mut() else {
            let get = client.get(
                ETCD_PREFIX,
                Some(GetOptions::new().with_prefix().with_count_only()),
            );
            if let Ok(Ok(resp)) = tokio::time::timeout(WATCH_SILENCE, get).await {
                if let Some(rev) = header_revision(resp.header()) {
                    follow = Some(new_follow(watcher, ETCD_PREFIX, rev));
                    progress.set_covered(rev);
                }
            }
            continue;
        };
        let start = i64::try_from(f.resume_from() + 1).unwrap_or(i64::MAX);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_progress_notify();
        let Ok(Ok(mut stream)) =
            tokio::time::timeout(WATCH_SILENCE, client.watch(ETCD_PREFIX, Some(options))).await
        else {
            f.log.reconnects += 1;
            continue;
        };
        let expired = loop {
            let next = tokio::select! {
                next = tokio::time::timeout(WATCH_SILENCE, stream.message()) => next,
                _ = stop.changed() => break false,
            };
            let Ok(Ok(Some(resp))) = next else {
                break false;
            };
            if resp.compact_revision() > 0 || (resp.canceled() && !resp.created()) {
                break resp.compact_revision() > 0;
            }
            let now = recorder.now();
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let Ok(revision) = u64::try_from(kv.mod_revision()) else {
                    continue;
                };
                let value = match e.event_type() {
                    EventType::Put => Some(String::from_utf8_lossy(kv.value()).into_owned()),
                    EventType::Delete => None,
                };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                f.event(node.id, key, revision, value, now);
            }
            if resp.events().is_empty() {
                if let Some(rev) = header_revision(resp.header()) {
                    f.log.covered_until = f.log.covered_until.max(rev);
                }
            }
            progress.set_covered(f.log.covered_until);
        };
        end_of_stream(&mut follow, &progress, expired);
    }
    if let Some(f) = follow {
        progress.push(f.log);
    }
}
