//! A server started with a setting it cannot run with exits at once, with a message
//! that names the flag, before it binds, registers or opens anything.

use std::process::{Command, Stdio};

use idem_tests::binaries::binary;

/// Runs `program` with `args` and returns its exit status and stderr.
fn run(program: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(binary(program))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn given_bad_broker_flags_then_it_refuses_to_start_naming_each_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().to_string_lossy().into_owned();
    let files = tempfile::tempdir().expect("tempdir");
    let bad_quotas = files.path().join("quotas");
    std::fs::write(&bad_quotas, "alice produce=1MiB\nbob write=5\n").expect("quota file");
    let bad_quotas = bad_quotas.to_string_lossy().into_owned();
    let no_quotas = files.path().join("absent").to_string_lossy().into_owned();
    for (args, flag) in [
        (vec!["--quota-file", bad_quotas.as_str()], "--quota-file"),
        (vec!["--quota-file", no_quotas.as_str()], "--quota-file"),
        (vec!["--lease-ttl-ms", "10"], "--lease-ttl-ms"),
        (vec!["--advertise", "broker-0"], "--advertise"),
        (
            vec!["--external-advertise", "127.0.0.1:19091"],
            "--external-advertise",
        ),
        (
            vec![
                "--external-listen",
                "127.0.0.1:0",
                "--external-advertise",
                "h",
            ],
            "--external-advertise",
        ),
        (vec!["--id=-1"], "--id"),
        (vec!["--segment-bytes", "0"], "--segment-bytes"),
        (
            vec!["--replica-lag-time-max-ms", "0"],
            "--replica-lag-time-max-ms",
        ),
        (vec!["--pid-store", "etcd"], "--pid-store"),
        (vec!["--otlp-endpoint", "127.0.0.1:4317"], "--otlp-endpoint"),
    ] {
        let mut all = vec!["--listen", "127.0.0.1:0", "--data-dir", data_dir.as_str()];
        all.extend(&args);
        let (code, stderr) = run("idem-broker", &all);
        assert_ne!(code, Some(0), "{args:?} started");
        assert!(
            stderr.contains(&format!("invalid configuration: {flag} ")),
            "{args:?}: {stderr}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("data dir").collect();
    assert!(left.is_empty(), "a refused broker wrote {left:?}");
}

#[test]
fn given_bad_coordinator_flags_then_it_refuses_to_start_naming_each_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().to_string_lossy().into_owned();
    for (args, flag) in [
        (
            vec!["--data-dir", data_dir.as_str(), "--txn-log-partitions", "0"],
            "--txn-log-partitions",
        ),
        (
            vec!["--data-dir", data_dir.as_str(), "--lease-ttl-ms", "999"],
            "--lease-ttl-ms",
        ),
        (
            vec!["--data-dir", data_dir.as_str(), "--advertise", "c:"],
            "--advertise",
        ),
        (
            vec![
                "--data-dir",
                data_dir.as_str(),
                "--external-advertise",
                "127.0.0.1:19093",
            ],
            "--external-advertise",
        ),
        (vec![], "--etcd"),
        (
            vec![
                "--data-dir",
                data_dir.as_str(),
                "--otlp-endpoint",
                "collector:4317",
            ],
            "--otlp-endpoint",
        ),
    ] {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend(&args);
        let (code, stderr) = run("idem-coordinator", &all);
        assert_ne!(code, Some(0), "{args:?} started");
        assert!(
            stderr.contains(&format!("invalid configuration: {flag} ")),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn given_bad_tls_files_then_broker_and_coordinator_refuse_to_start_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = idem_tests::tls::CertAuthority::new("bad config CA");
    let good = idem_tests::tls::TlsFiles::write(dir.path(), "good", &ca.server(&[]), &ca);
    // The key of another certificate.
    let other = idem_tests::tls::TlsFiles::write(dir.path(), "other", &ca.server(&[]), &ca);
    let path = |p: &std::path::Path| p.display().to_string();
    let (cert, key, ca_file, other_key) = (
        path(&good.cert),
        path(&good.key),
        path(&good.ca),
        path(&other.key),
    );
    let missing = path(&dir.path().join("missing.crt"));
    let data_dir = dir.path().join("data").display().to_string();
    for (args, flag) in [
        (vec!["--tls-cert", cert.as_str()], "--tls-key"),
        (vec!["--tls-key", key.as_str()], "--tls-cert"),
        (
            vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str()],
            "--tls-ca",
        ),
        (
            vec![
                "--tls-cert",
                cert.as_str(),
                "--tls-key",
                key.as_str(),
                "--tls-client-auth",
                "required",
            ],
            "--tls-ca",
        ),
        (
            vec![
                "--tls-cert",
                missing.as_str(),
                "--tls-key",
                key.as_str(),
                "--tls-ca",
                ca_file.as_str(),
            ],
            "--tls-cert",
        ),
        (
            vec![
                "--tls-cert",
                cert.as_str(),
                "--tls-key",
                other_key.as_str(),
                "--tls-ca",
                ca_file.as_str(),
            ],
            "--tls-key",
        ),
        (
            vec![
                "--tls-cert",
                cert.as_str(),
                "--tls-key",
                key.as_str(),
                "--tls-ca",
                key.as_str(),
            ],
            "--tls-ca",
        ),
    ] {
        for program in ["idem-broker", "idem-coordinator"] {
            let mut all = vec!["--listen", "127.0.0.1:0", "--data-dir", data_dir.as_str()];
            all.extend(&args);
            let (code, stderr) = run(program, &all);
            assert_ne!(code, Some(0), "{program} {args:?} started");
            assert!(
                stderr.contains(&format!("invalid configuration: {flag} ")),
                "{program} {args:?}: {stderr}"
            );
        }
    }
    assert!(
        !dir.path().join("data").exists(),
        "a refused broker wrote its data dir"
    );
}
