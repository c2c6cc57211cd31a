//! Where a bench sends: the cluster behind `--bootstrap`, or (`--embedded`) an
//! in-process `idem dev` in a temporary directory that is removed afterwards.

use anyhow::Context;
use tempfile::TempDir;

use super::args::LoadArgs;
use super::embedded::{start_embedded, Embedded};

pub struct Target {
    pub bootstrap: String,
    embedded: Option<(Embedded, TempDir)>,
}

impl Target {
    pub async fn open(
        load: &LoadArgs,
        bootstrap: &str,
        null_produce: bool,
    ) -> anyhow::Result<Target> {
        if !load.embedded {
            return Ok(Target {
                bootstrap: bootstrap.to_string(),
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
        let embedded = start_embedded(dir.path(), null_produce, load.flush).await?;
        Ok(Target {
            bootstrap: embedded.broker.to_string(),
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
