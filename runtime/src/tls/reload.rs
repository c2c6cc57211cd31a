//! Certificate rotation without a restart: on SIGHUP the server reads its TLS files
//! again and, if they load, accepts every new connection with them and dials every new
//! connection to another member with them; connections already open keep their session. Files that do not load (a half-written certificate, a key
//! of another certificate) are refused with an error log and the old ones stay in use.
//! Each attempt counts in `idem_tls_reloads_total{result="ok"|"error"}`.

use tokio_util::sync::CancellationToken;

use crate::config_error::ConfigError;
use crate::tls::acceptor::ServerTls;

/// Reads the files again; on success every connection accepted from now on uses them.
pub fn reload(tls: &ServerTls) -> Result<(), ConfigError> {
    let loaded = tls.files().load();
    let result = match loaded {
        Ok(Some(loaded)) => {
            tls.reloaded(&loaded);
            Ok(())
        }
        // The files were given at start, so they cannot all be gone from the settings.
        Ok(None) => Err(ConfigError::new(
            crate::tls::files::CERT_FLAG,
            "no TLS files configured",
        )),
        Err(e) => Err(e),
    };
    match &result {
        Ok(()) => {
            metrics::counter!("idem_tls_reloads_total", "result" => "ok").increment(1);
            tracing::info!(files = ?tls.files(), "TLS certificate, key and CA reloaded");
        }
        Err(e) => {
            metrics::counter!("idem_tls_reloads_total", "result" => "error").increment(1);
            tracing::error!(error = %e, "TLS reload refused; serving with the previous files");
        }
    }
    result
}

/// Reloads `tls` on every SIGHUP until `stop` is cancelled. The handler is installed
/// before this returns, so a SIGHUP sent once the server is up never kills it.
pub fn reload_on_sighup(tls: ServerTls, stop: CancellationToken) -> std::io::Result<()> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while stop
            .run_until_cancelled(hangups.recv())
            .await
            .flatten()
            .is_some()
        {
            let _ = reload(&tls);
        }
    });
    Ok(())
}
