//! Compiles the .proto files with protox (pure Rust), so building needs no
//! system `protoc`.
//!
//! All files are compiled in one pass, so cross-package references
//! (`etcdserverpb` -> `mvccpb`) resolve; prost emits one `<package>.rs` per
//! protobuf package into `OUT_DIR`, included from `src/lib.rs`.
//!
//! Kubernetes' messages (`proto/kube/`, written by `scripts/gen-protobuf.py`)
//! get no Rust code: they are compiled into one encoded descriptor set,
//! `OUT_DIR/kube.fds`, which the server reads them through.

use std::path::PathBuf;

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/raft.proto",
        "proto/etcd/kv.proto",
        "proto/etcd/rpc.proto",
        "proto/gnostic/openapiv2.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // tonic-prost's codec, but an undecodable message is InvalidArgument.
        .codec_path("crate::codec::Codec")
        .compile_fds(descriptors)?;

    println!("cargo:rerun-if-changed=proto/kube");
    let mut kube = Vec::new();
    for entry in std::fs::read_dir("proto/kube")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "proto") {
            kube.push(path);
        }
    }
    kube.sort();
    let set = protox::compile(&kube, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("kube.fds");
    std::fs::write(out, set.encode_to_vec())?;
    Ok(())
}
