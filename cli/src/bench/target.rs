//! Where a bench sends: the cluster behind `--bootstrap`, or (`--embedded`) an
//! in-process `idem dev` in a temporary directory that is removed afterwards.

use anyhow::Context;
use tempfile::TempDir;

use super::args::LoadArgs;
use idem_client::TlsConfig;

use super::embedded::{start_embedded, Embedded};
use super::run_certs;

pub struct Target {
    pub bootstrap: String,
    /// How the bench's clients dial it (`None`: plaintext).
    pub tls: Option<TlsConfig>,
    embedded: Option<(Embedded, TempDir)>,
}

/// Whether a target is dialled over TLS.
#[derive(Debug, Clone, Copy)]
pub enum TargetTls<'a> {
    /// A cluster: with the CLI's TLS settings, if any; an embedded broker: plaintext.
    AsGiven(Option<&'a TlsConfig>),
    /// An embedded broker and coordinator with mutual TLS, on certificates made for the
    /// run (`--compare-tls`).
    Generated,
}

impl Target {
    pub async fn open(
        load: &LoadArgs,
        bootstrap: &str,
        null_produce: bool,
        tls: TargetTls<'_>,
    ) -> anyhow::Result<Target> {
        if !load.embedded {
            let tls = match tls {
                TargetTls::AsGiven(tls) => tls.cloned(),
                TargetTls::Generated => {
                    anyhow::bail!("--compare-tls needs --embedded: it makes its own certificates")
                }
            };
            return Ok(Target {
                bootstrap: bootstrap.to_string(),
                tls,
                embedded: None,
            });
        }
        let mut builder = tempfile::Builder::new();
        builder.prefix("idem-bench-");
        let dir = match &load.data_dir {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .context("creating the embedded broker's temporary directory")?;
        let certs = match tls {
            TargetTls::Generated => Some(run_certs::generate(dir.path())?),
            TargetTls::AsGiven(_) => None,
        };
        let embedded = start_embedded(dir.path(), null_produce, load.flush, certs.as_ref()).await?;
        Ok(Target {
            bootstrap: embedded.broker.to_string(),
            tls: certs.map(|c| c.client),
            embedded: Some((embedded, dir)),
        })
    }

    pub fn describe(&self) -> String {
        match &self.embedded {
            Some((embedded, dir)) => format!(
                "embedded idem dev (broker {}, {}, data in {})",
                embedded.broker,
                embedded
                    .coordinator
                    .map_or("no coordinator (null produce)".to_string(), |a| format!(
                        "coordinator {a}"
                    )),
                dir.path().display()
            ),
            None => format!("cluster at {}", self.bootstrap),
        }
    }

    /// Stops an embedded broker and removes its data; nothing to do for a cluster.
    pub async fn close(self) {
        if let Some((embedded, dir)) = self.embedded {
            embedded.stop().await;
            if let Err(e) = dir.close() {
                tracing::warn!(error = %e, "could not remove the embedded broker's data");
            }
        }
    }
}
