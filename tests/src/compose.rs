//! `ComposeCluster`: the cluster of `deploy/compose.yaml` (3 etcd members, 3 brokers, 2
//! coordinators) run from the images `deploy/build-images.sh` built, as a compose
//! project of its own (so tests run side by side), reached from this host through the
//! external listeners on ports picked free; with the faults a container test injects by
//! service name (`docker kill`, `pause`, `network disconnect`, restarts) and the waits it
//! needs (a container healthy again). `docker compose down -v` on drop removes the
//! containers, the network and the volumes.
//!
//! The images are the tag `IDEM_TEST_IMAGE_TAG` (default `test`); the test command
//! builds them (`deploy/build-images.sh --profile dev --tag test`) before the tests.
//! A test may add override files (a second `-f`, as the container chaos run does with
//! `tests/compose.chaos.yaml`) without touching the user-facing compose file.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::wait::{seen_if, wait_until};

/// Longest `docker compose up --wait` may take: the bound for a healthy cluster.
pub const UP_WITHIN: Duration = Duration::from_secs(60);
/// Longest a container may take to be healthy again after a fault is healed.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(60);

pub const BROKERS: [&str; 3] = ["broker-1", "broker-2", "broker-3"];
pub const COORDINATORS: [&str; 2] = ["coordinator-1", "coordinator-2"];
pub const ETCD_MEMBERS: [&str; 3] = ["etcd-1", "etcd-2", "etcd-3"];

pub struct ComposeCluster {
    project: String,
    /// `deploy/compose.yaml`, then the overrides, each passed with `-f`.
    files: Vec<PathBuf>,
    /// Host ports of the external listeners: brokers 1..=3, then coordinators 1..=2.
    ports: Vec<(String, u16)>,
    /// How long `up --wait` took.
    pub up_took: Duration,
}

/// The image tag the tests run.
pub fn image_tag() -> String {
    std::env::var("IDEM_TEST_IMAGE_TAG").unwrap_or_else(|_| "test".into())
}

fn compose_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("deploy")
        .join("compose.yaml")
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    probe.local_addr().expect("probed address").port()
}

/// Runs `docker args...`, returning its output whatever its exit status.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker {args:?}: {e}"))
}

/// Runs `docker args...` and panics with its stderr unless it succeeds.
fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl ComposeCluster {
    /// Brings the project `project` up and waits (`up --wait`) until every service is
    /// healthy. Panics, with the services' logs, if it is not within [`UP_WITHIN`].
    pub fn up(project: &str) -> ComposeCluster {
        ComposeCluster::up_with(project, &[])
    }

    /// [`ComposeCluster::up`] with `overrides` merged over `deploy/compose.yaml`, in
    /// order (compose merges maps such as `environment` key by key).
    pub fn up_with(project: &str, overrides: &[PathBuf]) -> ComposeCluster {
        let tag = image_tag();
        for image in ["idem", "idem-etcd"] {
            let found = docker(&["image", "inspect", &format!("{image}:{tag}")]);
            assert!(
                found.status.success(),
                "image {image}:{tag} is missing: build it with `deploy/build-images.sh \
                 --profile dev --tag {tag}` (the test command does)"
            );
        }
        let mut ports = Vec::new();
        for i in 1..=3 {
            ports.push((format!("IDEM_BROKER_{i}_PORT"), free_port()));
            ports.push((format!("IDEM_BROKER_{i}_KAFKA_PORT"), free_port()));
        }
        for i in 1..=2 {
            ports.push((format!("IDEM_COORDINATOR_{i}_PORT"), free_port()));
        }
        let mut files = vec![compose_file()];
        files.extend(overrides.iter().cloned());
        let mut cluster = ComposeCluster {
            project: project.to_string(),
            files,
            ports,
            up_took: Duration::ZERO,
        };
        // A project left over by a killed test run would hold the names and volumes.
        let _ = cluster.compose(&["down", "-v", "--timeout", "1"]);
        let started = std::time::Instant::now();
        let timeout = UP_WITHIN.as_secs().to_string();
        let up = cluster.compose(&["up", "-d", "--wait", "--wait-timeout", &timeout]);
        if !up.status.success() {
            panic!(
                "docker compose up failed: {}\n{}",
                String::from_utf8_lossy(&up.stderr),
                cluster.logs()
            );
        }
        cluster.up_took = started.elapsed();
        cluster
    }

    /// Runs `docker compose -p PROJECT -f deploy/compose.yaml [-f OVERRIDE...] args...`
    /// with the project's image tag and ports.
    pub fn compose(&self, args: &[&str]) -> Output {
        let mut command = Command::new("docker");
        command.args(["compose", "-p", &self.project]);
        for file in &self.files {
            command.arg("-f").arg(file);
        }
        command.args(args).env("IDEM_TAG", image_tag());
        for (var, port) in &self.ports {
            command.env(var, port.to_string());
        }
        command
            .output()
            .unwrap_or_else(|e| panic!("cannot run docker compose {args:?}: {e}"))
    }

    fn port(&self, var: &str) -> u16 {
        self.ports
            .iter()
            .find(|(v, _)| v == var)
            .map(|(_, p)| *p)
            .unwrap_or_else(|| panic!("no port {var}"))
    }

    /// The external address of broker `id` (1..=3), as this host dials it.
    pub fn broker_address(&self, id: usize) -> String {
        format!("127.0.0.1:{}", self.port(&format!("IDEM_BROKER_{id}_PORT")))
    }

    /// The Kafka-protocol address of broker `id` (1..=3), as this host dials it.
    pub fn kafka_address(&self, id: usize) -> String {
        format!(
            "127.0.0.1:{}",
            self.port(&format!("IDEM_BROKER_{id}_KAFKA_PORT"))
        )
    }

    /// Every broker's Kafka-protocol address, comma separated.
    pub fn kafka_bootstrap(&self) -> String {
        (1..=3)
            .map(|id| self.kafka_address(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The external address of coordinator `id` (1..=2).
    pub fn coordinator_address(&self, id: usize) -> String {
        format!(
            "127.0.0.1:{}",
            self.port(&format!("IDEM_COORDINATOR_{id}_PORT"))
        )
    }

    /// Every broker's external address, comma separated.
    pub fn bootstrap(&self) -> String {
        (1..=3)
            .map(|id| self.broker_address(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The container of `service` (compose names it `{project}-{service}-1`).
    pub fn container(&self, service: &str) -> String {
        format!("{}-{service}-1", self.project)
    }

    /// The project's network.
    pub fn network(&self) -> String {
        format!("{}_default", self.project)
    }

    /// SIGKILL, as `docker kill` sends it; the restart policy does not restart a
    /// container killed this way, [`ComposeCluster::start`] does.
    pub fn kill(&self, service: &str) {
        docker_ok(&["kill", &self.container(service)]);
    }

    pub fn start(&self, service: &str) {
        docker_ok(&["start", &self.container(service)]);
    }

    /// SIGTERM, then SIGKILL after `grace`; then starts it again.
    pub fn restart(&self, service: &str, grace: Duration) {
        docker_ok(&[
            "restart",
            "--time",
            &grace.as_secs().to_string(),
            &self.container(service),
        ]);
    }

    /// Freezes every process of the container (the cgroup freezer: SIGSTOP without a
    /// signal the process could see).
    pub fn pause(&self, service: &str) {
        docker_ok(&["pause", &self.container(service)]);
    }

    pub fn unpause(&self, service: &str) {
        docker_ok(&["unpause", &self.container(service)]);
    }

    /// Takes the container off the project's network: a real partition (it keeps
    /// running, nothing reaches it, it reaches nothing, not even etcd).
    pub fn disconnect(&self, service: &str) {
        docker_ok(&[
            "network",
            "disconnect",
            &self.network(),
            &self.container(service),
        ]);
    }

    /// Puts it back on the network under its service name, which the others dial.
    pub fn connect(&self, service: &str) {
        docker_ok(&[
            "network",
            "connect",
            "--alias",
            service,
            &self.network(),
            &self.container(service),
        ]);
    }

    /// The health Docker reports for `service`: `healthy`, `unhealthy`, `starting`, or
    /// the container's state when it is not running.
    pub fn health(&self, service: &str) -> String {
        let out = docker(&[
            "inspect",
            "--format",
            "{{if .State.Running}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
            &self.container(service),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until Docker's health check of `service` passes again.
    pub async fn wait_healthy(&self, service: &str) {
        let what = format!("{service} is healthy");
        wait_until(HEALTHY_WITHIN, &what, || async {
            let health = self.health(service);
            let healthy = health == "healthy";
            seen_if(health, healthy)
        })
        .await;
    }

    /// Every service's log.
    pub fn logs(&self) -> String {
        let out = self.compose(&["logs", "--no-color", "--timestamps"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for ComposeCluster {
    fn drop(&mut self) {
        // A test that panicked mid-fault may leave a container paused, which `down`
        // cannot stop; unpausing those that are not paused fails harmlessly.
        let _ = self.compose(&["unpause"]);
        let down = self.compose(&["down", "-v", "--timeout", "2"]);
        if !down.status.success() {
            eprintln!(
                "docker compose down failed: {}",
                String::from_utf8_lossy(&down.stderr)
            );
        }
    }
}
