//! Real clients against a cluster started as a user starts one: the
//! `kubestore cluster --nodes 3` launcher (started and stopped here, its
//! `cluster.json` and `kubeconfig` read back), and kubectl and helm run
//! through its kubeconfig's per-node contexts, with their output and exit
//! codes for the end-to-end tests to assert on.
//!
//! Which binaries run comes from the environment `scripts/test.sh` sets
//! up (`KUBECTL`, `KUBECTL_NEWEST`, `HELM`, see `scripts/common.sh`);
//! [`KUBECTL_VERSIONS`] is the one list of kubectl versions the clients
//! test drives.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::kubestore_binary;

/// The kubectl binaries the clients end-to-end test runs every everyday
/// command with, each named by the environment variable that holds its
/// path (set by `scripts/test.sh`). Extend the list here (for example
/// with `KUBECTL_OLDEST`, 1.27, once `/openapi/v2` is served).
pub const KUBECTL_VERSIONS: &[&str] = &["KUBECTL_OLDEST", "KUBECTL", "KUBECTL_NEWEST"];

/// The path of kubectl 1.33, the one most tests use (`$KUBECTL`, else
/// `kubectl` on the `PATH`).
pub fn kubectl_path() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Runs `$KUBECTL --kubeconfig <kubeconfig> --context <context> <args>`.
pub fn kubectl(kubeconfig: &Path, context: &str, args: &[&str]) -> Output {
    Kubectl::new(kubectl_path(), kubeconfig).run(context, args)
}

/// The standard output of a run that must have succeeded; otherwise a
/// panic naming `what` with both streams.
pub fn ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The standard error of a run that must have failed; otherwise a panic
/// naming `what`.
pub fn failed(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what} succeeded but must fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One kubectl binary bound to a kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    pub path: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn new(path: impl Into<PathBuf>, kubeconfig: &Path) -> Self {
        Self {
            path: path.into(),
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    /// The kubectl named by the environment variable `var` (one of
    /// [`KUBECTL_VERSIONS`]); a panic saying how to install it if unset.
    pub fn from_env(var: &str, kubeconfig: &Path) -> Self {
        let path = std::env::var(var).unwrap_or_else(|_| {
            panic!("${var} is not set: run scripts/test.sh (or source scripts/common.sh and its ensure_ functions)")
        });
        Self::new(path, kubeconfig)
    }

    /// A command for `context` with `args`, to add environment or stdin.
    pub fn command<S: AsRef<OsStr>>(&self, context: &str, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--context", context])
            .args(args);
        cmd
    }

    /// Runs kubectl through `context` with `args`.
    pub fn run<S: AsRef<OsStr>>(&self, context: &str, args: &[S]) -> Output {
        self.command(context, args).output().unwrap_or_else(|e| {
            panic!(
                "cannot run kubectl ({}): {e}; run scripts/test.sh, which installs it",
                self.path.display()
            )
        })
    }

    /// Runs kubectl and returns its standard output; a panic if it failed.
    pub fn ok<S: AsRef<OsStr>>(&self, context: &str, args: &[S]) -> String {
        let what = self.describe(args);
        ok(&self.run(context, args), &what)
    }

    /// Runs kubectl with `-o json` appended and parses what it printed.
    pub fn json<S: AsRef<OsStr>>(&self, context: &str, args: &[S]) -> Value {
        let mut all: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
        all.extend([OsStr::new("-o"), OsStr::new("json")]);
        let out = self.ok(context, &all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// A long-running kubectl (`get -w`, `wait`) with piped output,
    /// killed when dropped.
    pub fn spawn<S: AsRef<OsStr>>(&self, context: &str, args: &[S]) -> tokio::process::Child {
        tokio::process::Command::from(self.command(context, args))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run kubectl ({}): {e}", self.path.display()))
    }

    /// The client's `major.minor`, from `kubectl version --client`.
    pub fn client_version(&self) -> (u32, u32) {
        let out = Command::new(&self.path)
            .args(["version", "--client", "-o", "json"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run kubectl ({}): {e}", self.path.display()));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "kubectl version --client -o json ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        let num = |k: &str| {
            v["clientVersion"][k]
                .as_str()
                .and_then(|s| s.trim_end_matches('+').parse().ok())
                .unwrap_or_else(|| panic!("clientVersion.{k} in {v}"))
        };
        (num("major"), num("minor"))
    }

    fn describe<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let words: Vec<_> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        format!("{} {}", self.path.display(), words.join(" "))
    }
}

/// helm bound to a kubeconfig: every run names `--kubeconfig` and
/// `--kube-context`.
#[derive(Debug, Clone)]
pub struct Helm {
    pub path: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Helm {
    /// `$HELM`; a panic saying how to install it if unset.
    pub fn from_env(kubeconfig: &Path) -> Self {
        let path = std::env::var("HELM").unwrap_or_else(|_| {
            panic!(
                "$HELM is not set: run scripts/test.sh (or source scripts/common.sh; ensure_helm)"
            )
        });
        Self {
            path: path.into(),
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    /// Runs helm through `context` with `args`; helm's own caches and
    /// configuration live under `home` so a run touches nothing of the
    /// user's.
    pub fn run<S: AsRef<OsStr>>(&self, home: &Path, context: &str, args: &[S]) -> Output {
        Command::new(&self.path)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--kube-context", context])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run helm ({}): {e}", self.path.display()))
    }
}

/// A base port with `n` free consecutive ports after it, all in
/// [`crate::LISTEN_PORTS`] (outside the ephemeral range, so that no
/// outgoing connection holds one when a node binds it again). Ranges
/// handed out one after another never overlap: the ports are only bound to
/// check them, and released before the caller binds them.
pub fn free_port_range(n: u16) -> u16 {
    for _ in 0..200 {
        let base = crate::next_listen_ports(n);
        let held: Vec<_> = (0..n)
            .filter_map(|i| TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if held.len() == n as usize {
            return base;
        }
    }
    panic!("no free port range");
}

/// `kubestore cluster --nodes 3` with its data (and `cluster.json`,
/// `kubeconfig`) in `dir`, once the launcher reports the cluster up: the
/// launcher process and cluster.json's nodes.
pub async fn start_cluster(dir: &Path) -> (Launcher, Vec<Value>) {
    let rest_port = free_port_range(3);
    let grpc_port = free_port_range(3);
    let peer_port = free_port_range(3);
    let launcher = tokio::process::Command::new(kubestore_binary().expect("binary"))
        .args(["cluster", "--nodes", "3"])
        .arg("--data-dir")
        .arg(dir)
        .args([
            "--rest-port",
            &rest_port.to_string(),
            "--grpc-port",
            &grpc_port.to_string(),
            "--peer-port",
            &peer_port.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("launcher");
    // From here on a test that panics still stops the cluster.
    let mut launcher = Launcher(Some(launcher));
    let stdout = launcher.child().stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(line) = lines.next_line().await.expect("line") {
            if line.starts_with("Press Ctrl-C") {
                return true;
            }
        }
        false
    })
    .await
    .expect("launcher reported nothing within 90 s");
    assert!(ready, "launcher exited before the cluster was up");
    // Keep reading what the launcher prints: a closed pipe would fail its
    // last words at shutdown.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let cluster: Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).expect("cluster.json"))
            .expect("json");
    let nodes = cluster["nodes"].as_array().expect("nodes").clone();
    assert_eq!(nodes.len(), 3);
    (launcher, nodes)
}

/// A running `kubestore cluster` launcher. [`stop_cluster`] stops it and
/// checks that it exited cleanly; dropped without that (a test that
/// panicked), it still sends the launcher SIGTERM, on which the launcher
/// stops its nodes and exits, so no cluster outlives its test. (A SIGKILL,
/// as `kill_on_drop` sends, would leave the nodes running.)
#[derive(Debug)]
pub struct Launcher(Option<tokio::process::Child>);

impl Launcher {
    fn child(&mut self) -> &mut tokio::process::Child {
        self.0.as_mut().expect("a running launcher")
    }

    /// Asks the launcher to stop its nodes and exit.
    fn terminate(child: &tokio::process::Child) {
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if let Some(child) = &self.0 {
            Launcher::terminate(child);
        }
    }
}

/// SIGTERM stops the launcher and its children.
pub async fn stop_cluster(mut launcher: Launcher) {
    let mut launcher = launcher.0.take().expect("a running launcher");
    Launcher::terminate(&launcher);
    let exit = tokio::time::timeout(Duration::from_secs(30), launcher.wait())
        .await
        .expect("launcher stops")
        .expect("wait");
    assert!(exit.success(), "launcher exit: {exit:?}");
}
