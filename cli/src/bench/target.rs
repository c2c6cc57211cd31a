//! Where a bench sends: the cluster behind `--bootstrap`, or (`--embedded`) an
//! in-process `idem dev` in a temporary directory that is removed afterwards.

use anyhow::Context;
use tempfile::TempDir;

use super::args::LoadArgs;
use idem_client::credentials::Credentials;

use crate::access::Access;

use super::embedded::{start_embedded, Embedded};
use super::run_certs;

pub struct Target {
    pub bootstrap: String,
    /// What the bench's clients present: the CLI's token and TLS settings for a
    /// cluster; none, or the run's certificates, for an embedded broker.
    pub access: Access,
    embedded: Option<(Embedded, TempDir)>,
}

/// Whether a target is dialled over TLS.
#[derive(Debug, Clone, Copy)]
pub enum TargetTls<'a> {
    /// A cluster: with the CLI's token and TLS settings, if any; an embedded broker:
    /// plaintext and open.
    AsGiven(&'a Access),
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
            let access = match tls {
                TargetTls::AsGiven(access) => access.clone(),
                TargetTls::Generated => {
                    anyhow::bail!("--compare-tls needs --embedded: it makes its own certificates")
                }
            };
            return Ok(Target {
                bootstrap: bootstrap.to_string(),
                access,
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
            access: Access {
                credentials: Credentials::none(),
                tls: certs.map(|c| c.client),
            },
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
