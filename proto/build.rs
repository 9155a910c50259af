//! Compiles the .proto files with protox (pure Rust), so building needs no
//! system `protoc`.
//!
//! All files are compiled in one pass, so cross-package references
//! (`etcdserverpb` -> `mvccpb`) resolve; prost emits one `<package>.rs` per
//! protobuf package into `OUT_DIR`, included from `src/lib.rs`.

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
    Ok(())
}
