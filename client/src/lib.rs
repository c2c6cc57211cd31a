pub mod connection;
pub mod error;
pub mod partitioner;
pub mod producer;
