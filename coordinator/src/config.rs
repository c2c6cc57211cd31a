//! Everything an `idem-coordinator` process is configured with: one typed struct filled
//! from flags, `IDEM_*` environment variables and documented defaults. With `--etcd` the
//! coordinator joins a cluster (ownership by etcd leases); without it, `--data-dir`
//! makes it the solo coordinator of a single-node broker (it owns every partition).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use idem_runtime::config_error::{check_advertised, check_otlp_endpoint, ConfigError};
use idem_runtime::listeners::check_external;
use idem_runtime::metrics_endpoint::GAUGE_IDLE_TIMEOUT;
use idem_runtime::tls::{ClientAuth, LoadedTls, TlsFiles};

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

    /// Address the external listener binds, for clients outside the cluster's network
    /// (the host of a compose cluster): FindCoordinator asked through it answers with
    /// external addresses. Unset: one listener.
    #[arg(long, env = "IDEM_COORDINATOR_EXTERNAL_LISTEN")]
    pub external_listen: Option<SocketAddr>,

    /// Address clients outside dial (defaults to the external listener's bound address).
    #[arg(long, env = "IDEM_COORDINATOR_EXTERNAL_ADVERTISE")]
    pub external_advertise: Option<String>,

    /// Address of the Prometheus endpoint (`http://ADDR/metrics`; docs/operations.md).
    /// Unset: no metrics are served.
    #[arg(long, env = "IDEM_COORDINATOR_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// OTLP/gRPC collector the process's spans are exported to (`http://host:4317`;
    /// docs/operations.md, "Traces"). Unset: no traces are exported.
    #[arg(long, env = "IDEM_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

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

    /// A consumer group member that sends no heartbeat for this long is removed from
    /// its group (and a static member that left for a restart, -2, once this long
    /// passed without it coming back); its partitions go to the others.
    #[arg(long, env = "IDEM_GROUP_SESSION_TIMEOUT_MS", default_value_t = 45_000)]
    pub group_session_timeout_ms: u64,

    /// The committed offsets of a consumer group with no members expire this long after
    /// the group became empty (or after the offset was committed, if later); a group
    /// left with no offsets is removed (Kafka's `offsets.retention.minutes`, 7 days).
    #[arg(
        long,
        env = "IDEM_GROUP_OFFSETS_RETENTION_MS",
        default_value_t = 604_800_000
    )]
    pub group_offsets_retention_ms: u64,

    /// How often each owned slice's groups are checked for expired offsets (Kafka's
    /// `offsets.retention.check.interval.ms`).
    #[arg(
        long,
        env = "IDEM_GROUP_OFFSETS_RETENTION_CHECK_INTERVAL_MS",
        default_value_t = 600_000
    )]
    pub group_offsets_retention_check_interval_ms: u64,

    /// How often the consumer lag gauge (`idem_consumer_group_lag`) is measured, when
    /// metrics are served: one ListOffsets per committed partition of the owned groups
    /// each time. Shorter than the exporter keeps an unset gauge (60 s).
    #[arg(long, env = "IDEM_GROUP_LAG_INTERVAL_MS", default_value_t = 15_000)]
    pub group_lag_interval_ms: u64,

    /// Lease the next producer-id block in the background once 90% of the current one
    /// is handed out.
    #[arg(long, env = "IDEM_PID_PREFETCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub pid_prefetch: bool,

    /// Authentication and authorization (docs/operations.md, "Authentication and
    /// authorization"); `--auth-token` is presented on this coordinator's calls to
    /// brokers (the transaction log, markers, producer ids).
    #[command(flatten)]
    pub auth: idem_runtime::auth_flags::AuthFlags,

    #[command(flatten)]
    pub connections: idem_runtime::connection_limit::ConnectionFlags,

    /// PEM certificate chain every gRPC listener (internal and external) presents. With
    /// it the listeners accept TLS only, and the coordinator presents it as its client
    /// certificate to the brokers. Needs --tls-key and --tls-ca. Unset: plaintext.
    /// Reloaded on SIGHUP.
    #[arg(long, env = "IDEM_COORDINATOR_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert. Reloaded on SIGHUP.
    #[arg(long, env = "IDEM_COORDINATOR_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM trust anchors: the brokers' certificates, and client certificates under
    /// --tls-client-auth required, must be signed by one of them. Reloaded on SIGHUP.
    #[arg(long, env = "IDEM_COORDINATOR_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// `none` (the default: any client that completes the TLS handshake) or `required`
    /// (mutual TLS: clients must present a certificate signed by --tls-ca).
    #[arg(long, env = "IDEM_COORDINATOR_TLS_CLIENT_AUTH", default_value = "none")]
    pub tls_client_auth: ClientAuth,
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
            external_listen: None,
            external_advertise: None,
            metrics_listen: None,
            otlp_endpoint: None,
            bootstrap,
            etcd_endpoints: Vec::new(),
            etcd_prefix: "/idem".into(),
            data_dir: Some(data_dir),
            txn_log_partitions: 8,
            lease_ttl_ms: 5000,
            max_transaction_timeout_ms: 900_000,
            txn_check_interval_ms: 1000,
            transactional_id_expiration_ms: 604_800_000,
            group_session_timeout_ms: 45_000,
            group_offsets_retention_ms: 604_800_000,
            group_offsets_retention_check_interval_ms: 600_000,
            group_lag_interval_ms: 15_000,
            pid_prefetch: true,
            auth: Default::default(),
            connections: Default::default(),
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_client_auth: ClientAuth::None,
        }
    }

    /// The TLS files of every listener and of the connections to the brokers.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            ca: self.tls_ca.clone(),
            client_auth: self.tls_client_auth,
        }
    }

    /// The TLS files loaded and checked (`None`: plaintext); an error names the flag.
    pub fn tls(&self) -> Result<Option<LoadedTls>, ConfigError> {
        self.tls_files().load()
    }

    /// Refuses, naming the flag, settings the coordinator cannot run with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::unless(self.coordinator_id >= 0, "--id", "must be 0 or more")?;
        check_advertised("--advertise", self.advertise.as_deref())?;
        check_otlp_endpoint("--otlp-endpoint", self.otlp_endpoint.as_deref())?;
        check_external(
            ("--external-listen", "--external-advertise"),
            self.listen,
            self.external_listen,
            self.external_advertise.as_deref(),
        )?;
        ConfigError::unless(
            self.bootstrap.split(',').any(|b| !b.trim().is_empty()),
            "--bootstrap",
            "must name at least one broker (host:port)",
        )?;
        self.tls()?;
        ConfigError::unless(
            self.txn_log_partitions >= 1,
            "--txn-log-partitions",
            "must be at least 1",
        )?;
        ConfigError::unless(
            self.lease_ttl_ms >= 1000,
            "--lease-ttl-ms",
            "must be at least 1000 (etcd leases last whole seconds)",
        )?;
        ConfigError::unless(
            self.max_transaction_timeout_ms >= 1,
            "--max-transaction-timeout-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            self.txn_check_interval_ms >= 1,
            "--txn-check-interval-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            self.transactional_id_expiration_ms >= 1,
            "--transactional-id-expiration-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            self.group_session_timeout_ms >= 1,
            "--group-session-timeout-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            self.group_offsets_retention_ms >= 1,
            "--group-offsets-retention-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            Duration::from_millis(self.group_lag_interval_ms) < GAUGE_IDLE_TIMEOUT
                && self.group_lag_interval_ms >= 1,
            "--group-lag-interval-ms",
            "must be at least 1 and under 60000 (the exporter drops a gauge unset for 60 s)",
        )?;
        ConfigError::unless(
            self.group_offsets_retention_check_interval_ms >= 1,
            "--group-offsets-retention-check-interval-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            !self.etcd_prefix.trim().is_empty(),
            "--etcd-prefix",
            "must not be empty",
        )
    }

    /// Checks the settings and says which ownership backend they select.
    pub fn mode(&self) -> Result<Mode, CoordinatorError> {
        self.validate()?;
        if self.etcd_endpoints.iter().any(|e| !e.trim().is_empty()) {
            return Ok(Mode::Etcd);
        }
        match &self.data_dir {
            Some(dir) => Ok(Mode::Solo(dir.clone())),
            None => Err(ConfigError::new(
                "--etcd",
                "or --data-dir is needed: --etcd to join a cluster, --data-dir for the solo \
                 coordinator of one broker",
            )
            .into()),
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
        assert_eq!(c.group_session_timeout_ms, 45_000);
        assert_eq!(c.group_offsets_retention_ms, 604_800_000);
        assert_eq!(c.group_offsets_retention_check_interval_ms, 600_000);
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
            Err(CoordinatorError::InvalidConfig(ConfigError {
                flag: "--etcd",
                ..
            }))
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
            Err(CoordinatorError::InvalidConfig(ConfigError {
                flag: "--txn-log-partitions",
                ..
            }))
        ));
    }

    #[test]
    fn each_bad_setting_is_refused_by_its_flag() {
        let solo = || {
            CoordinatorConfig::solo(
                PathBuf::from("d"),
                ([127, 0, 0, 1], 0).into(),
                "127.0.0.1:9092".into(),
            )
        };
        assert_eq!(solo().validate(), Ok(()));
        let cases: Vec<(&str, CoordinatorConfig)> = vec![
            (
                "--id",
                CoordinatorConfig {
                    coordinator_id: -2,
                    ..solo()
                },
            ),
            (
                "--advertise",
                CoordinatorConfig {
                    advertise: Some("c:".into()),
                    ..solo()
                },
            ),
            (
                "--bootstrap",
                CoordinatorConfig {
                    bootstrap: " , ".into(),
                    ..solo()
                },
            ),
            (
                "--txn-log-partitions",
                CoordinatorConfig {
                    txn_log_partitions: 0,
                    ..solo()
                },
            ),
            (
                "--lease-ttl-ms",
                CoordinatorConfig {
                    lease_ttl_ms: 500,
                    ..solo()
                },
            ),
            (
                "--max-transaction-timeout-ms",
                CoordinatorConfig {
                    max_transaction_timeout_ms: 0,
                    ..solo()
                },
            ),
            (
                "--txn-check-interval-ms",
                CoordinatorConfig {
                    txn_check_interval_ms: 0,
                    ..solo()
                },
            ),
            (
                "--transactional-id-expiration-ms",
                CoordinatorConfig {
                    transactional_id_expiration_ms: 0,
                    ..solo()
                },
            ),
            (
                "--group-session-timeout-ms",
                CoordinatorConfig {
                    group_session_timeout_ms: 0,
                    ..solo()
                },
            ),
            (
                "--group-offsets-retention-ms",
                CoordinatorConfig {
                    group_offsets_retention_ms: 0,
                    ..solo()
                },
            ),
            (
                "--group-offsets-retention-check-interval-ms",
                CoordinatorConfig {
                    group_offsets_retention_check_interval_ms: 0,
                    ..solo()
                },
            ),
            (
                "--group-lag-interval-ms",
                CoordinatorConfig {
                    group_lag_interval_ms: 0,
                    ..solo()
                },
            ),
            (
                "--group-lag-interval-ms",
                CoordinatorConfig {
                    group_lag_interval_ms: 60_000,
                    ..solo()
                },
            ),
            (
                "--etcd-prefix",
                CoordinatorConfig {
                    etcd_prefix: String::new(),
                    ..solo()
                },
            ),
        ];
        for (flag, config) in cases {
            let refused = config.validate().expect_err(flag);
            assert_eq!(refused.flag, flag, "{refused}");
        }
    }
}
