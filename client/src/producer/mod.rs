pub mod accumulator;
pub mod config;
pub mod inflight;
