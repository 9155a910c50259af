//! The timed clients of `bench mixed`: lease renewers, status writers and
//! listers, each until the deadline.

use super::*;

/// One simulated kubelet's lease heartbeat, until the deadline.
pub(super) async fn lease_renewer(shared: Arc<Shared>, n: u64, period: Duration, offset: Duration) {
    let node = node_name(n);
    let url = lease_url(shared.endpoint(n), &node);
    let deadline = tokio::time::Instant::from_std(shared.deadline);
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(shared.start) + offset,
        period,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::time::sleep_until(deadline) => return,
        }
        let t = Instant::now();
        match renew_lease(&shared.http, &url, &node).await {
            Ok(()) => shared.leases.ok(t, None),
            Err(OpError::Conflict { .. }) => shared.leases.conflict(),
            Err(e) => shared.leases.err(&e),
        }
    }
}

/// GET the lease, PUT it back with a new renewTime.
async fn renew_lease(http: &reqwest::Client, url: &str, node: &str) -> Result<(), OpError> {
    const WHAT: &str = "lease renew";
    let mut lease = json_of(WHAT, send(WHAT, http.get(url)).await?).await?;
    set_nested(
        WHAT,
        &mut lease,
        "spec",
        "renewTime",
        json!(micro_time_now()),
    )?;
    set_nested(WHAT, &mut lease, "spec", "holderIdentity", json!(node))?;
    drain(WHAT, send(WHAT, http.put(url).json(&lease)).await?).await
}

/// One status-writing client, until the deadline.
pub(super) async fn status_writer(shared: Arc<Shared>, w: u64) {
    let endpoint = shared.endpoint(w).to_string();
    while Instant::now() < shared.deadline {
        let i = rand::random_range(0..shared.pods) as usize;
        if let Err(e) = update_status(&shared, &endpoint, i).await {
            shared.status.err(&e);
        }
    }
}

/// Puts a new status on pod `i`, re-reading it after each conflict.
async fn update_status(shared: &Shared, endpoint: &str, i: usize) -> Result<(), OpError> {
    const WHAT: &str = "pod status update";
    let name = pod_name(i as u64);
    let mut pod = shared
        .pod_state
        .get(i)
        .map(|p| lock(p).clone())
        .ok_or(OpError::Malformed {
            what: WHAT,
            field: "seeded pod",
        })?;
    for _ in 0..CONFLICT_RETRIES {
        let t = Instant::now();
        let sent_us = shared.start.elapsed().as_micros() as u64;
        fields_mut(WHAT, &mut pod)?.insert("status".into(), pod_status(shared.stamp(sent_us)));
        let put = shared
            .http
            .put(shared.status_path.url(endpoint, &name))
            .json(&pod);
        match send(WHAT, put).await {
            Ok(r) => {
                let updated = json_of(WHAT, r).await?;
                let rv = resource_version(&updated).ok_or(OpError::Malformed {
                    what: WHAT,
                    field: "metadata.resourceVersion",
                })?;
                shared.status.ok(t, None);
                lock(&shared.acked).push(rv);
                shared.remember(i, updated);
                return Ok(());
            }
            Err(OpError::Conflict { .. }) => {
                shared.status.conflict();
                const REREAD: &str = "pod re-read after a conflict";
                let get = shared.http.get(format!("{}/{name}", pods_url(endpoint)));
                pod = json_of(REREAD, send(REREAD, get).await?).await?;
                shared.remember(i, pod.clone());
            }
            Err(e) => return Err(e),
        }
    }
    Err(OpError::TooManyConflicts)
}

/// One listing client, alternating most recent and rv=0, until the deadline.
pub(super) async fn lister(shared: Arc<Shared>, l: u64) {
    const WHAT: &str = "list pods";
    let url = format!("{}/api/v1/pods", shared.endpoint(l));
    let mut quorum = l.is_multiple_of(2);
    while Instant::now() < shared.deadline {
        let (rec, req) = if quorum {
            (&shared.list_quorum, shared.http.get(&url))
        } else {
            (
                &shared.list_any,
                shared.http.get(&url).query(&[("resourceVersion", "0")]),
            )
        };
        let t = Instant::now();
        let result = async {
            let r = send(WHAT, req).await?;
            let served = r
                .headers()
                .get(kubestore_server::http::metrics::READ_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            drain(WHAT, r).await?;
            Ok::<_, OpError>(served)
        }
        .await;
        match result {
            Ok(served) => rec.ok(t, served),
            Err(e) => rec.err(&e),
        }
        quorum = !quorum;
    }
}
