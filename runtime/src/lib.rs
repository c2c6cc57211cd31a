//! **idem-runtime**, what every server process shares. Depends on no idem crate; the
//! broker and the coordinator depend on it.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! What every idem server process (broker, coordinator) shares:
//!
//! - [`shutdown`]: one cancellation tree per process, and the duties each server runs;
//! - [`grpc_server`]: the listeners, health, reflection and tower layers of every server;
//! - [`listeners`]: the internal and external listener, and which addresses each hands out;
//! - [`deferred`]: a gRPC service installed once the server's state is loaded;
//! - [`health`]: SERVING only while the server can do its job;
//! - [`stop`]: the graceful stop sequence;
//! - [`etcd_call`], [`lease`]: etcd calls with a deadline, and telling an expired lease
//!   from an unreachable etcd;
//! - [`lease_keeper`], [`until_deleted`]: holding an etcd lease (kept alive, its loss
//!   reported, revoked on a stop), and waiting for another holder's key to go;
//! - [`logging`]: where a server's logs go (stderr, filtered by `IDEM_LOG`), and its
//!   spans when it exports traces;
//! - [`traces`]: OTLP export of spans (`--otlp-endpoint`) and the caller's trace context;
//! - [`metrics_endpoint`], [`rpc_metrics`]: the Prometheus endpoint (`--metrics-listen`)
//!   and the per-RPC counters and latency histograms every server records;
//! - [`log_limit`]: a limit on how often a repeating failure is logged;
//! - [`atomic_file`], [`clock`]: replacing a file crash-safely, and the wall clock;
//! - [`config_error`]: a setting refused at start, naming its flag;
//! - [`tls`]: TLS on every listener (and mutual TLS), reloaded on SIGHUP;
//! - [`topic_catalog`]: the etcd keys of the topic catalog, for its readers;
//! - [`acl`], [`authn`]: ACL authorization (cached decisions) and who a request's
//!   principal is (bearer token or client certificate);
//! - [`watched_file`]: a settings file followed while the server runs (tokens, quotas);
//! - [`connection_limit`]: how many connections a server holds, in all and per client
//!   address.

pub mod acl;
pub mod atomic_file;
pub mod auth_flags;
pub mod authn;
pub mod clock;
pub mod config_error;
pub mod connection_limit;
pub mod deferred;
pub mod etcd_call;
pub mod grpc_server;
pub mod health;
pub mod lease;
pub mod lease_keeper;
pub mod listeners;
pub mod log_limit;
pub mod logging;
pub mod metrics_endpoint;
pub mod rpc_metrics;
pub mod shutdown;
pub mod stop;
pub mod tls;
pub mod topic_catalog;
pub mod traces;
pub mod until_deleted;
pub mod watched_file;
