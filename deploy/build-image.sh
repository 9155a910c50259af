#!/usr/bin/env bash
# Builds the `kubestore:local` container image from the project's own
# release binary. There is no image registry here, so the image is FROM
# scratch with a root filesystem this script assembles: the binary and the
# shared libraries `ldd` says it needs.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
ensure_build_deps
cd "$ROOT"
cargo build --release --bin kubestore
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/data" "$ctx/rootfs/tmp"
cp "$CARGO_TARGET_DIR/release/kubestore" "$ctx/rootfs/usr/local/bin/"
for lib in $(ldd "$CARGO_TARGET_DIR/release/kubestore" | awk '/=> \//{print $3} $1 ~ /^\//{print $1}'); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
done
cp "$ROOT/deploy/Dockerfile" "$ctx/"
docker build -t kubestore:local "$ctx"
echo "built kubestore:local"
