//! The `kubestore serve` process's own settings, read from the kernel's
//! view of a spawned node.

use kubestore_tests::{ClusterOptions, TestCluster};

/// A field of `/proc/<pid>/status`.
#[cfg(target_os = "linux")]
fn proc_status(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in the status of {pid}:\n{status}"))
        .trim()
        .to_string()
}

/// The allocator asks for huge pages on every region it maps; a node keeps
/// them off unless `--transparent-huge-pages` says otherwise, so its
/// resident memory grows by what it uses, not in 2 MiB steps.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_node_runs_without_transparent_huge_pages() {
    let cluster = TestCluster::spawn(1, ClusterOptions::default())
        .await
        .expect("cluster");
    let pid = cluster.pid(1).expect("pid");
    assert_eq!(proc_status(pid, "THP_enabled"), "0");
    cluster.shutdown().await;
}

/// `--transparent-huge-pages` gives them back, even to a node whose parent
/// ran without them (the kernel's setting is inherited across exec, so
/// the node must turn it on itself).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_asked_for_transparent_huge_pages_keeps_them() {
    // Inherited by the node: only the node's own setting can turn it on.
    let found = nix::sys::prctl::get_thp_disable().expect("read");
    nix::sys::prctl::set_thp_disable(true).expect("disable for the children");
    let cluster = TestCluster::spawn(
        1,
        ClusterOptions {
            transparent_huge_pages: true,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let pid = cluster.pid(1).expect("pid");
    let enabled = proc_status(pid, "THP_enabled");
    cluster.shutdown().await;
    nix::sys::prctl::set_thp_disable(found).expect("restore");
    assert_eq!(enabled, "1");
}
