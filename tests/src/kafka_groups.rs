//! confluent-kafka consumers in a KIP-848 group (`tests/kafka_clients/group_*.py`)
//! against idem's Kafka listener: each consumer is a process whose events (assigned,
//! revoked, received, committed) a test reads as they happen, closes (a leave) or
//! SIGKILLs (its session must expire). Killed when dropped.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use crate::kafka_clients::spawn_script;

/// Everything one consumer printed so far.
#[derive(Debug, Default, Clone)]
pub struct Events {
    pub lines: Vec<Value>,
    /// Its stdout ended (closed or killed).
    pub ended: bool,
}

impl Events {
    /// `(partition, offset, value)` of every record received.
    pub fn received(&self) -> Vec<(i32, i64, String)> {
        self.lines
            .iter()
            .filter_map(|line| {
                let r = line.get("received")?;
                Some((
                    i32::try_from(r[0].as_i64()?).ok()?,
                    r[1].as_i64()?,
                    r[2].as_str()?.to_string(),
                ))
            })
            .collect()
    }

    /// `(partition, next offset)` of every commit that returned.
    pub fn committed(&self) -> Vec<(i32, i64)> {
        self.lines
            .iter()
            .filter_map(|line| {
                let c = line.get("committed")?;
                Some((i32::try_from(c[0].as_i64()?).ok()?, c[1].as_i64()?))
            })
            .collect()
    }

    /// The partitions owned after the last assignment and revocation events.
    pub fn owned(&self) -> std::collections::BTreeSet<i32> {
        let mut owned = std::collections::BTreeSet::new();
        for line in &self.lines {
            let as_set = |v: &Value| {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_i64())
                            .map(|p| p as i32)
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            };
            if let Some(added) = line.get("assigned") {
                owned.extend(as_set(added));
            }
            if let Some(taken) = line.get("revoked") {
                for p in as_set(taken) {
                    owned.remove(&p);
                }
            }
        }
        owned
    }

    /// The error events' codes.
    pub fn errors(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter_map(|line| line.get("error")?.as_str().map(str::to_string))
            .collect()
    }
}

/// One running `group_consume.py`.
pub struct GroupConsumer {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    events: watch::Receiver<Events>,
    stderr: Arc<Mutex<String>>,
}

impl GroupConsumer {
    /// Starts a consumer of `topic` in `group` with extra librdkafka `settings`.
    pub fn start(bootstrap: &str, group: &str, topic: &str, settings: &[&str]) -> Self {
        let mut args = vec![bootstrap, group, topic];
        args.extend_from_slice(settings);
        Self::run_script("group_consume.py", &args)
    }

    /// Starts `transform.py`: a consume-transform-produce processor in `group`
    /// reading `input` and writing `output` under `transactional_id`; `settings` may
    /// hold its `die=N:POINT`.
    pub fn start_transform(
        bootstrap: &str,
        group: &str,
        (input, output): (&str, &str),
        transactional_id: &str,
        settings: &[&str],
    ) -> Self {
        let mut args = vec![bootstrap, group, input, output, transactional_id];
        args.extend_from_slice(settings);
        Self::run_script("transform.py", &args)
    }

    /// Runs one of tests/kafka_clients/ that prints a JSON line per event and stops
    /// when its stdin says "close".
    fn run_script(name: &str, script_args: &[&str]) -> Self {
        let (mut child, stderr) = spawn_script(name, script_args);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, events) = watch::channel(Events::default());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "unparsed": line }));
                sender.send_modify(|events| events.lines.push(value));
            }
            sender.send_modify(|events| events.ended = true);
        });
        GroupConsumer {
            child,
            stdin,
            events,
            stderr,
        }
    }

    /// What it printed so far.
    pub fn events(&self) -> Events {
        self.events.borrow().clone()
    }

    /// Waits (at most `within`) until `done` holds of its events; panics with them
    /// otherwise.
    pub async fn wait_for(
        &mut self,
        within: Duration,
        what: &str,
        done: impl Fn(&Events) -> bool,
    ) -> Events {
        let waited = tokio::time::timeout(within, self.events.wait_for(|e| done(e) || e.ended))
            .await
            .is_ok();
        let events = self.events();
        match waited {
            true if done(&events) => events,
            _ => panic!(
                "consumer: {what} not seen within {within:?}; events: {:?}\nstderr:\n{}",
                events.lines,
                self.stderr.lock().unwrap_or_else(PoisonError::into_inner)
            ),
        }
    }

    /// Asks it to close (a leave of the group) and waits until it did.
    pub async fn close(&mut self) -> Events {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"close\n").await;
            let _ = stdin.flush().await;
        }
        self.wait_for(Duration::from_secs(60), "closed", |e| {
            e.lines.iter().any(|l| l.get("closed").is_some())
        })
        .await
    }

    /// SIGKILL: no leave, no last commit; the coordinator must expire its session.
    pub async fn kill(&mut self) -> Events {
        let _ = self.child.kill().await;
        let _ =
            tokio::time::timeout(Duration::from_secs(10), self.events.wait_for(|e| e.ended)).await;
        self.events()
    }
}
