//! Everything an `idem-coordinator` process is configured with: one typed struct filled
//! from flags, `IDEM_*` environment variables and documented defaults. With `--etcd` the
//! coordinator joins a cluster (ownership by etcd leases); without it, `--data-dir`
//! makes it the solo coordinator of a single-node broker (it owns every partition).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::error::CoordinatorError;

#[derive(Debug, Clone, clap::Args)]
pub struct CoordinatorConfig {
    /// Coordinator id, unique among coordinators.
    #[arg(long = "id", env = "IDEM_COORDINATOR_ID", default_value_t = 0)]
    pub coordinator_id: i32,

    /// Address the gRPC server binds (port 0 picks a free port).
    #[arg(
        long,
        env = "IDEM_COORDINATOR_LISTEN",
        default_value = "127.0.0.1:9093"
    )]
    pub listen: SocketAddr,

    /// Address clients dial (defaults to the bound address).
    #[arg(long, env = "IDEM_COORDINATOR_ADVERTISE")]
    pub advertise: Option<String>,

    /// A broker to learn the cluster from (`host:port`).
    #[arg(long, env = "IDEM_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,

    /// etcd endpoints, comma separated. With them the coordinator joins the cluster
    /// and claims transaction log partitions through etcd leases.
    #[arg(long = "etcd", env = "IDEM_ETCD", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,

    /// Prefix of every etcd key idem writes.
    #[arg(long, env = "IDEM_ETCD_PREFIX", default_value = "/idem")]
    pub etcd_prefix: String,

    /// Without `--etcd`: the directory of the solo coordinator's epoch file.
    #[arg(long, env = "IDEM_COORDINATOR_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Partitions `__transaction_state` is created with (an existing topic keeps its
    /// own count).
    #[arg(long, env = "IDEM_TXN_LOG_PARTITIONS", default_value_t = 8)]
    pub txn_log_partitions: i32,

    /// How long the coordinator's registration and ownership outlive it going silent.
    #[arg(long, env = "IDEM_LEASE_TTL_MS", default_value_t = 5000)]
    pub lease_ttl_ms: u64,

    /// Largest transaction timeout a producer may ask for.
    #[arg(
        long,
        env = "IDEM_MAX_TRANSACTION_TIMEOUT_MS",
        default_value_t = 900_000
    )]
    pub max_transaction_timeout_ms: i32,

    /// How often open transactions are checked against their timeout (and idle
    /// transactional ids against their expiration).
    #[arg(long, env = "IDEM_TXN_CHECK_INTERVAL_MS", default_value_t = 1000)]
    pub txn_check_interval_ms: u64,

    /// A transactional id with no transaction under way and no request for this long is
    /// retired: persisted as Dead and forgotten, so its next InitProducerId gets a new
    /// producer id (Kafka's `transactional.id.expiration.ms`, default 7 days).
    #[arg(
        long,
        env = "IDEM_TRANSACTIONAL_ID_EXPIRATION_MS",
        default_value_t = 604_800_000
    )]
    pub transactional_id_expiration_ms: i64,

    /// Lease the next producer-id block in the background once 90% of the current one
    /// is handed out.
    #[arg(long, env = "IDEM_PID_PREFETCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub pid_prefetch: bool,
}

/// How ownership is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Etcd,
    Solo(PathBuf),
}

impl CoordinatorConfig {
    /// The solo coordinator of a single-node broker (`idem dev`, tests).
    pub fn solo(data_dir: PathBuf, listen: SocketAddr, bootstrap: String) -> Self {
        CoordinatorConfig {
            coordinator_id: 0,
            listen,
            advertise: None,
            bootstrap,
            etcd_endpoints: Vec::new(),
            etcd_prefix: "/idem".into(),
            data_dir: Some(data_dir),
            txn_log_partitions: 8,
            lease_ttl_ms: 5000,
            max_transaction_timeout_ms: 900_000,
            txn_check_interval_ms: 1000,
            transactional_id_expiration_ms: 604_800_000,
            pid_prefetch: true,
        }
    }

    /// Checks the settings and says which ownership backend they select.
    pub fn mode(&self) -> Result<Mode, CoordinatorError> {
        if self.txn_log_partitions < 1 {
            return Err(CoordinatorError::Config(
                "--txn-log-partitions must be at least 1".into(),
            ));
        }
        if self.max_transaction_timeout_ms < 1 {
            return Err(CoordinatorError::Config(
                "--max-transaction-timeout-ms must be at least 1".into(),
            ));
        }
        if self.transactional_id_expiration_ms < 1 {
            return Err(CoordinatorError::Config(
                "--transactional-id-expiration-ms must be at least 1".into(),
            ));
        }
        if self.txn_check_interval_ms == 0 || self.lease_ttl_ms < 1000 {
            return Err(CoordinatorError::Config(
                "--txn-check-interval-ms must be positive and --lease-ttl-ms at least 1000".into(),
            ));
        }
        if self.etcd_endpoints.iter().any(|e| !e.trim().is_empty()) {
            return Ok(Mode::Etcd);
        }
        match &self.data_dir {
            Some(dir) => Ok(Mode::Solo(dir.clone())),
            None => Err(CoordinatorError::Config(
                "give --etcd (cluster) or --data-dir (solo coordinator of one broker)".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Args {
        #[command(flatten)]
        config: CoordinatorConfig,
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let args = Args::try_parse_from(["idem-coordinator", "--data-dir", "d"]).expect("parses");
        let c = args.config;
        assert_eq!(c.coordinator_id, 0);
        assert_eq!(c.txn_log_partitions, 8);
        assert_eq!(c.lease_ttl_ms, 5000);
        assert_eq!(c.max_transaction_timeout_ms, 900_000);
        assert_eq!(c.txn_check_interval_ms, 1000);
        assert_eq!(c.etcd_prefix, "/idem");
        assert!(c.pid_prefetch);
        assert_eq!(c.mode().expect("solo"), Mode::Solo(PathBuf::from("d")));
    }

    #[test]
    fn etcd_selects_the_cluster_and_nothing_at_all_is_an_error() {
        let args = Args::try_parse_from([
            "idem-coordinator",
            "--etcd",
            "http://a:2379,http://b:2379",
            "--id",
            "3",
        ])
        .expect("parses");
        assert_eq!(args.config.etcd_endpoints.len(), 2);
        assert_eq!(args.config.mode().expect("etcd"), Mode::Etcd);
        let none = Args::try_parse_from(["idem-coordinator"]).expect("parses");
        assert!(matches!(
            none.config.mode(),
            Err(CoordinatorError::Config(_))
        ));
        let zero = Args::try_parse_from([
            "idem-coordinator",
            "--data-dir",
            "d",
            "--txn-log-partitions",
            "0",
        ])
        .expect("parses");
        assert!(matches!(
            zero.config.mode(),
            Err(CoordinatorError::Config(_))
        ));
    }
}
