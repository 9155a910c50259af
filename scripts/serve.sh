#!/usr/bin/env bash
# Builds kubestore (installing what the build needs, if missing) and runs it.
# With no arguments: a single node on 127.0.0.1:8080, data in ./kubestore-data.
# Arguments are passed to the binary, e.g. `scripts/serve.sh cluster --nodes 3`
# or `scripts/serve.sh bench compare --quick --out bench-compare` (which also
# installs Debian's etcd to compare against).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ensure_build_deps
if [ "${1:-}" = bench ]; then
    ensure_etcd
fi
cd "$ROOT"
cargo build --release --bin kubestore
exec "$CARGO_TARGET_DIR/release/kubestore" "$@"
