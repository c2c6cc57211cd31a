//! A server setting refused at start, naming the flag, so that an operator reads which
//! one to change rather than a failure somewhere later.

/// One refused setting: the flag (`--lease-ttl-ms`) and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {problem}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub problem: String,
}

impl ConfigError {
    pub fn new(flag: &'static str, problem: impl Into<String>) -> Self {
        ConfigError {
            flag,
            problem: problem.into(),
        }
    }

    /// `Err` naming `flag` unless `ok`.
    pub fn unless(ok: bool, flag: &'static str, problem: &str) -> Result<(), ConfigError> {
        if ok {
            Ok(())
        } else {
            Err(ConfigError::new(flag, problem))
        }
    }
}

/// Refuses an advertised address that is empty or has no port: clients would dial it.
pub fn check_advertised(flag: &'static str, address: Option<&str>) -> Result<(), ConfigError> {
    let Some(address) = address else {
        return Ok(());
    };
    let port = address.rsplit_once(':').map(|(_, port)| port);
    match port.map(str::parse::<u16>) {
        Some(Ok(_)) => Ok(()),
        _ => Err(ConfigError::new(
            flag,
            format!("{address:?} is not host:port (clients dial it as given)"),
        )),
    }
}

/// Refuses an OTLP endpoint that is not an `http://` or `https://` URL with a host
/// (the exporter would fail on its first export, long after the start looked fine).
pub fn check_otlp_endpoint(flag: &'static str, endpoint: Option<&str>) -> Result<(), ConfigError> {
    let Some(endpoint) = endpoint else {
        return Ok(());
    };
    let uri = endpoint.parse::<http::Uri>().ok();
    let usable = uri.is_some_and(|u| {
        matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some_and(|h| !h.is_empty())
    });
    ConfigError::unless(
        usable,
        flag,
        &format!(
            "{endpoint:?} is not an http:// or https:// URL of a collector (http://host:4317)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_otlp_endpoint_must_be_an_http_url_with_a_host() {
        assert_eq!(check_otlp_endpoint("--otlp-endpoint", None), Ok(()));
        for good in ["http://127.0.0.1:4317", "https://collector.example:4317"] {
            assert_eq!(
                check_otlp_endpoint("--otlp-endpoint", Some(good)),
                Ok(()),
                "{good}"
            );
        }
        for bad in ["127.0.0.1:4317", "ftp://x:1", "http://", "", "not a url"] {
            let refused = check_otlp_endpoint("--otlp-endpoint", Some(bad)).expect_err(bad);
            assert_eq!(refused.flag, "--otlp-endpoint");
        }
    }

    #[test]
    fn an_error_reads_flag_first() {
        let e = ConfigError::new("--lease-ttl-ms", "must be at least 1000");
        assert_eq!(e.to_string(), "--lease-ttl-ms must be at least 1000");
        assert_eq!(ConfigError::unless(true, "--x", "bad"), Ok(()));
        assert_eq!(
            ConfigError::unless(false, "--x", "bad"),
            Err(ConfigError::new("--x", "bad"))
        );
    }

    #[test]
    fn advertised_addresses_need_a_port() {
        assert_eq!(check_advertised("--advertise", None), Ok(()));
        assert_eq!(
            check_advertised("--advertise", Some("broker-0.idem:9092")),
            Ok(())
        );
        assert_eq!(check_advertised("--advertise", Some("[::1]:9092")), Ok(()));
        for bad in ["", "broker-0", "broker-0:", "broker-0:http"] {
            let refused = check_advertised("--advertise", Some(bad)).expect_err(bad);
            assert_eq!(refused.flag, "--advertise");
        }
    }
}
