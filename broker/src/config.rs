//! Everything an `idem-broker` process is configured with: one typed struct filled
//! from flags, `IDEM_*` environment variables and documented defaults.

use idem_proto::transport::MAX_MESSAGE_BYTES;
use idem_runtime::config_error::{check_advertised, check_otlp_endpoint, ConfigError};
use idem_runtime::listeners::check_external;
use idem_runtime::tls::{ClientAuth, LoadedTls, TlsFiles};
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::log::FlushPolicy;
use crate::quota::QuotaTable;
use crate::retention_flags::RetentionFlags;
use crate::topic_config::TopicDefaults;
use idem_runtime::watched_file::FileContents;

/// Broker settings. Every field has a default that makes a single-node broker work.
#[derive(Debug, Clone, clap::Args)]
pub struct BrokerConfig {
    /// Broker id, unique in the cluster; also the owner recorded in producer-id blocks.
    #[arg(long = "id", env = "IDEM_BROKER_ID", default_value_t = 0)]
    pub broker_id: i32,

    /// Address the gRPC server binds.
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:9092")]
    pub listen: SocketAddr,

    /// Address clients dial (defaults to the bound address).
    #[arg(long, env = "IDEM_ADVERTISE")]
    pub advertise: Option<String>,

    /// Address the external listener binds, for clients outside the cluster's network
    /// (the host of a compose cluster): Metadata and FindCoordinator asked through it
    /// answer with every member's external address. Unset: one listener.
    #[arg(long, env = "IDEM_EXTERNAL_LISTEN")]
    pub external_listen: Option<SocketAddr>,

    /// Address clients outside dial (defaults to the external listener's bound address).
    #[arg(long, env = "IDEM_EXTERNAL_ADVERTISE")]
    pub external_advertise: Option<String>,

    /// Address the Kafka-protocol listener binds (docs/kafka.md): Kafka clients
    /// (librdkafka, the Java client) produce and fetch through it, over TLS when the
    /// broker has a certificate. A connection acts as `User:ANONYMOUS` under
    /// `--authorizer acl` unless a client certificate or SASL (PLAIN, OAUTHBEARER, with
    /// `--auth-token-file`) names someone. Unset: no Kafka listener.
    #[arg(long, env = "IDEM_KAFKA_LISTEN")]
    pub kafka_listen: Option<SocketAddr>,

    /// Address Kafka clients dial, named in the Kafka Metadata of every broker
    /// (defaults to the Kafka listener's bound address). Needs --kafka-listen.
    #[arg(long, env = "IDEM_KAFKA_ADVERTISE")]
    pub kafka_advertise: Option<String>,

    /// How long a Kafka connection whose SASL authentication failed waits before its
    /// refusal is sent and it closes (Kafka's `connection.failed.authentication.delay.ms`):
    /// a client retrying bad credentials, or guessing them, reconnects at this pace
    /// instead of as fast as it can.
    #[arg(
        long,
        env = "IDEM_KAFKA_FAILED_AUTHENTICATION_DELAY_MS",
        default_value_t = 100
    )]
    pub kafka_failed_authentication_delay_ms: u64,

    /// Address of the Prometheus endpoint (`http://ADDR/metrics`; docs/operations.md
    /// lists the metrics). Unset: no metrics are served.
    #[arg(long, env = "IDEM_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// OTLP/gRPC collector the process's spans are exported to (`http://host:4317`;
    /// docs/operations.md, "Traces"). Unset: no traces are exported.
    #[arg(long, env = "IDEM_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Directory holding partition logs, producer-state snapshots and the embedded store.
    #[arg(long, env = "IDEM_DATA_DIR", default_value = "idem-data")]
    pub data_dir: PathBuf,

    /// Size at which a partition rolls to a new segment file.
    #[arg(long, env = "IDEM_SEGMENT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub segment_bytes: u64,

    /// When appended batches reach the disk: `every-append` (group commit, the default:
    /// an acknowledged batch survives power loss), `interval:<ms>` or `never` (leave it
    /// to the OS).
    #[arg(long, env = "IDEM_FLUSH", default_value = "every-append")]
    pub flush: FlushPolicy,

    /// Size limits of requests and responses (shared with `idem dev`).
    #[command(flatten)]
    pub limits: SizeLimits,

    /// Retention defaults and the retention duty's pace (shared with `idem dev`).
    #[command(flatten)]
    pub retention: RetentionFlags,

    /// Authentication and authorization (docs/operations.md, "Authentication and
    /// authorization").
    #[command(flatten)]
    pub auth: idem_runtime::auth_flags::AuthFlags,

    #[command(flatten)]
    pub connections: idem_runtime::connection_limit::ConnectionFlags,

    /// Idle time after which a producer id's state is forgotten (Kafka's
    /// `transactional.id.expiration.ms` analogue for idempotent producers; server clock).
    #[arg(long, env = "IDEM_PRODUCER_ID_EXPIRATION_MS", default_value_t = 7 * 24 * 3600 * 1000)]
    pub producer_id_expiration_ms: i64,

    /// Where producer-id blocks are leased: `embedded` (a sled store in the data dir;
    /// single node only) or `etcd` (cluster-wide). Default: `etcd` with `--etcd`,
    /// `embedded` without; `embedded` with `--etcd` is refused (see
    /// [`BrokerConfig::pid_store`]).
    #[arg(long = "pid-store", env = "IDEM_PID_STORE")]
    pub pid_store_flag: Option<PidStoreKind>,

    /// etcd endpoints, comma separated (`http://host:2379,http://host2:2379`). With
    /// them the broker registers itself in the cluster (`{prefix}/brokers/{id}`).
    #[arg(long = "etcd", env = "IDEM_ETCD", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,

    /// Lease the next producer-id block in the background once 90% of the current one
    /// is handed out, so InitProducerId rarely waits on the store.
    #[arg(long, env = "IDEM_PID_PREFETCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub pid_prefetch: bool,

    /// How long a broker's registration in etcd outlives the broker going silent.
    #[arg(long, env = "IDEM_LEASE_TTL_MS", default_value_t = 5000)]
    pub lease_ttl_ms: u64,

    /// A follower that has not caught up with its leader for this long leaves the ISR.
    #[arg(long, env = "IDEM_REPLICA_LAG_TIME_MAX_MS", default_value_t = 10_000)]
    pub replica_lag_time_max_ms: i64,

    /// Prefix of every etcd key idem writes.
    #[arg(long, env = "IDEM_ETCD_PREFIX", default_value = "/idem")]
    pub etcd_prefix: String,

    /// Most partitions one topic may have.
    #[arg(long, env = "IDEM_MAX_PARTITIONS", default_value_t = 1000)]
    pub max_partitions_per_topic: i32,

    /// Single node only (no `--etcd`): host:port of the one transaction coordinator, which
    /// owns every transactional id (id 0, epoch 0). FindCoordinator and Metadata answer
    /// with it. Unset: FindCoordinator answers COORDINATOR_NOT_AVAILABLE. In a cluster
    /// coordinators are found in etcd and this setting is ignored.
    #[arg(long = "coordinator", env = "IDEM_COORDINATOR")]
    pub coordinator: Option<String>,

    /// Benchmark mode that DISCARDS DATA: Produce decodes and checks each batch (header,
    /// CRC, records) and answers success with made-up offsets, without writing the log
    /// or the producer state. It measures the transport limit (`idem bench produce
    /// --null`); nothing produced can be read back. Default false.
    #[arg(long, env = "IDEM_NULL_PRODUCE", default_value_t = false)]
    pub null_produce: bool,

    /// Most new producer ids one principal is handed by this broker per minute (KIP-936:
    /// a client asking for a fresh id per message fills every leader's producer state);
    /// more are refused with THROTTLING_QUOTA_EXCEEDED. Epoch bumps do not count. 0, the
    /// default: no cap.
    #[arg(
        long,
        env = "IDEM_MAX_NEW_PRODUCER_IDS_PER_MINUTE",
        default_value_t = 0
    )]
    pub max_new_producer_ids_per_minute: usize,

    /// Produce and fetch byte rates per principal, one `PRINCIPAL produce=RATE
    /// fetch=RATE` line each (`*` for everyone not listed; docs/operations.md,
    /// "Quotas"). A principal over its rate has its responses held until it is back
    /// under it, and told so in `throttle_time_ms`. Re-read within a second of a change.
    /// Unset: no quotas.
    #[arg(long, env = "IDEM_QUOTA_FILE")]
    pub quota_file: Option<PathBuf>,

    /// PEM certificate chain every gRPC listener (internal and external) presents. With
    /// it the listeners accept TLS only, and this process presents it as its client
    /// certificate to the members it connects to. Needs --tls-key and --tls-ca. Unset:
    /// plaintext. Reloaded on SIGHUP.
    #[arg(long, env = "IDEM_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert. Reloaded on SIGHUP.
    #[arg(long, env = "IDEM_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM trust anchors: the certificates of the members this process connects to, and
    /// client certificates under --tls-client-auth required, must be signed by one of
    /// them. Reloaded on SIGHUP.
    #[arg(long, env = "IDEM_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// `none` (the default: any client that completes the TLS handshake) or `required`
    /// (mutual TLS: clients must present a certificate signed by --tls-ca).
    #[arg(long, env = "IDEM_TLS_CLIENT_AUTH", default_value = "none")]
    pub tls_client_auth: ClientAuth,
}

impl BrokerConfig {
    /// The producer-id store this broker must use. Every broker of a cluster (`--etcd`)
    /// leases from etcd: a broker handing out ids from its own embedded store would give
    /// the same producer id to two producers (another broker's, a coordinator's
    /// transactional one), which then fence each other's batches and markers.
    pub fn pid_store(&self) -> Result<PidStoreKind, ConfigError> {
        match (self.pid_store_flag, self.etcd_endpoints.is_empty()) {
            (Some(PidStoreKind::Embedded), false) => Err(ConfigError::new(
                "--pid-store",
                "embedded cannot be used with --etcd: every broker of a cluster must lease \
                 producer ids from etcd, or two producers get the same id",
            )),
            (Some(PidStoreKind::Etcd), true) => Err(ConfigError::new(
                "--pid-store",
                "etcd needs --etcd http://host:2379[,...]",
            )),
            (Some(kind), _) => Ok(kind),
            (None, true) => Ok(PidStoreKind::Embedded),
            (None, false) => Ok(PidStoreKind::Etcd),
        }
    }

    /// What a topic that sets no config of its own gets.
    pub fn topic_defaults(&self) -> TopicDefaults {
        self.retention
            .topic_defaults(self.segment_bytes, self.limits.max_batch_bytes)
    }

    /// The TLS files of every listener and of the connections to other brokers.
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

    /// Refuses, naming the flag, settings the broker cannot run with; called before it
    /// opens anything.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::unless(
            self.broker_id >= 0,
            "--id",
            "must be 0 or more (-1 means \"no broker\" on the wire)",
        )?;
        check_advertised("--advertise", self.advertise.as_deref())?;
        check_otlp_endpoint("--otlp-endpoint", self.otlp_endpoint.as_deref())?;
        check_advertised("--kafka-advertise", self.kafka_advertise.as_deref())?;
        ConfigError::unless(
            self.kafka_advertise.is_none() || self.kafka_listen.is_some(),
            "--kafka-advertise",
            "needs --kafka-listen",
        )?;
        check_external(
            ("--external-listen", "--external-advertise"),
            self.listen,
            self.external_listen,
            self.external_advertise.as_deref(),
        )?;
        ConfigError::unless(
            self.segment_bytes > 0,
            "--segment-bytes",
            "must be at least 1",
        )?;
        self.limits.check()?;
        self.retention.check()?;
        ConfigError::unless(
            self.producer_id_expiration_ms > 0,
            "--producer-id-expiration-ms",
            "must be at least 1",
        )?;
        self.pid_store()?;
        self.tls()?;
        if let Some(path) = &self.quota_file {
            QuotaTable::read(path).map_err(|e| ConfigError::new("--quota-file", e.to_string()))?;
        }
        ConfigError::unless(
            self.lease_ttl_ms >= 1000,
            "--lease-ttl-ms",
            "must be at least 1000 (etcd leases last whole seconds)",
        )?;
        ConfigError::unless(
            self.replica_lag_time_max_ms > 0,
            "--replica-lag-time-max-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            !self.etcd_prefix.trim().is_empty(),
            "--etcd-prefix",
            "must not be empty",
        )?;
        ConfigError::unless(
            self.max_partitions_per_topic > 0,
            "--max-partitions-per-topic",
            "must be at least 1",
        )
    }

    /// A config for tests and `idem dev`: everything default but the data dir and address.
    pub fn single_node(data_dir: PathBuf, listen: SocketAddr) -> Self {
        BrokerConfig {
            broker_id: 0,
            listen,
            advertise: None,
            external_listen: None,
            external_advertise: None,
            kafka_listen: None,
            kafka_advertise: None,
            kafka_failed_authentication_delay_ms: 100,
            metrics_listen: None,
            otlp_endpoint: None,
            data_dir,
            segment_bytes: 64 * 1024 * 1024,
            flush: FlushPolicy::EveryAppend,
            limits: SizeLimits::default(),
            retention: RetentionFlags::default(),
            auth: Default::default(),
            connections: Default::default(),
            producer_id_expiration_ms: 7 * 24 * 3600 * 1000,
            max_partitions_per_topic: 1000,
            pid_store_flag: None,
            pid_prefetch: true,
            lease_ttl_ms: 5000,
            replica_lag_time_max_ms: 10_000,
            etcd_endpoints: Vec::new(),
            etcd_prefix: "/idem".into(),
            coordinator: None,
            null_produce: false,
            max_new_producer_ids_per_minute: 0,
            quota_file: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_client_auth: ClientAuth::None,
        }
    }
}

/// Default of `--max-batch-bytes`: 1 MiB.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Default of `--max-request-bytes`: 8 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;
/// Default of `--max-fetch-bytes`: 8 MiB.
pub const DEFAULT_MAX_FETCH_BYTES: usize = 8 * 1024 * 1024;

/// The size limits a broker enforces, one set of flags for `idem-broker` and `idem dev`
/// (docs/protocol.md, "Size limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct SizeLimits {
    /// Largest record batch accepted in one partition of a Produce request
    /// (MESSAGE_TOO_LARGE beyond it).
    #[arg(long, env = "IDEM_MAX_BATCH_BYTES", default_value_t = DEFAULT_MAX_BATCH_BYTES)]
    pub max_batch_bytes: usize,

    /// Largest gRPC request accepted; larger ones are refused before they are decoded
    /// (gRPC status RESOURCE_EXHAUSTED).
    #[arg(long, env = "IDEM_MAX_REQUEST_BYTES", default_value_t = DEFAULT_MAX_REQUEST_BYTES)]
    pub max_request_bytes: usize,

    /// Most bytes of records a Fetch response carries, whatever the request asks.
    #[arg(long, env = "IDEM_MAX_FETCH_BYTES", default_value_t = DEFAULT_MAX_FETCH_BYTES)]
    pub max_fetch_bytes: usize,
}

impl SizeLimits {
    /// Room left in an answer for what is not records (per-partition framing, offsets,
    /// error messages).
    const FRAMING_BYTES: usize = 1024 * 1024;

    /// Refuses limits under which an answer could outgrow what every idem client
    /// decodes (`idem_proto::transport::MAX_MESSAGE_BYTES`): a Fetch carries up to
    /// `max_fetch_bytes` of records, or one whole batch (up to `max_batch_bytes`) when
    /// that alone is larger.
    pub fn check(&self) -> Result<(), ConfigError> {
        let ceiling = MAX_MESSAGE_BYTES - Self::FRAMING_BYTES;
        for (flag, value) in [
            ("--max-fetch-bytes", self.max_fetch_bytes),
            ("--max-batch-bytes", self.max_batch_bytes),
        ] {
            if value == 0 || value > ceiling {
                return Err(ConfigError::new(
                    flag,
                    format!(
                        "{value} must be between 1 and {ceiling} (the largest gRPC message \
                         idem clients decode, {MAX_MESSAGE_BYTES}, less 1 MiB of framing)"
                    ),
                ));
            }
        }
        if self.max_request_bytes == 0 || self.max_request_bytes > MAX_MESSAGE_BYTES {
            return Err(ConfigError::new(
                "--max-request-bytes",
                format!(
                    "{} must be between 1 and {MAX_MESSAGE_BYTES}",
                    self.max_request_bytes
                ),
            ));
        }
        Ok(())
    }
}

impl Default for SizeLimits {
    fn default() -> Self {
        SizeLimits {
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_fetch_bytes: DEFAULT_MAX_FETCH_BYTES,
        }
    }
}

/// Which store producer-id blocks are leased from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PidStoreKind {
    /// sled in the data dir: `idem dev` and single-node brokers.
    Embedded,
    /// etcd, shared by every broker and coordinator of a cluster.
    Etcd,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_with_etcd_leases_producer_ids_from_etcd_and_never_from_its_own_store() {
        let with = |flag, etcd: bool| BrokerConfig {
            pid_store_flag: flag,
            etcd_endpoints: if etcd {
                vec!["http://127.0.0.1:2379".into()]
            } else {
                Vec::new()
            },
            ..BrokerConfig::single_node(PathBuf::from("d"), ([127, 0, 0, 1], 0).into())
        };
        assert_eq!(with(None, true).pid_store(), Ok(PidStoreKind::Etcd));
        assert_eq!(with(None, false).pid_store(), Ok(PidStoreKind::Embedded));
        assert_eq!(
            with(Some(PidStoreKind::Etcd), true).pid_store(),
            Ok(PidStoreKind::Etcd)
        );
        let refused = with(Some(PidStoreKind::Embedded), true)
            .pid_store()
            .expect_err("two stores would hand out the same ids");
        assert_eq!(refused.flag, "--pid-store");
        assert!(refused
            .to_string()
            .contains("--pid-store embedded cannot be used with --etcd"));
        assert!(with(Some(PidStoreKind::Etcd), false).pid_store().is_err());
    }

    fn single_node() -> BrokerConfig {
        BrokerConfig::single_node(PathBuf::from("d"), ([127, 0, 0, 1], 0).into())
    }

    #[test]
    fn the_defaults_are_valid_and_each_bad_setting_is_refused_by_its_flag() {
        assert_eq!(single_node().validate(), Ok(()));
        let cases: Vec<(&str, BrokerConfig)> = vec![
            (
                "--id",
                BrokerConfig {
                    broker_id: -1,
                    ..single_node()
                },
            ),
            (
                "--advertise",
                BrokerConfig {
                    advertise: Some("broker-0".into()),
                    ..single_node()
                },
            ),
            (
                "--kafka-advertise",
                BrokerConfig {
                    kafka_advertise: Some("broker-0:9094".into()),
                    ..single_node()
                },
            ),
            (
                "--kafka-advertise",
                BrokerConfig {
                    kafka_listen: Some("127.0.0.1:9094".parse().expect("address")),
                    kafka_advertise: Some("broker-0".into()),
                    ..single_node()
                },
            ),
            (
                "--segment-bytes",
                BrokerConfig {
                    segment_bytes: 0,
                    ..single_node()
                },
            ),
            (
                "--max-batch-bytes",
                BrokerConfig {
                    limits: SizeLimits {
                        max_batch_bytes: 0,
                        ..SizeLimits::default()
                    },
                    ..single_node()
                },
            ),
            (
                "--producer-id-expiration-ms",
                BrokerConfig {
                    producer_id_expiration_ms: 0,
                    ..single_node()
                },
            ),
            (
                "--pid-store",
                BrokerConfig {
                    pid_store_flag: Some(PidStoreKind::Etcd),
                    ..single_node()
                },
            ),
            (
                "--lease-ttl-ms",
                BrokerConfig {
                    lease_ttl_ms: 999,
                    ..single_node()
                },
            ),
            (
                "--replica-lag-time-max-ms",
                BrokerConfig {
                    replica_lag_time_max_ms: 0,
                    ..single_node()
                },
            ),
            (
                "--etcd-prefix",
                BrokerConfig {
                    etcd_prefix: " ".into(),
                    ..single_node()
                },
            ),
            (
                "--max-partitions-per-topic",
                BrokerConfig {
                    max_partitions_per_topic: 0,
                    ..single_node()
                },
            ),
        ];
        for (flag, config) in cases {
            let refused = config.validate().expect_err(flag);
            assert_eq!(refused.flag, flag, "{refused}");
        }
    }

    #[test]
    fn the_default_limits_pass_and_limits_a_client_could_not_decode_are_refused() {
        assert_eq!(SizeLimits::default().check(), Ok(()));
        let too_big = MAX_MESSAGE_BYTES;
        for limits in [
            SizeLimits {
                max_fetch_bytes: too_big,
                ..SizeLimits::default()
            },
            SizeLimits {
                max_batch_bytes: too_big,
                ..SizeLimits::default()
            },
            SizeLimits {
                max_fetch_bytes: 0,
                ..SizeLimits::default()
            },
            SizeLimits {
                max_request_bytes: too_big + 1,
                ..SizeLimits::default()
            },
        ] {
            let refused = limits.check().expect_err("refused");
            assert!(
                refused.flag.starts_with("--max-"),
                "names the flag: {refused}"
            );
        }
        let largest = SizeLimits {
            max_fetch_bytes: MAX_MESSAGE_BYTES - 1024 * 1024,
            max_batch_bytes: MAX_MESSAGE_BYTES - 1024 * 1024,
            max_request_bytes: MAX_MESSAGE_BYTES,
        };
        assert_eq!(largest.check(), Ok(()));
    }
}
