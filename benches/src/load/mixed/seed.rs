//! The untimed part of `bench mixed`: namespaces, leases and pods, the
//! probe of the status subresource, the seeded list and the watches' start.

use super::*;

/// Creates a namespace unless it exists.
pub(super) async fn ensure_namespace(
    http: &reqwest::Client,
    base: &str,
    name: &str,
) -> anyhow::Result<()> {
    let r = http
        .post(format!("{base}/api/v1/namespaces"))
        .json(&json!({ "metadata": { "name": name } }))
        .send()
        .await?;
    if !(r.status().is_success() || r.status() == StatusCode::CONFLICT) {
        bail!("creating namespace {name}: HTTP {}", r.status());
    }
    Ok(())
}

/// The untimed part: namespaces, a Lease per node (kept if it exists),
/// and the pods (those of an earlier run deleted first).
pub(super) async fn seed(args: &MixedArgs, http: &reqwest::Client) -> anyhow::Result<()> {
    let base = args.endpoints[0].as_str();
    ensure_namespace(http, base, LEASE_NAMESPACE).await?;
    ensure_namespace(http, base, NAMESPACE).await?;
    // At once (grace period 0), as a kube-apiserver would not otherwise
    // delete a pod bound to a node until its kubelet confirmed.
    let r = http
        .delete(pods_url(base))
        .query(&[
            ("labelSelector", format!("{}={}", POD_LABEL.0, POD_LABEL.1)),
            ("gracePeriodSeconds", "0".to_string()),
        ])
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("deleting the pods of an earlier run: HTTP {}", r.status());
    }
    let bar = progress(
        args.nodes + args.pods,
        "seeding leases and pods",
        "{prefix:>28} [{bar:30}] {pos}/{len}",
        args.no_progress,
    );
    let leases = format!("{base}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases");
    let lease_seconds = (args.lease_period_ms * 4).div_ceil(1000).max(1);
    let mut created = futures::stream::iter(0..args.nodes)
        .map(|n| {
            let node = node_name(n);
            let body = json!({
                "metadata": { "name": node },
                "spec": {
                    "holderIdentity": node,
                    "leaseDurationSeconds": lease_seconds,
                    "renewTime": micro_time_now(),
                },
            });
            let req = http.post(&leases).json(&body);
            async move { (node, req.send().await) }
        })
        .buffer_unordered(SEED_IN_FLIGHT);
    while let Some((node, r)) = created.next().await {
        let status = r
            .with_context(|| format!("creating lease {node}"))?
            .status();
        if !(status.is_success() || status == StatusCode::CONFLICT) {
            bail!("creating lease {node}: HTTP {status}");
        }
        bar.inc(1);
    }
    let pods = pods_url(base);
    let mut created = futures::stream::iter(0..args.pods)
        .map(|i| {
            let name = pod_name(i);
            let body = json!({
                "metadata": { "name": name, "labels": { POD_LABEL.0: POD_LABEL.1 } },
                "spec": {
                    "nodeName": node_name(i % args.nodes),
                    "containers": [{ "name": "app", "image": "pause:3.10" }],
                },
                "status": { "phase": "Pending" },
            });
            let req = http.post(&pods).json(&body);
            async move { (name, req.send().await) }
        })
        .buffer_unordered(SEED_IN_FLIGHT);
    while let Some((name, r)) = created.next().await {
        let status = r.with_context(|| format!("creating pod {name}"))?.status();
        if !status.is_success() {
            bail!("creating pod {name}: HTTP {status}");
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Whether the server serves `pods/status`: one status PUT on the first pod.
pub(super) async fn probe_status_path(
    http: &reqwest::Client,
    base: &str,
) -> anyhow::Result<StatusPath> {
    let name = pod_name(0);
    let mut pod: Value = http
        .get(format!("{}/{name}", pods_url(base)))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    set_nested("probe", &mut pod, "status", "phase", json!("Running"))?;
    let r = http
        .put(StatusPath::Subresource.url(base, &name))
        .json(&pod)
        .send()
        .await?;
    match r.status() {
        s if s.is_success() => Ok(StatusPath::Subresource),
        StatusCode::NOT_FOUND => {
            eprintln!(
                "warning: {base} answers 404 to PUT pods/{name}/status: the pod status \
                 updates PUT the whole pod instead"
            );
            Ok(StatusPath::WholeObject)
        }
        s => bail!("probing pods/{name}/status: HTTP {s}"),
    }
}

/// The seeded pods, in index order, and the revision they were listed at.
pub(super) async fn list_seeded(
    http: &reqwest::Client,
    base: &str,
    pods: u64,
) -> anyhow::Result<(u64, Vec<Value>)> {
    let list: Value = http
        .get(pods_url(base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let revision = resource_version(&list).context("the pod list has no resourceVersion")?;
    let mut by_index: Vec<Option<Value>> = vec![None; pods as usize];
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .context("the pod list has no items")?;
    for item in items {
        let index = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .and_then(|n| n.strip_prefix("pod-"))
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(slot) = index.and_then(|i| by_index.get_mut(i)) {
            *slot = Some(item.clone());
        }
    }
    let seeded: Vec<Value> = by_index.into_iter().flatten().collect();
    if seeded.len() as u64 != pods {
        bail!(
            "listed {} of the {pods} seeded pods in {NAMESPACE}",
            seeded.len()
        );
    }
    Ok((revision, seeded))
}

/// Opens node `n`'s watch on its pods, after revision `from`.
pub(super) async fn open_watch(
    http: &reqwest::Client,
    endpoint: &str,
    node: &str,
    from: u64,
) -> Result<reqwest::Response, OpError> {
    send(
        "watch",
        http.get(pods_url(endpoint)).query(&[
            ("watch", "1".to_string()),
            ("allowWatchBookmarks", "true".to_string()),
            ("fieldSelector", format!("spec.nodeName={node}")),
            ("resourceVersion", from.to_string()),
        ]),
    )
    .await
}
