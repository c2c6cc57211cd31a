//! Third-party Kafka clients driven against idem's Kafka listener: `kcat` (Debian's
//! package, librdkafka) and `confluent-kafka` (PyPI, in the venv
//! `scripts/install-deps.sh kafka-clients` makes) running the scripts of
//! `tests/kafka_clients/`. No code of ours speaks Kafka on the client side. Also a
//! Kafka-frame-aware TCP proxy that loses Produce responses on purpose, after the
//! broker processed the request, as a network failure would.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Longest one client command may run.
const CLIENT_PATIENCE: Duration = Duration::from_secs(90);

/// `kcat`: `IDEM_KCAT_BIN`, else the Debian package's `/usr/bin/kcat`.
pub fn kcat_bin() -> PathBuf {
    std::env::var_os("IDEM_KCAT_BIN").map_or_else(|| PathBuf::from("/usr/bin/kcat"), PathBuf::from)
}

/// The venv's python with confluent-kafka: `$IDEM_KAFKA_VENV/bin/python`, the venv
/// defaulting to where install-deps puts it.
pub fn python_bin() -> PathBuf {
    let venv = std::env::var_os("IDEM_KAFKA_VENV")
        .map_or_else(|| PathBuf::from("/opt/idem/kafka-clients"), PathBuf::from);
    venv.join("bin").join("python")
}

/// A script of `tests/kafka_clients/`.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("kafka_clients")
        .join(name)
}

/// What a client command printed, and whether it succeeded.
#[derive(Debug)]
pub struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args` with `stdin`, killed after [`CLIENT_PATIENCE`].
pub async fn run(program: PathBuf, args: &[&str], stdin: &str) -> Ran {
    let mut child = tokio::process::Command::new(&program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "spawn {}: {e} (scripts/install-deps.sh kafka-clients installs it)",
                program.display()
            )
        });
    let mut input = child.stdin.take().expect("piped stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("write stdin");
    drop(input);
    let output = tokio::time::timeout(CLIENT_PATIENCE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} ran past {CLIENT_PATIENCE:?}",
                program.display()
            )
        })
        .expect("client output");
    Ran {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `kcat` with `args`, which must succeed; its stdout.
pub async fn kcat(args: &[&str], stdin: &str) -> String {
    let ran = run(kcat_bin(), args, stdin).await;
    assert!(ran.success, "kcat {args:?} failed: {}", ran.stderr);
    ran.stdout
}

/// `(offset, value)` of every record of `topic`'s `partition` from the start, read by
/// kcat (`-e`: up to the end, then exit) with `isolation` (`read_committed` or
/// `read_uncommitted`).
pub async fn kcat_read(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    isolation: &str,
) -> Vec<(i64, String)> {
    let isolation = format!("isolation.level={isolation}");
    kcat_read_with(bootstrap, topic, partition, &[isolation]).await
}

/// `(offset, value)` of every record of `topic`/`partition` from the start, read by
/// kcat (`-e`: up to the end, then exit) with librdkafka `settings` (`key=value`, each
/// passed with `-X`: TLS files, the isolation level).
pub async fn kcat_read_with(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    settings: &[String],
) -> Vec<(i64, String)> {
    let partition = partition.to_string();
    let mut args = vec![
        "-b",
        bootstrap,
        "-C",
        "-t",
        topic,
        "-p",
        &partition,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%o %s\\n",
    ];
    for setting in settings {
        args.extend(["-X", setting.as_str()]);
    }
    let out = kcat(&args, "").await;
    out.lines()
        .map(|line| {
            let (offset, value) = line.split_once(' ').unwrap_or((line, ""));
            (
                offset.parse().expect("kcat prints the offset"),
                value.to_string(),
            )
        })
        .collect()
}

/// A confluent-kafka script of `tests/kafka_clients/` with `args`, which must succeed
/// and print one JSON line.
pub async fn python(script_name: &str, args: &[&str]) -> serde_json::Value {
    let path = script(script_name);
    let mut all = vec![path.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    let ran = run(python_bin(), &all, "").await;
    assert!(ran.success, "{script_name} {args:?} failed: {}", ran.stderr);
    serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{script_name} printed no JSON ({e}): {}\nstderr: {}",
            ran.stdout, ran.stderr
        )
    })
}

struct Faults {
    /// The API whose responses are lost (Produce unless told otherwise).
    api_key: std::sync::atomic::AtomicI16,
    /// Lose every `every`-th response of it (0: lose none) ...
    every: AtomicUsize,
    /// ... until this many are lost.
    budget: AtomicUsize,
    responses: AtomicUsize,
    lost: AtomicUsize,
}

/// A TCP proxy on 127.0.0.1 in front of a Kafka listener that reads Kafka frames both
/// ways (never altering one) and can lose Produce responses: it closes the client's
/// connection instead of forwarding the response, after the broker processed the
/// request. Bound before its upstream is known, so a broker can advertise it
/// (`--kafka-advertise`) and every client connection goes through it.
pub struct KafkaProxy {
    addr: SocketAddr,
    upstream: watch::Sender<Option<SocketAddr>>,
    faults: Arc<Faults>,
    task: tokio::task::JoinHandle<()>,
}

impl KafkaProxy {
    pub async fn bind() -> KafkaProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (upstream, watch_upstream) = watch::channel(None);
        let faults = Arc::new(Faults {
            api_key: std::sync::atomic::AtomicI16::new(0),
            every: AtomicUsize::new(0),
            budget: AtomicUsize::new(0),
            responses: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
        });
        let task = {
            let faults = faults.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let mut upstream = watch_upstream.clone();
                    let faults = faults.clone();
                    tokio::spawn(async move {
                        let Ok(target) = upstream.wait_for(Option::is_some).await.map(|a| *a)
                        else {
                            return;
                        };
                        let Some(target) = target else { return };
                        if let Ok(server) = TcpStream::connect(target).await {
                            relay(client, server, faults).await;
                        }
                    });
                }
            })
        };
        KafkaProxy {
            addr,
            upstream,
            faults,
            task,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where connections go from now on.
    pub fn forward_to(&self, upstream: SocketAddr) {
        self.upstream.send_replace(Some(upstream));
    }

    /// Loses every `every`-th Produce response until `count` are lost.
    pub fn lose_produce_responses(&self, every: usize, count: usize) {
        self.lose_responses(0, every, count);
    }

    /// Loses every `every`-th response to requests of `api_key` until `count` are lost.
    pub fn lose_responses(&self, api_key: i16, every: usize, count: usize) {
        self.faults.api_key.store(api_key, Ordering::SeqCst);
        self.faults.budget.store(count, Ordering::SeqCst);
        self.faults.every.store(every, Ordering::SeqCst);
    }

    pub fn lost_responses(&self) -> usize {
        self.faults.lost.load(Ordering::SeqCst)
    }
}

impl Drop for KafkaProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one Kafka frame (size prefix included); `None` at a clean end.
async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.ok()?;
    let len = usize::try_from(i32::from_be_bytes(size)).ok()?;
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&size);
    stream.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

async fn relay(client: TcpStream, server: TcpStream, faults: Arc<Faults>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // The API key of each request awaiting its response, in order (Kafka answers in
    // order). acks=0 Produce requests get no response: the tests do not send them here.
    let pending: Arc<Mutex<VecDeque<i16>>> = Arc::default();
    let requests = {
        let pending = pending.clone();
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut client_read).await {
                if frame.len() >= 6 {
                    let key = i16::from_be_bytes([frame[4], frame[5]]);
                    pending
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push_back(key);
                }
                if server_write.write_all(&frame).await.is_err() {
                    return;
                }
            }
        })
    };
    while let Some(frame) = read_frame(&mut server_read).await {
        let key = pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        if key == Some(faults.api_key.load(Ordering::SeqCst)) && lose(&faults) {
            break;
        }
        if client_write.write_all(&frame).await.is_err() {
            break;
        }
    }
    requests.abort();
}

/// Whether this response (of the API the faults name) is one to lose.
fn lose(faults: &Faults) -> bool {
    let n = faults.responses.fetch_add(1, Ordering::SeqCst) + 1;
    let every = faults.every.load(Ordering::SeqCst);
    // None for every == 0: lose nothing.
    if n.checked_rem(every) != Some(0) {
        return false;
    }
    let taken = faults
        .budget
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
        .is_ok();
    if taken {
        faults.lost.fetch_add(1, Ordering::SeqCst);
    }
    taken
}

/// `transactional.py` running its steps against a Kafka listener: the line each step
/// printed, read as it comes, so a test can act on the cluster at a `["wait"]` step
/// (the script waits for [`TransactionalSession::proceed`]). Killed when dropped.
/// Starts one of tests/kafka_clients/ with `args`, its stdin and stdout piped to the
/// caller, killed when dropped; its stderr (librdkafka's log) is gathered line by line
/// into the returned text, for the failure message of a test.
pub fn spawn_script(name: &str, args: &[&str]) -> (tokio::process::Child, Arc<Mutex<String>>) {
    let mut child = tokio::process::Command::new(python_bin())
        .arg(script(name))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name}: {e} (scripts/install-deps.sh kafka-clients)"));
    let stderr = Arc::new(Mutex::new(String::new()));
    if let Some(err) = child.stderr.take() {
        let stderr = stderr.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(err));
            while let Ok(Some(line)) = lines.next_line().await {
                let mut text = stderr.lock().unwrap_or_else(PoisonError::into_inner);
                text.push_str(&line);
                text.push('\n');
            }
        });
    }
    (child, stderr)
}

pub struct TransactionalSession {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    stderr: Arc<Mutex<String>>,
}

impl TransactionalSession {
    /// Starts the script with `steps` (see its doc) and librdkafka `settings`.
    pub fn start(bootstrap: &str, steps: &serde_json::Value, settings: &[&str]) -> Self {
        let steps = steps.to_string();
        let mut args = vec![bootstrap, steps.as_str()];
        args.extend_from_slice(settings);
        let (mut child, stderr) = spawn_script("transactional.py", &args);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        TransactionalSession {
            child,
            stdin,
            lines: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The next line the script printed.
    pub async fn next(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(CLIENT_PATIENCE, self.lines.next_line()).await;
        match line {
            Ok(Ok(Some(line))) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("transactional.py printed {line:?}: {e}")),
            Ok(Ok(None)) | Ok(Err(_)) => {
                // Give the stderr reader a moment to take the last of it.
                let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
                panic!("transactional.py ended early; stderr:\n{}", self.stderr())
            }
            Err(_) => panic!(
                "transactional.py printed nothing for {CLIENT_PATIENCE:?}; stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// The step lines up to the next `["wait"]` step.
    pub async fn until_waiting(&mut self) -> Vec<serde_json::Value> {
        let mut steps = Vec::new();
        loop {
            let line = self.next().await;
            if line["waiting"] == serde_json::Value::Bool(true) {
                return steps;
            }
            assert!(line.get("done").is_none(), "no wait step came: {steps:?}");
            steps.push(line);
        }
    }

    /// Lets the script go on past its wait step.
    pub async fn proceed(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(b"go\n").await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// The remaining step lines, and the delivery reports of the last line.
    pub async fn finish(mut self) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
        let mut steps = Vec::new();
        loop {
            let line = self.next().await;
            if line["done"] == serde_json::Value::Bool(true) {
                let reports = line["reports"].as_array().cloned().unwrap_or_default();
                drop(self.stdin.take());
                let _ = tokio::time::timeout(CLIENT_PATIENCE, self.child.wait()).await;
                return (steps, reports);
            }
            steps.push(line);
        }
    }
}

/// `transactional.py` with `steps` (none of them a wait) to the end: the step lines
/// and the delivery reports.
pub async fn transactional(
    bootstrap: &str,
    steps: &serde_json::Value,
    settings: &[&str],
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    TransactionalSession::start(bootstrap, steps, settings)
        .finish()
        .await
}
