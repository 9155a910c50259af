//! The REST clients: gets, quorum lists and lists at an exact revision
//! (`resourceVersionMatch=Exact`), creates, updates with
//! `resourceVersion` preconditions, JSON, merge and strategic patches,
//! server-side applies, deletes and dry runs of the registers, each
//! answer mapped to an outcome.
//!
//! The mix: 22% gets, 18% quorum lists, 5% exact lists, 5% dry runs, 50%
//! writes (creates and blind applies of a register the client knows
//! absent, else updates, patches, guarded applies and deletes).

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::super::history::{Api, OpKind, OpResult, Outcome};
use super::{
    back_off, learn, register_state, rest_key, send, status_error, Client, Done, Endpoint,
    Recorder, RestKind, SendError,
};

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
            0..=21 => rest_get(&http, &node, rk, &name).await,
            22..=39 => rest_list(&http, &node, rk, &name).await,
            // Until the client has seen a revision, an exact list is a
            // quorum list.
            40..=44 => match c.seen.pick(&mut c.rng) {
                Some(revision) => rest_list_at(&http, &node, rk, &name, revision).await,
                None => rest_list(&http, &node, rk, &name).await,
            },
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
    (kind, list_done(send(http.get(url)).await))
}

/// A list of the object `name` at exactly `revision`, as the watch cache's
/// ring (or, older, the MVCC history) has it. `410 Gone` (compacted) and a
/// `504` (the node has not reached `revision`) are refusals like any other:
/// `Failed`.
async fn rest_list_at(
    http: &reqwest::Client,
    node: &Endpoint,
    rk: RestKind,
    name: &str,
    revision: u64,
) -> (OpKind, Done) {
    let kind = OpKind::ReadAt { revision };
    let url = format!(
        "{}?resourceVersion={revision}&resourceVersionMatch=Exact&fieldSelector=metadata.name%3D{name}",
        rk.collection(node)
    );
    (kind, list_done(send(http.get(url)).await))
}

/// A list's answer: the register (the first item, if any) and the list's
/// revision; any other status is a failed read.
fn list_done(answer: Result<(StatusCode, Value), SendError>) -> Done {
    match answer {
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
    }
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

/// A compare-and-set from the value the client last saw to `value`.
fn cas(old: &str, value: &str) -> OpKind {
    OpKind::Cas {
        expect: Some(old.to_string()),
        value: Some(value.to_string()),
    }
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
    let kind = cas(old, value);
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
    let kind = cas(old, value);
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
    let kind = cas(old, value);
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
            cas(old, value)
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
