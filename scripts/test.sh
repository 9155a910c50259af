#!/usr/bin/env bash
# The whole check, as CI runs it: formatting, the generated protobuf schema
# against its source (k8s-pb), no module dependency cycles, clippy with
# warnings denied, and every test (unit, storage, cluster, kubectl and
# Python client end to end). Installs what the tests need (libclang, protoc, kubectl 1.33 and
# 1.37, helm 4, the kubernetes Python package, Debian's etcd) if missing.
# Changes no files in the repository.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ensure_build_deps
ensure_disk_room
ensure_kubectl
ensure_kubectl_newest
ensure_helm
ensure_python_client
ensure_etcd
cd "$ROOT"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== generated protobuf schema matches k8s-pb (scripts/gen-protobuf.py --check)"
python3 scripts/gen-protobuf.py --check
echo "== module dependencies point one way (scripts/check-module-cycles.py)"
python3 scripts/check-module-cycles.py
echo "== cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test (kubectl: $KUBECTL, $KUBECTL_NEWEST; helm: $HELM)"
cargo build --workspace --all-targets
cargo test --workspace -- --test-threads=2
