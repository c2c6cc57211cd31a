//! The Kubernetes manifests (deploy/k8s) deploy what the binaries accept: every document
//! is valid against the API schemas (offline, deploy/k8s/validate.sh), and each
//! container's arguments and environment, resolved as the kubelet resolves them, pass
//! the real binary's `--check-config` (idem) or name only flags it has (etcd).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use idem_tests::binaries::binary;
use idem_tests::etcd::etcd_binary;
use serde::Deserialize;
use serde_yaml::Value;

/// The namespace the pods are resolved in (kustomization.yaml's).
const NAMESPACE: &str = "idem";

/// A variable read by every idem server that is not a flag: `IDEM_LOG`
/// (runtime/src/logging.rs), so `--help` does not list it.
const NOT_A_FLAG: &[&str] = &["IDEM_LOG"];

fn k8s_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s")
}

fn run_validate(dir: &Path) -> Output {
    Command::new(k8s_dir().join("validate.sh"))
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run deploy/k8s/validate.sh")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn given_the_manifests_when_validated_offline_then_every_document_passes_strict_schemas() {
    let output = run_validate(&k8s_dir());
    let said = text(&output);
    assert!(output.status.success(), "validate.sh refused:\n{said}");
    assert!(said.contains("valid against Kubernetes"), "{said}");
}

#[test]
fn given_a_manifest_with_an_unknown_field_when_validated_then_it_is_refused() {
    let copy = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(k8s_dir()).expect("deploy/k8s") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, copy.path().join(path.file_name().expect("a file"))).expect("copy");
    }
    let broker = copy.path().join("broker.yaml");
    let yaml = std::fs::read_to_string(&broker).expect("broker.yaml");
    let pull = "imagePullPolicy: IfNotPresent\n";
    assert!(yaml.contains(pull), "the broker container sets {pull}");
    // A misspelled field at the container's indentation: kubectl apply would refuse it.
    let indent = yaml
        .lines()
        .find(|l| l.trim_start().starts_with("imagePullPolicy"))
        .map(|l| &l[..l.len() - l.trim_start().len()])
        .expect("the line");
    let broken = yaml.replacen(pull, &format!("{pull}{indent}imagePulPolicy: Always\n"), 1);
    std::fs::write(&broker, broken).expect("write");

    let output = run_validate(copy.path());
    let said = text(&output);
    assert!(
        !output.status.success(),
        "a broken manifest passed:\n{said}"
    );
    assert!(said.contains("imagePulPolicy"), "names the field: {said}");
}

/// Every document of the kustomization, in its order.
fn documents() -> Vec<Value> {
    let dir = k8s_dir();
    let kustomization: Value = read_yaml(&dir.join("kustomization.yaml"))
        .pop()
        .expect("kustomization.yaml");
    assert_eq!(kustomization["namespace"].as_str(), Some(NAMESPACE));
    let resources = kustomization["resources"].as_sequence().expect("resources");
    resources
        .iter()
        .flat_map(|r| read_yaml(&dir.join(r.as_str().expect("a file name"))))
        .collect()
}

fn read_yaml(path: &Path) -> Vec<Value> {
    let yaml = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_yaml::Deserializer::from_str(&yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/k8s"))
}

/// One container of one pod of a StatefulSet, as the kubelet would start it.
#[derive(Debug)]
struct Container {
    command: Vec<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    spec: Value,
}

impl Container {
    fn env(&self, name: &str) -> &str {
        self.env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} is not set"))
    }

    /// Runs the container's own binary from the target dir with exactly the
    /// container's environment and arguments, plus `extra`.
    fn run(&self, extra: &[&str]) -> Output {
        let program = self.command.first().expect("a command");
        Command::new(binary(program))
            .args(&self.args)
            .args(extra)
            .env_clear()
            .envs(self.env.iter().map(|(n, v)| (n, v)))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }
}

/// The only container of pod `ordinal` of StatefulSet `name`, with the downward API
/// fields the manifests use filled in and every `$(VAR)` expanded.
fn pod_container(docs: &[Value], name: &str, ordinal: usize) -> Container {
    let set = find(docs, "StatefulSet", name);
    let containers = set["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{name}: one container");
    let spec = containers[0].clone();
    let pod = format!("{name}-{ordinal}");
    let mut env: Vec<(String, String)> = Vec::new();
    for var in spec["env"].as_sequence().into_iter().flatten() {
        let var_name = var["name"].as_str().expect("env name").to_string();
        let value = if let Some(value) = var["value"].as_str() {
            // Kubernetes expands references to variables defined above this one.
            expand(value, &env).unwrap_or_else(|e| panic!("{name} {var_name}: {e}"))
        } else {
            let field = var["valueFrom"]["fieldRef"]["fieldPath"]
                .as_str()
                .unwrap_or_else(|| {
                    panic!("{name} {var_name}: only value and fieldRef are resolved")
                });
            match field {
                "metadata.name" => pod.clone(),
                "metadata.namespace" => NAMESPACE.to_string(),
                "metadata.labels['apps.kubernetes.io/pod-index']" => ordinal.to_string(),
                other => panic!("{name} {var_name}: unknown downward API field {other}"),
            }
        };
        env.push((var_name, value));
    }
    let strings = |key: &str| -> Vec<String> {
        spec[key]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|s| {
                let s = s.as_str().expect("a string");
                expand(s, &env).unwrap_or_else(|e| panic!("{name} {key}: {e}"))
            })
            .collect()
    };
    Container {
        command: strings("command"),
        args: strings("args"),
        env,
        spec,
    }
}

/// Kubernetes' dependent variable expansion: `$(NAME)` becomes NAME's value, `$$`
/// a `$`. Kubernetes leaves an undefined reference as it is; here it is an error,
/// since the binary would then get the literal `$(NAME)`.
fn expand(value: &str, env: &[(String, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix('$') {
            out.push('$');
            rest = escaped;
        } else if let Some(reference) = after.strip_prefix('(') {
            let end = reference
                .find(')')
                .ok_or_else(|| format!("unclosed $( in {value:?}"))?;
            let name = &reference[..end];
            let (_, defined) = env.iter().find(|(n, _)| n == name).ok_or_else(|| {
                format!("$({name}) is not defined before it is used in {value:?}")
            })?;
            out.push_str(defined);
            rest = &reference[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn replicas(docs: &[Value], name: &str) -> usize {
    let n = find(docs, "StatefulSet", name)["spec"]["replicas"]
        .as_u64()
        .expect("replicas");
    usize::try_from(n).expect("a small count")
}

/// The `IDEM_*` variables `program --help` lists (`[env: IDEM_...]`), and the ones
/// every server reads that are not flags.
fn declared_variables(program: &str) -> BTreeSet<String> {
    let output = Command::new(binary(program))
        .arg("--help")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("--help");
    assert!(output.status.success(), "{program} --help");
    let help = String::from_utf8_lossy(&output.stdout);
    let mut names: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect()
        })
        .collect();
    names.extend(NOT_A_FLAG.iter().map(|n| n.to_string()));
    names
}

/// The `IDEM_*` names among `env` that `declared` lacks: clap ignores a variable it
/// does not know, so a misspelled one would silently leave its default in force.
fn undeclared(env: &[(String, String)], declared: &BTreeSet<String>) -> Vec<String> {
    env.iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with("IDEM_") && !declared.contains(*n))
        .cloned()
        .collect()
}

/// What a probe asks: its kind (`grpc`, `tcpSocket`, ...), the port number (a named
/// port looked up among the container's ports) and the gRPC service (`""` for the
/// whole server or a probe that is not gRPC).
fn probe(container: &Container, probe: &str) -> (String, u64, String) {
    let spec = container.spec[probe]
        .as_mapping()
        .unwrap_or_else(|| panic!("no {probe}"));
    let (kind, action) = spec
        .iter()
        .find(|(k, _)| ["grpc", "tcpSocket", "httpGet", "exec"].contains(&k.as_str().unwrap_or("")))
        .unwrap_or_else(|| panic!("{probe} has no action"));
    let port = match &action["port"] {
        Value::Number(n) => n.as_u64().expect("a port number"),
        Value::String(name) => container.spec["ports"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{probe}: no container port named {name}")),
        other => panic!("{probe}: port {other:?}"),
    };
    let service = action["service"].as_str().unwrap_or("").to_string();
    (kind.as_str().unwrap_or("").to_string(), port, service)
}

/// Checks what every idem server container of StatefulSet `name` shares: the variables
/// are all declared, each probe in `probes` (name, kind, gRPC service) asks the port
/// the server listens on, and `--check-config` accepts each pod's configuration.
/// Returns each pod's printed configuration.
fn check_idem_pods(
    name: &str,
    program: &str,
    listen_var: &str,
    probes: &[(&str, &str, &str)],
) -> Vec<String> {
    let docs = documents();
    let declared = declared_variables(program);
    (0..replicas(&docs, name))
        .map(|ordinal| {
            let container = pod_container(&docs, name, ordinal);
            assert_eq!(container.command, [program], "{name} runs {program}");
            assert_eq!(
                undeclared(&container.env, &declared),
                Vec::<String>::new(),
                "{name}"
            );

            let port = container
                .env(listen_var)
                .rsplit_once(':')
                .expect("host:port")
                .1;
            for (which, kind, service) in probes {
                let asked = probe(&container, which);
                let wanted = (
                    kind.to_string(),
                    port.parse().expect("a port"),
                    service.to_string(),
                );
                assert_eq!(asked, wanted, "{name} {which}");
            }

            let output = container.run(&["--check-config"]);
            let said = text(&output);
            assert!(output.status.success(), "{name}-{ordinal} refused: {said}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        })
        .collect()
}

#[test]
fn given_each_broker_pod_when_its_config_is_checked_then_the_broker_accepts_it_with_its_ordinal_as_id(
) {
    let printed = check_idem_pods(
        "idem-broker",
        "idem-broker",
        "IDEM_LISTEN",
        &[
            ("startupProbe", "grpc", ""),
            // Serving and back in every ISR (runtime/src/health.rs).
            ("readinessProbe", "grpc", "idem.CaughtUp"),
            ("livenessProbe", "grpc", ""),
        ],
    );
    assert_eq!(printed.len(), 3);
    for (ordinal, config) in printed.iter().enumerate() {
        for shown in [
            format!("broker_id: {ordinal},"),
            format!(
                "advertise: Some(\n        \"idem-broker-{ordinal}.idem-broker.{NAMESPACE}.svc.cluster.local:9092\","
            ),
            "listen: 0.0.0.0:9092,".to_string(),
            "data_dir: \"/data/broker\",".to_string(),
            format!("\"http://idem-etcd-2.idem-etcd.{NAMESPACE}.svc.cluster.local:2379\","),
            "pid_store_flag: Some(\n        Etcd,".to_string(),
        ] {
            assert!(config.contains(&shown), "broker {ordinal} lacks {shown:?}:\n{config}");
        }
    }
    // The data dir is on the pod's volume, not the (read-only) root filesystem.
    let docs = documents();
    let broker = pod_container(&docs, "idem-broker", 0);
    let mounts: Vec<&str> = broker.spec["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    let data_dir = broker.env("IDEM_DATA_DIR");
    assert!(
        mounts
            .iter()
            .any(|m| data_dir.starts_with(&format!("{m}/"))),
        "{data_dir} is under none of {mounts:?}"
    );
}

#[test]
fn given_each_coordinator_pod_when_its_config_is_checked_then_it_joins_through_etcd_with_its_ordinal_as_id(
) {
    let printed = check_idem_pods(
        "idem-coordinator",
        "idem-coordinator",
        "IDEM_COORDINATOR_LISTEN",
        // Ready on the health service; alive on the port (deploy/k8s/coordinator.yaml).
        &[
            ("readinessProbe", "grpc", "idem.v1.TxnCoordinator"),
            ("livenessProbe", "tcpSocket", ""),
        ],
    );
    assert_eq!(printed.len(), 2);
    for (ordinal, config) in printed.iter().enumerate() {
        for shown in [
            format!("coordinator_id: {ordinal},"),
            format!(
                "advertise: Some(\n        \"idem-coordinator-{ordinal}.idem-coordinator.{NAMESPACE}.svc.cluster.local:9093\","
            ),
            format!("bootstrap: \"idem-bootstrap.{NAMESPACE}.svc.cluster.local:9092\","),
            "mode: Etcd".to_string(),
        ] {
            assert!(config.contains(&shown), "coordinator {ordinal} lacks {shown:?}:\n{config}");
        }
    }
    // The coordinator bootstraps through a Service that exists, on the brokers' port.
    let docs = documents();
    let bootstrap = find(&docs, "Service", "idem-bootstrap");
    assert_eq!(bootstrap["spec"]["ports"][0]["port"].as_u64(), Some(9092));
}

#[test]
fn given_a_misspelled_idem_variable_then_it_is_reported_as_undeclared() {
    let declared = declared_variables("idem-broker");
    assert!(declared.contains("IDEM_BROKER_ID") && declared.contains("IDEM_ETCD"));
    let env = vec![
        ("POD_NAME".to_string(), "idem-broker-2".to_string()),
        ("IDEM_BROKER_ID".to_string(), "2".to_string()),
        ("IDEM_BROKR_ID".to_string(), "2".to_string()),
    ];
    assert_eq!(undeclared(&env, &declared), ["IDEM_BROKR_ID"]);
    // clap alone would not notice: the broker starts with its default id.
    let container = Container {
        command: vec!["idem-broker".into()],
        args: Vec::new(),
        env: vec![("IDEM_BROKR_ID".into(), "2".into())],
        spec: Value::Null,
    };
    let output = container.run(&["--check-config"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("broker_id: 0,"));
}

#[test]
fn given_a_value_refused_at_start_when_checked_then_check_config_fails_naming_the_flag() {
    let docs = documents();
    for (name, variable) in [
        ("idem-broker", "IDEM_ADVERTISE"),
        ("idem-coordinator", "IDEM_COORDINATOR_ADVERTISE"),
    ] {
        let mut container = pod_container(&docs, name, 1);
        for (n, value) in &mut container.env {
            if n == variable {
                *value = format!("{name}-1.{name}"); // no port
            }
        }
        let output = container.run(&["--check-config"]);
        let said = text(&output);
        assert!(!output.status.success(), "{name}: {said}");
        assert!(
            said.contains("invalid configuration: --advertise "),
            "{name}: {said}"
        );
    }
}

#[test]
fn given_each_etcd_pod_then_every_flag_is_one_etcd_has_and_the_member_is_in_its_initial_cluster() {
    let docs = documents();
    let help = Command::new(etcd_binary())
        .arg("--help")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("etcd --help");
    // etcd 3.4 prints its help on stdout; both streams are read in case another does not.
    let help = text(&help);
    let known: BTreeSet<&str> = help
        .lines()
        .filter_map(|l| l.strip_prefix("  --"))
        .filter_map(|l| l.split([' ', '\'']).next())
        .collect();
    assert!(known.contains("initial-cluster"), "etcd --help: {help}");

    let members = replicas(&docs, "idem-etcd");
    for ordinal in 0..members {
        let container = pod_container(&docs, "idem-etcd", ordinal);
        let flags: BTreeMap<&str, &str> = container
            .args
            .iter()
            .map(|a| {
                let flag = a
                    .strip_prefix("--")
                    .unwrap_or_else(|| panic!("{a} is not a --flag"));
                flag.split_once('=').unwrap_or((flag, ""))
            })
            .collect();
        let unknown: Vec<&&str> = flags.keys().filter(|f| !known.contains(**f)).collect();
        assert!(unknown.is_empty(), "etcd has no {unknown:?}");
        // ETCD_X is etcd's variable for --x. Each must name a flag etcd has, and none
        // may name a flag the args set too: etcd 3.4 then refuses to start
        // ("conflicting environment variable ... is shadowed"), which is what
        // --data-dir beside the image's ETCD_DATA_DIR did on a hand check.
        let image = image_env(&k8s_dir().join("../docker/etcd.Dockerfile"));
        assert!(!image.is_empty(), "the etcd image sets its PATH at least");
        let variables: BTreeSet<String> = image
            .iter()
            .chain(&container.env)
            .filter_map(|(n, _)| n.strip_prefix("ETCD_"))
            .map(|n| n.to_lowercase().replace('_', "-"))
            .collect();
        for flag in &variables {
            assert!(
                known.contains(flag.as_str()),
                "etcd has no --{flag} (ETCD_ variable)"
            );
            assert!(
                !flags.contains_key(flag.as_str()),
                "--{flag} is set by a flag and by a variable: etcd refuses to start"
            );
        }

        let pod = format!("idem-etcd-{ordinal}");
        assert_eq!(flags["name"], pod);
        let peer = format!("http://{pod}.idem-etcd.{NAMESPACE}.svc.cluster.local:2380");
        assert_eq!(flags["initial-advertise-peer-urls"], peer);
        let cluster: Vec<&str> = flags["initial-cluster"].split(',').collect();
        assert_eq!(cluster.len(), members, "every member, no other");
        assert!(
            cluster.contains(&format!("{pod}={peer}").as_str()),
            "{cluster:?}"
        );
    }
    // Brokers and coordinators dial exactly the members' client URLs.
    let clients: Vec<String> = (0..members)
        .map(|n| format!("http://idem-etcd-{n}.idem-etcd.{NAMESPACE}.svc.cluster.local:2379"))
        .collect();
    for name in ["idem-broker", "idem-coordinator"] {
        let container = pod_container(&docs, name, 0);
        assert_eq!(
            container.env("IDEM_ETCD").split(',').collect::<Vec<_>>(),
            clients
        );
    }
}

/// The `ENV` settings of a Dockerfile (`ENV A=1 B=2`, backslash-continued lines joined).
fn image_env(dockerfile: &Path) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(dockerfile).unwrap_or_else(|e| panic!("{dockerfile:?}: {e}"));
    let joined = text.replace("\\\n", " ");
    joined
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("ENV "))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn given_every_stateful_set_then_its_headless_service_exists_and_a_budget_covers_it() {
    let docs = documents();
    for name in ["idem-etcd", "idem-broker", "idem-coordinator"] {
        let set = find(&docs, "StatefulSet", name);
        assert_eq!(
            set["spec"]["podManagementPolicy"].as_str(),
            Some("Parallel")
        );
        let service_name = set["spec"]["serviceName"].as_str().expect("serviceName");
        let service = find(&docs, "Service", service_name);
        assert_eq!(
            service["spec"]["clusterIP"].as_str(),
            Some("None"),
            "{name}: headless"
        );
        let labels = &set["spec"]["template"]["metadata"]["labels"];
        for selector in [
            &service["spec"]["selector"],
            &find(&docs, "PodDisruptionBudget", name)["spec"]["selector"]["matchLabels"],
        ] {
            for (key, value) in selector.as_mapping().expect("a selector") {
                assert_eq!(&labels[key], value, "{name}: selects its pods");
            }
        }
        let pod = &set["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
        assert_eq!(
            pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"].as_bool(),
            Some(true)
        );
    }
}
