//! `idem dev`: a whole idem in one process on the embedded store, for trying idem and
//! for examples: one broker and one transaction coordinator (solo mode: it owns every
//! partition of `__transaction_state`). Ctrl-C stops both cleanly; a restart on the
//! same data dir keeps the data and the transaction state. Open by default (said at
//! start); `--authorizer acl` checks every request against ACLs kept in the data dir
//! (`acls/`), changed by `idem acl` with effect before it answers.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use idem_broker::config::{BrokerConfig, SizeLimits};
use idem_broker::retention_flags::RetentionFlags;
use idem_broker::server::BoundBroker;
use idem_coordinator::config::CoordinatorConfig;
use idem_coordinator::server::BoundCoordinator;
use idem_runtime::acl::{AuthorizerKind, EmbeddedAclStore};
use idem_runtime::auth_flags::{AuthFlags, DevAuth};
use idem_runtime::tls::ClientAuth;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Where logs, producer state and the embedded store live.
    #[arg(long, env = "IDEM_DATA_DIR", default_value = "idem-data")]
    data_dir: PathBuf,
    /// Address the broker serves on.
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// Address the transaction coordinator serves on.
    #[arg(
        long,
        env = "IDEM_COORDINATOR_LISTEN",
        default_value = "127.0.0.1:9093"
    )]
    coordinator_listen: SocketAddr,
    /// Address the broker's Kafka-protocol listener serves on (docs/kafka.md): kcat,
    /// confluent-kafka and other Kafka clients produce and fetch through it.
    #[arg(long, env = "IDEM_KAFKA_LISTEN", default_value = "127.0.0.1:9094")]
    kafka_listen: SocketAddr,
    /// No Kafka-protocol listener.
    #[arg(long, env = "IDEM_NO_KAFKA", default_value_t = false)]
    no_kafka: bool,
    /// The broker's size limits: the same flags, environment and defaults as
    /// `idem-broker`.
    #[command(flatten)]
    limits: SizeLimits,
    /// Retention defaults and pace: the same flags, environment and defaults as
    /// `idem-broker`.
    #[command(flatten)]
    retention: RetentionFlags,
    /// With the global --tls-cert, --tls-key and --tls-ca (which here are the servers'
    /// files): `required` makes both servers ask clients for a certificate signed by
    /// --tls-ca (mutual TLS). Default `none`.
    #[arg(long, env = "IDEM_TLS_CLIENT_AUTH", default_value = "none")]
    tls_client_auth: ClientAuth,
    /// `none` (the default: every request is allowed) or `acl`: every request of both
    /// servers is checked against the ACLs kept in the data dir, which `idem acl
    /// add|remove` change with effect before they answer.
    #[arg(long, env = "IDEM_AUTHORIZER", default_value = "none")]
    authorizer: AuthorizerKind,
    /// Principals allowed everything whatever the ACLs say, comma-separated (e.g.
    /// `User:admin`, who can then add the others' ACLs).
    #[arg(long, env = "IDEM_SUPER_USERS", value_delimiter = ',')]
    super_users: Vec<String>,
    /// Bearer tokens accepted, one `PRINCIPAL TOKEN` line each, as `idem-broker`'s;
    /// re-read when the file changes.
    #[arg(long, env = "IDEM_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
}

/// The servers' TLS files of `idem dev`: the CLI's global TLS flags.
#[derive(Debug, Default)]
pub struct DevTls {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
}

pub async fn run(args: DevArgs, tls: DevTls) -> anyhow::Result<()> {
    // Opened whatever the authorizer: `idem acl add` against an open dev stores ACLs
    // that a start with --authorizer acl enforces.
    let acls_dir = args.data_dir.join("acls");
    let acls = EmbeddedAclStore::open(&acls_dir)
        .with_context(|| format!("opening the ACL store in {}", acls_dir.display()))?;
    let auth = AuthFlags {
        authorizer: args.authorizer,
        super_users: args.super_users.clone(),
        auth_token_file: args.auth_token_file.clone(),
        auth_token: None,
        dev: Some(DevAuth::new(acls)),
    };
    let config = BrokerConfig {
        auth: auth.clone(),
        limits: args.limits,
        retention: args.retention,
        tls_cert: tls.cert.clone(),
        tls_key: tls.key.clone(),
        tls_ca: tls.ca.clone(),
        tls_client_auth: args.tls_client_auth,
        kafka_listen: (!args.no_kafka).then_some(args.kafka_listen),
        ..BrokerConfig::single_node(args.data_dir.clone(), args.listen)
    };
    // One Ctrl-C stops both servers: each gets a child of the process's root token.
    let shutdown = idem_runtime::shutdown::on_signal();
    let broker = BoundBroker::bind(config, shutdown.child_token())
        .await
        .with_context(|| format!("starting the dev broker in {}", args.data_dir.display()))?;
    let addr = broker.local_addr();
    let kafka_addr = broker.kafka_addr();
    let kcat = kcat_command(&tls, args.auth_token_file.is_some());
    let sasl_note = args.auth_token_file.as_ref().map(|file| {
        format!(
            "  (SASL/PLAIN: NAME TOKEN is a line of {}; a client without SASL is User:ANONYMOUS)",
            file.display()
        )
    });
    let coordinator_config = CoordinatorConfig {
        tls_cert: tls.cert,
        tls_key: tls.key,
        tls_ca: tls.ca,
        tls_client_auth: args.tls_client_auth,
        auth,
        ..CoordinatorConfig::solo(
            args.data_dir.join("coordinator"),
            args.coordinator_listen,
            addr.to_string(),
        )
    };
    let coordinator = BoundCoordinator::bind(coordinator_config, None, shutdown.child_token())
        .await
        .context("starting the dev transaction coordinator")?;
    let coordinator_addr = coordinator.local_addr();
    let broker = broker.with_coordinator(Some(coordinator_addr.to_string()));
    let coordinator_task = tokio::spawn(coordinator.serve());
    let data_dir = args.data_dir.clone();
    let authorization = authorization_line(&args, &acls_dir);
    // Announced once the broker serves its RPCs: the commands below work from then on.
    let announce = move || {
        println!(
            "idem dev: broker listening on {addr}, transaction coordinator on {coordinator_addr} (data in {})",
            data_dir.display()
        );
        println!("  idem --bootstrap {addr} topic create demo --partitions 3");
        println!("  seq 1 5 | idem --bootstrap {addr} produce demo");
        println!("  seq 1 5 | idem --bootstrap {addr} produce demo --transactional-id demo-txn");
        println!("  idem --bootstrap {addr} consume demo --from-beginning --max-messages 10");
        if let Some(kafka) = kafka_addr {
            println!("kafka listener on {kafka}");
            println!("  {kcat} -b {kafka} -L");
            println!("  seq 1 5 | {kcat} -b {kafka} -P -t demo");
            println!("  {kcat} -b {kafka} -C -t demo -e");
            if let Some(note) = &sasl_note {
                println!("{note}");
            }
        }
        println!("Ctrl-C stops it; the data stays for the next start.");
        println!("{authorization}");
    };
    broker
        .serve_announcing(announce)
        .await
        .context("serving the broker")?;
    coordinator_task
        .await
        .context("coordinator task")?
        .context("serving the coordinator")?;
    println!("idem dev: stopped cleanly");
    Ok(())
}

/// The kcat of the banner's Kafka examples. A TLS broker's Kafka listener speaks TLS
/// only (docs/kafka.md): kcat must too. With a token file (`sasl`) kcat authenticates
/// with SASL/PLAIN, a principal's name and token from the file; placeholders, never a
/// token read from the file, so the banner holds no secret.
fn kcat_command(tls: &DevTls, sasl: bool) -> String {
    let protocol = match (tls.cert.is_some(), sasl) {
        (false, false) => None,
        (false, true) => Some("sasl_plaintext"),
        (true, false) => Some("ssl"),
        (true, true) => Some("sasl_ssl"),
    };
    let mut kcat = "kcat".to_string();
    if let Some(protocol) = protocol {
        kcat.push_str(&format!(" -X security.protocol={protocol}"));
    }
    if let (Some(_), Some(ca)) = (&tls.cert, &tls.ca) {
        kcat.push_str(&format!(" -X ssl.ca.location={}", ca.display()));
    }
    if sasl {
        kcat.push_str(" -X sasl.mechanisms=PLAIN -X sasl.username=NAME -X sasl.password=TOKEN");
    }
    kcat
}

/// The banner's last line: whether requests are checked, and how to change that.
fn authorization_line(args: &DevArgs, acls_dir: &std::path::Path) -> String {
    match args.authorizer {
        AuthorizerKind::None => "Authorization: open, every request is allowed (--authorizer acl \
             checks ACLs; docs/operations.md)."
            .to_string(),
        AuthorizerKind::Acl => format!(
            "Authorization: ACLs, every request is checked against the ACLs in {} \
             (tokens: {}; super users: {}); `idem --auth-token FILE acl add ...` changes \
             them at once.",
            acls_dir.display(),
            args.auth_token_file
                .as_ref()
                .map_or("none, every client is User:ANONYMOUS".to_string(), |f| f
                    .display()
                    .to_string()),
            if args.super_users.is_empty() {
                "none".to_string()
            } else {
                args.super_users.join(",")
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use idem_broker::config::SizeLimits;

    use super::DevArgs;

    #[derive(Parser)]
    struct Dev {
        #[command(flatten)]
        args: DevArgs,
    }

    #[derive(Parser)]
    struct Broker {
        #[command(flatten)]
        config: idem_broker::config::BrokerConfig,
    }

    #[test]
    fn given_tls_or_a_token_file_then_the_kcat_hint_speaks_ssl_or_sasl() {
        use super::{kcat_command, DevTls};
        let plain = DevTls::default();
        let tls = DevTls {
            cert: Some("server.crt".into()),
            key: Some("server.key".into()),
            ca: Some("ca.crt".into()),
        };
        assert_eq!(kcat_command(&plain, false), "kcat");
        assert_eq!(
            kcat_command(&tls, false),
            "kcat -X security.protocol=ssl -X ssl.ca.location=ca.crt"
        );
        let sasl = " -X sasl.mechanisms=PLAIN -X sasl.username=NAME -X sasl.password=TOKEN";
        assert_eq!(
            kcat_command(&plain, true),
            format!("kcat -X security.protocol=sasl_plaintext{sasl}")
        );
        assert_eq!(
            kcat_command(&tls, true),
            format!("kcat -X security.protocol=sasl_ssl -X ssl.ca.location=ca.crt{sasl}")
        );
    }

    #[test]
    fn given_no_flags_then_dev_and_the_broker_have_the_same_size_limits() {
        let dev = Dev::try_parse_from(["dev"]).expect("parses");
        let broker = Broker::try_parse_from(["broker"]).expect("parses");
        assert_eq!(dev.args.limits, broker.config.limits);
        assert_eq!(dev.args.limits, SizeLimits::default());
    }

    #[test]
    fn given_no_flags_then_dev_serves_kafka_on_9094_and_no_kafka_turns_it_off() {
        let dev = Dev::try_parse_from(["dev"]).expect("parses");
        assert_eq!(dev.args.kafka_listen.to_string(), "127.0.0.1:9094");
        assert!(!dev.args.no_kafka);
        let off = Dev::try_parse_from(["dev", "--no-kafka"]).expect("parses");
        assert!(off.args.no_kafka);
        // The broker alone serves no Kafka unless asked.
        let broker = Broker::try_parse_from(["broker"]).expect("parses");
        assert_eq!(broker.config.kafka_listen, None);
    }

    #[test]
    fn given_size_flags_then_dev_takes_them_as_the_broker_does() {
        let flags = [
            "--max-batch-bytes",
            "1000",
            "--max-request-bytes",
            "2000",
            "--max-fetch-bytes",
            "3000",
        ];
        let dev = Dev::try_parse_from(["dev"].into_iter().chain(flags)).expect("parses");
        let broker = Broker::try_parse_from(["broker"].into_iter().chain(flags)).expect("parses");
        let wanted = SizeLimits {
            max_batch_bytes: 1000,
            max_request_bytes: 2000,
            max_fetch_bytes: 3000,
        };
        assert_eq!(dev.args.limits, wanted);
        assert_eq!(broker.config.limits, wanted);
    }
}
