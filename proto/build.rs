//! Compiles `idem/v1/*.proto` with protox (pure Rust), so building idem never needs a
//! system `protoc`. The descriptor set is kept for gRPC server reflection.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "idem/v1/errors.proto",
    "idem/v1/txn.proto",
    "idem/v1/group.proto",
    "idem/v1/log_lifecycle.proto",
    "idem/v1/acl.proto",
    "idem/v1/broker.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("idem_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .bytes(".idem.v1")
        .compile_fds(descriptors)?;
    Ok(())
}
