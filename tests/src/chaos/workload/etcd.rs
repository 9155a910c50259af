//! The etcd-API clients: linearizable and serializable gets, gets at an
//! exact revision, puts and compare-and-set transactions on the registers,
//! each answer mapped to an outcome.
//!
//! The mix: 27% linearizable gets, 8% serializable gets, 5% gets at an
//! exact revision, 15% puts, 45% compare-and-sets (deletes among them, of
//! a key known to exist).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, Txn, TxnOp, TxnOpResponse};
use rand::Rng;
use tokio::sync::watch;

use super::super::history::{Api, OpKind, OpResult, Outcome};
use super::{back_off, etcd_key, header_revision, learn, Client, Done, Endpoint, Recorder};

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
                let outcome = if matches!(kind, OpKind::Read { .. } | OpKind::ReadAt { .. }) {
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
    /// A get of the key as it was at exactly `revision`.
    GetAt {
        revision: u64,
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

impl EtcdPlan {
    fn kind(&self) -> OpKind {
        match self {
            EtcdPlan::Get { linearizable } => OpKind::Read {
                linearizable: *linearizable,
            },
            EtcdPlan::GetAt { revision } => OpKind::ReadAt {
                revision: *revision,
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
            EtcdPlan::GetAt { revision } => etcd_get_at(client, key, revision).await,
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

async fn etcd_get(mut client: etcd_client::Client, key: &str, linearizable: bool) -> Done {
    let options = (!linearizable).then(|| GetOptions::new().with_serializable());
    get_done(client.get(key, options).await)
}

/// A (linearizable) get of the key as it was at exactly `revision`. The
/// answer's header revision need not be `revision` (etcd's is the store's
/// current revision), only not below it. A compacted or future revision is
/// a refusal: `Failed`.
async fn etcd_get_at(mut client: etcd_client::Client, key: &str, revision: u64) -> Done {
    let Ok(revision) = i64::try_from(revision) else {
        return Done::not_ok(Outcome::Failed, format!("revision {revision} out of range"));
    };
    let options = GetOptions::new().with_revision(revision);
    get_done(client.get(key, Some(options)).await)
}

/// A get's answer: the key's value and mod revision, and the header
/// revision; an error is a failed read.
fn get_done(answer: Result<GetResponse, etcd_client::Error>) -> Done {
    match answer {
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

impl Client {
    fn plan_etcd(&mut self, key: &str) -> EtcdPlan {
        let roll = self.rng.random_range(0..100);
        match roll {
            0..=26 => EtcdPlan::Get { linearizable: true },
            27..=34 => EtcdPlan::Get {
                linearizable: false,
            },
            // Until the client has seen a revision, a linearizable get.
            35..=39 => match self.seen.pick(&mut self.rng) {
                Some(revision) => EtcdPlan::GetAt { revision },
                None => EtcdPlan::Get { linearizable: true },
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
