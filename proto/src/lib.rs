//! **idem-proto**, the wire: the `.proto` files of package `idem.v1`, their generated
//! code, and the formats both sides agree on byte for byte. Depends on no idem crate.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! The idem wire protocol: gRPC services of package `idem.v1` (generated from
//! `idem/v1/*.proto`) and the record batch format every produce and fetch carries.
//! This crate holds the contract between processes; it decides nothing.

pub mod batch;
pub mod control;
pub mod internal;
pub mod transport;
pub mod txn;

/// Generated protobuf types and gRPC stubs of package `idem.v1`.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod v1 {
    tonic::include_proto!("idem.v1");
}

/// Encoded `FileDescriptorSet` of every idem proto, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/idem_descriptor.bin"));

pub use v1::ErrorCode;
