//! Leases under faults: a key attached to a lease that is kept alive must
//! not vanish before the lease's TTL has run out since a keep-alive the
//! store acknowledged.
//!
//! The lease client grants a lease (5 s TTL) through its node, puts a key
//! attached to it, then every half second renews it and reads the key
//! back linearizably, moving to the next node after each lease. When a
//! renewal answers that the lease is gone (it really expired, say while
//! the client's node was down), the client starts over with a new lease.
//!
//! The check: a keep-alive acknowledged at all was applied before any
//! revoke (a renewal of a revoked lease fails), and the leader restarts a
//! lease's clock when it applies a renewal, which is after the renewal was
//! sent. So if a read that completed at `t` found the key gone, every
//! acknowledged keep-alive of that lease must have been sent at least one
//! TTL before `t`; one sent later proves the lease was revoked early (the
//! stale-expiry bug: a paused or deposed leader expiring a lease the
//! majority kept renewing).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::history::Violation;
use super::workload::{Endpoint, Recorder};

/// The TTL of the checker's leases.
pub const LEASE_TTL: Duration = Duration::from_secs(5);
/// Between two renewals (and reads) of one lease.
const RENEW_EVERY: Duration = Duration::from_millis(500);
/// Renewals of one lease before the client moves on to a new one.
const RENEWALS_PER_LEASE: u32 = 20;
/// The key prefix of leased keys (outside the registers' prefixes).
pub const LEASE_PREFIX: &str = "/chaos-lease/";

/// What happened to one lease.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LeaseLog {
    pub lease: i64,
    pub node: u64,
    pub key: String,
    /// When the attached key was written (acknowledged).
    pub attached: Option<Duration>,
    /// Invocation times of acknowledged keep-alives.
    pub renewed: Vec<Duration>,
    /// Completion times of acknowledged linearizable reads that found the
    /// key gone.
    pub found_gone: Vec<Duration>,
    /// Acknowledged reads that found the key.
    pub found: u32,
}

/// Every lease the client used.
#[derive(Debug, Default)]
pub struct LeaseHistory {
    logs: Mutex<Vec<LeaseLog>>,
}

impl LeaseHistory {
    fn push(&self, log: LeaseLog) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(log);
    }

    pub fn take(&self) -> Vec<LeaseLog> {
        std::mem::take(&mut *self.logs.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Runs the lease client until `stop`.
pub async fn lease_client(
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    op_timeout: Duration,
    history: Arc<LeaseHistory>,
    mut stop: watch::Receiver<bool>,
) {
    let mut round = 0usize;
    while !*stop.borrow_and_update() {
        let node = endpoints[round % endpoints.len()].clone();
        round += 1;
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(op_timeout);
        let Ok(mut client) =
            etcd_client::Client::connect([node.etcd_url.clone()], Some(options)).await
        else {
            tokio::time::sleep(RENEW_EVERY).await;
            continue;
        };
        let ttl = i64::try_from(LEASE_TTL.as_secs()).unwrap_or(5);
        let Ok(granted) = client.lease_grant(ttl, None).await else {
            tokio::time::sleep(RENEW_EVERY).await;
            continue;
        };
        let mut log = LeaseLog {
            lease: granted.id(),
            node: node.id,
            key: format!("{LEASE_PREFIX}{}", granted.id()),
            ..LeaseLog::default()
        };
        let put = etcd_client::PutOptions::new().with_lease(granted.id());
        if client
            .put(log.key.clone(), "leased", Some(put))
            .await
            .is_ok()
        {
            log.attached = Some(recorder.now());
            follow_lease(&mut client, &recorder, &mut log, &mut stop).await;
        }
        let _ = client.lease_revoke(granted.id()).await;
        history.push(log);
    }
}

/// Renews and reads one lease until it is gone, its renewals are used up,
/// or `stop`.
async fn follow_lease(
    client: &mut etcd_client::Client,
    recorder: &Recorder,
    log: &mut LeaseLog,
    stop: &mut watch::Receiver<bool>,
) {
    for _ in 0..RENEWALS_PER_LEASE {
        if *stop.borrow_and_update() {
            return;
        }
        let invoked = recorder.now();
        match renew(client, log.lease).await {
            Some(true) => log.renewed.push(invoked),
            // The lease is gone: it expired or was revoked.
            Some(false) => return,
            None => {}
        }
        if let Ok(resp) = client.get(log.key.clone(), None).await {
            if resp.kvs().is_empty() {
                log.found_gone.push(recorder.now());
                return;
            }
            log.found += 1;
        }
        tokio::time::sleep(RENEW_EVERY).await;
    }
}

/// One keep-alive: `Some(true)` renewed, `Some(false)` the lease is gone,
/// `None` no answer.
async fn renew(client: &mut etcd_client::Client, lease: i64) -> Option<bool> {
    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await.ok()?;
    keeper.keep_alive().await.ok()?;
    let answer = stream.message().await.ok()??;
    Some(answer.ttl() > 0)
}

/// A read that found the key gone less than a TTL after an acknowledged
/// keep-alive was sent.
pub fn check(logs: &[LeaseLog]) -> Vec<Violation> {
    let mut violations = Vec::new();
    for log in logs {
        for gone in &log.found_gone {
            if let Some(last) = log.renewed.iter().filter(|r| *r < gone).max() {
                if *gone < *last + LEASE_TTL {
                    violations.push(Violation {
                        check: "lease-kept-alive".into(),
                        key: Some(log.key.clone()),
                        message: format!(
                            "lease {} (through node {}) was renewed at {:?} (TTL {:?}) but its key was gone at {:?}",
                            log.lease, log.node, last, LEASE_TTL, gone
                        ),
                        ops: Vec::new(),
                    });
                }
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(renewed: &[u64], gone: &[u64]) -> LeaseLog {
        LeaseLog {
            lease: 1,
            key: "k".into(),
            renewed: renewed
                .iter()
                .map(|ms| Duration::from_millis(*ms))
                .collect(),
            found_gone: gone.iter().map(|ms| Duration::from_millis(*ms)).collect(),
            ..LeaseLog::default()
        }
    }

    #[test]
    fn a_key_gone_within_a_ttl_of_a_renewal_is_a_violation() {
        assert_eq!(check(&[log(&[1_000, 1_500], &[3_000])]).len(), 1);
    }

    #[test]
    fn a_key_gone_a_ttl_after_the_last_renewal_is_an_expiry() {
        assert!(check(&[log(&[1_000, 1_500], &[6_600])]).is_empty());
        assert!(check(&[log(&[], &[100])]).is_empty());
    }
}
