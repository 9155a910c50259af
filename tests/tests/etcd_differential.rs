//! Differential test: one seeded random sequence of KV, Txn and Compact
//! operations against Debian's etcd 3.4 server and a 3-node kubestore must
//! give the same responses: revisions, key-values, prev_kvs, succeeded
//! flags and errors.

use std::process::Stdio;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use kubestore_tests::TestCluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: [&str; 6] = ["d/a", "d/b", "d/c", "d/ca", "d/d", "d/e"];
const STEPS: usize = 400;

/// A response reduced to what both stores must agree on.
fn kvs(kvs: &[etcd_client::KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| {
            format!(
                "{}={} c{} m{} v{}",
                String::from_utf8_lossy(kv.key()),
                String::from_utf8_lossy(kv.value()),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version()
            )
        })
        .collect()
}

fn error_text(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    }
}

fn random_key(rng: &mut StdRng) -> &'static str {
    KEYS[rng.random_range(0..KEYS.len())]
}

/// One random operation, applied to a client; its outcome as text.
async fn step(client: &mut Client, op: &Op) -> String {
    let header = |h: Option<&etcd_client::ResponseHeader>| h.map_or(0, |h| h.revision());
    match op {
        Op::Put { key, value, prev } => {
            let opts = prev.then(|| PutOptions::new().with_prev_key());
            match client.put(*key, value.as_str(), opts).await {
                Ok(r) => format!(
                    "put rev={} prev={:?}",
                    header(r.header()),
                    r.prev_key().map(|kv| kvs(std::slice::from_ref(kv)))
                ),
                Err(e) => format!("put error {}", error_text(&e)),
            }
        }
        Op::Delete { key, prefix } => {
            let mut opts = DeleteOptions::new().with_prev_key();
            if *prefix {
                opts = opts.with_prefix();
            }
            match client.delete(*key, Some(opts)).await {
                Ok(r) => format!(
                    "delete rev={} deleted={} prev={:?}",
                    header(r.header()),
                    r.deleted(),
                    kvs(r.prev_kvs())
                ),
                Err(e) => format!("delete error {}", error_text(&e)),
            }
        }
        Op::Get {
            key,
            prefix,
            revision,
            limit,
        } => {
            let mut opts = GetOptions::new()
                .with_revision(*revision)
                .with_limit(*limit);
            if *prefix {
                opts = opts.with_prefix();
            }
            match client.get(*key, Some(opts)).await {
                Ok(r) => format!(
                    "get rev={} count={} more={} kvs={:?}",
                    header(r.header()),
                    r.count(),
                    r.more(),
                    kvs(r.kvs())
                ),
                Err(e) => format!("get error {}", error_text(&e)),
            }
        }
        Op::Txn {
            key,
            target,
            cmp,
            value,
            then_key,
        } => {
            let compare = match target {
                0 => Compare::mod_revision(*key, *cmp, *value),
                1 => Compare::version(*key, *cmp, *value),
                2 => Compare::create_revision(*key, *cmp, *value),
                _ => Compare::value(*key, *cmp, value.to_string()),
            };
            let txn = Txn::new()
                .when([compare])
                .and_then([
                    TxnOp::put(
                        *then_key,
                        format!("t{value}"),
                        Some(PutOptions::new().with_prev_key()),
                    ),
                    TxnOp::get(*key, None),
                    // A nested txn answers with its own (empty) header.
                    TxnOp::txn(Txn::new().and_then([TxnOp::get(*then_key, None)])),
                ])
                .or_else([TxnOp::delete(
                    *then_key,
                    Some(DeleteOptions::new().with_prev_key()),
                )]);
            match client.txn(txn).await {
                Ok(r) => {
                    let ops: Vec<String> = r
                        .op_responses()
                        .iter()
                        .map(|o| match o {
                            // Each response inside carries its own header.
                            TxnOpResponse::Put(p) => {
                                format!(
                                    "put rev={} prev={:?}",
                                    header(p.header()),
                                    p.prev_key().map(|kv| kvs(std::slice::from_ref(kv)))
                                )
                            }
                            TxnOpResponse::Get(g) => {
                                format!("get rev={} {:?}", header(g.header()), kvs(g.kvs()))
                            }
                            TxnOpResponse::Delete(d) => {
                                format!(
                                    "delete rev={} {} {:?}",
                                    header(d.header()),
                                    d.deleted(),
                                    kvs(d.prev_kvs())
                                )
                            }
                            TxnOpResponse::Txn(t) => format!(
                                "txn rev={} has_header={} gets={:?}",
                                header(t.header()),
                                t.header().is_some(),
                                t.op_responses()
                                    .iter()
                                    .map(|o| match o {
                                        TxnOpResponse::Get(g) => header(g.header()),
                                        _ => -1,
                                    })
                                    .collect::<Vec<_>>()
                            ),
                        })
                        .collect();
                    format!(
                        "txn rev={} succeeded={} ops={ops:?}",
                        header(r.header()),
                        r.succeeded()
                    )
                }
                Err(e) => format!("txn error {}", error_text(&e)),
            }
        }
        Op::Compact { revision } => match client.compact(*revision, None).await {
            Ok(_) => "compact ok".into(),
            Err(e) => format!("compact error {}", error_text(&e)),
        },
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: &'static str,
        value: String,
        prev: bool,
    },
    Delete {
        key: &'static str,
        prefix: bool,
    },
    Get {
        key: &'static str,
        prefix: bool,
        revision: i64,
        limit: i64,
    },
    Txn {
        key: &'static str,
        target: u8,
        cmp: CompareOp,
        value: i64,
        then_key: &'static str,
    },
    Compact {
        revision: i64,
    },
}

fn random_op(rng: &mut StdRng, base: i64, current: i64) -> Op {
    let cmp = [
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::Greater,
        CompareOp::Less,
    ][rng.random_range(0..4)];
    match rng.random_range(0..100) {
        0..=34 => Op::Put {
            key: random_key(rng),
            value: format!("v{}", rng.random_range(0..5)),
            prev: rng.random_bool(0.5),
        },
        35..=44 => Op::Delete {
            key: random_key(rng),
            prefix: rng.random_bool(0.3),
        },
        45..=69 => Op::Get {
            key: if rng.random_bool(0.5) {
                "d/"
            } else {
                random_key(rng)
            },
            prefix: rng.random_bool(0.5),
            // Sometimes in the past (maybe compacted), sometimes the future.
            revision: match rng.random_range(0..4) {
                0 => rng.random_range(base..=current + 2),
                _ => 0,
            },
            limit: rng.random_range(0..4),
        },
        70..=96 => {
            let target = rng.random_range(0..4);
            Op::Txn {
                key: random_key(rng),
                target,
                cmp,
                // Revisions compare against recent ones, versions and
                // values against small numbers.
                value: match target {
                    0 | 2 => rng.random_range(0..=current + 1),
                    _ => rng.random_range(0..4),
                },
                then_key: random_key(rng),
            }
        }
        _ => Op::Compact {
            revision: rng.random_range(base..=current + 1),
        },
    }
}

/// A single-member Debian etcd on free ports, stopped on drop.
struct Etcd {
    child: tokio::process::Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

async fn start_etcd() -> Etcd {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = |_: ()| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    };
    let (client, peer) = (port(()), port(()));
    let endpoint = format!("http://127.0.0.1:{client}");
    let child =
        tokio::process::Command::new(std::env::var("ETCD").unwrap_or_else(|_| "etcd".into()))
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
            ])
            .args([
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start etcd: run scripts/test.sh, which installs etcd-server");
    Etcd {
        child,
        endpoint,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kv_txn_compact_sequences_match_etcd() {
    let mut etcd = start_etcd().await;
    let mut reference = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(mut c) = Client::connect([etcd.endpoint.clone()], None).await {
                if c.get("probe", None).await.is_ok() {
                    return c;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("etcd starts");
    let c = TestCluster::new(3).await.expect("cluster");
    let mut ours: Vec<Client> = Vec::new();
    for id in c.ids() {
        ours.push(c.etcd(id).await.expect("client"));
    }

    // Align the revisions: kubestore starts with its system namespaces.
    let ours_rev = ours[0]
        .get("probe", None)
        .await
        .expect("probe")
        .header()
        .map_or(0, |h| h.revision());
    loop {
        let theirs = reference
            .get("probe", None)
            .await
            .expect("probe")
            .header()
            .map_or(0, |h| h.revision());
        if theirs >= ours_rev {
            assert_eq!(theirs, ours_rev, "etcd started ahead of kubestore");
            break;
        }
        reference.put("/align", "x", None).await.expect("align");
    }

    let mut rng = StdRng::seed_from_u64(0x6b75_6265);
    let base = ours_rev;
    let mut current = base;
    for i in 0..STEPS {
        let op = random_op(&mut rng, base, current);
        let expected = step(&mut reference, &op).await;
        let actual = step(&mut ours[i % 3], &op).await;
        assert_eq!(actual, expected, "step {i}: {op:?}");
        if let Some(r) = expected
            .split("rev=")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse::<i64>().ok())
        {
            current = current.max(r);
        }
    }
    etcd.child.kill().await.expect("stop etcd");
    c.shutdown().await;
}
