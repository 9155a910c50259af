//! The official Kubernetes Python client (installed by `scripts/test.sh`)
//! against a follower of a 3-node cluster: typed list models, `watch=True`,
//! watch decoding and error codes (`tests/e2e/python_client.py`), and the
//! deployment scale calls (`tests/e2e/python_scale.py`).

use kubestore_tests::TestCluster;

/// Runs `tests/e2e/<script>` against a follower of a fresh 3-node cluster
/// and expects it to succeed and print `marker`.
async fn run_against_a_follower(script: &str, marker: &str) {
    let c = TestCluster::new(3).await.expect("cluster");
    let follower = c.follower().await.expect("a follower");
    let path = format!("{}/e2e/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new("python3")
        .arg(&path)
        .arg(c.rest_url(follower))
        .output()
        .await
        .expect("python3 runs (scripts/test.sh installs the kubernetes package)");
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(marker));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_works_against_a_follower() {
    run_against_a_follower("python_client.py", "python client ok").await;
}

/// The Python client's scale calls (`tests/e2e/python_scale.py`):
/// `read_namespaced_deployment_scale`, `patch_namespaced_deployment_scale`
/// and `replace_namespaced_deployment_scale` against a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_scale_calls_work_against_a_follower() {
    run_against_a_follower("python_scale.py", "python scale ok").await;
}
