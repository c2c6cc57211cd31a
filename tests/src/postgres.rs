//! A throwaway PostgreSQL server for the inbox tests: `initdb` into a temporary dir, on a
//! free 127.0.0.1 port, as a non-root OS user (postgres refuses to run as root: the
//! `postgres` user when it exists, else one created here), started with
//! `pg_ctl start -w` (which returns once it accepts connections), stopped with
//! `pg_ctl stop -m immediate` (a crash: no checkpoint, recovery on the next start) and
//! its dir removed on drop. Binaries come from `IDEM_PG_BIN` or the newest
//! `/usr/lib/postgresql/*/bin` (`scripts/install-deps.sh postgres` installs them).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The OS user created when there is no `postgres` user.
const FALLBACK_USER: &str = "idem-pg";
/// The database superuser `initdb` creates (logins are trusted: a local test server).
const SUPERUSER: &str = "postgres";

pub struct PostgresServer {
    bin: PathBuf,
    /// The OS user the server runs as; `None` when the tests do not run as root.
    os_user: Option<String>,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    running: bool,
    // Keeps the dir alive as long as the server; removed on drop.
    tmp: tempfile::TempDir,
}

impl PostgresServer {
    /// A fresh cluster, started; returns once it accepts connections.
    pub fn start() -> PostgresServer {
        let bin = bin_dir();
        let os_user = if is_root() { Some(os_user()) } else { None };
        let tmp = tempfile::tempdir().expect("temp dir for postgres");
        if let Some(user) = &os_user {
            run(Command::new("chown").arg(user).arg(tmp.path()));
        }
        let mut server = PostgresServer {
            data_dir: tmp.path().join("data"),
            socket_dir: tmp.path().to_path_buf(),
            log_path: tmp.path().join("postgres.log"),
            bin,
            os_user,
            port: 0,
            running: false,
            tmp,
        };
        let mut initdb = server.command("initdb");
        server.run_as(
            initdb
                .arg("-D")
                .arg(&server.data_dir)
                .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
                .arg("--no-instructions"),
        );
        // Another process may take the port between probing and postgres binding it.
        let mut last = String::new();
        for _attempt in 0..3 {
            server.port = free_port();
            match server.try_start() {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        panic!("postgres did not start: {last}");
    }

    /// `postgres://postgres@127.0.0.1:PORT/{database}`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        let mut createdb = self.command("createdb");
        self.run_as(
            createdb
                .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-p"])
                .arg(self.port.to_string())
                .arg(name),
        );
        self.url(name)
    }

    /// A crash stop (`pg_ctl stop -m immediate`) then a start on the same port and data:
    /// what was committed survives, open transactions are gone.
    pub fn restart(&mut self) {
        self.stop_immediate();
        if let Err(e) = self.try_start() {
            panic!("postgres did not restart: {e}");
        }
    }

    /// Starts again, on the same port and data, a server [`PostgresServer::stop_immediate`]
    /// stopped (crash recovery runs first); returns once it accepts connections.
    pub fn start_again(&mut self) {
        if self.running {
            return;
        }
        if let Err(e) = self.try_start() {
            panic!("postgres did not start again: {e}");
        }
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once, without a
    /// checkpoint, like a crash.
    pub fn stop_immediate(&mut self) {
        if !self.running {
            return;
        }
        let mut stop = self.command("pg_ctl");
        let _ = self.output_as(stop.arg("stop").arg("-D").arg(&self.data_dir).args([
            "-m",
            "immediate",
            "-w",
        ]));
        self.running = false;
    }

    fn try_start(&mut self) -> Result<(), String> {
        let options = format!(
            "-p {} -h 127.0.0.1 -k {} -c fsync=off -c max_connections=50",
            self.port,
            self.socket_dir.display()
        );
        let mut start = self.command("pg_ctl");
        let output = self.output_as(
            start
                .arg("start")
                .args(["-w", "-t", "30"])
                .arg("-D")
                .arg(&self.data_dir)
                .arg("-l")
                .arg(&self.log_path)
                .arg("-o")
                .arg(options),
        );
        if output.status.success() {
            self.running = true;
            Ok(())
        } else {
            Err(format!(
                "pg_ctl start: {}; {}",
                String::from_utf8_lossy(&output.stderr),
                self.log_tail()
            ))
        }
    }

    fn log_tail(&self) -> String {
        let (tail, _) = crate::log_tail::log_tail(&self.log_path, 20);
        format!("postgres log tail:\n{tail}")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.os_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    fn run_as(&self, command: &mut Command) {
        let output = self.output_as(command);
        assert!(
            output.status.success(),
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn output_as(&self, command: &mut Command) -> Output {
        command
            .current_dir(self.tmp.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop_immediate();
    }
}

/// `IDEM_PG_BIN`, else the newest `/usr/lib/postgresql/<version>/bin`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("IDEM_PG_BIN") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL: run `scripts/install-deps.sh postgres` (Debian's postgresql) \
             or set IDEM_PG_BIN to a dir holding initdb, pg_ctl and postgres"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `postgres` if that OS user exists, else [`FALLBACK_USER`], created if missing.
fn os_user() -> String {
    for user in [SUPERUSER, FALLBACK_USER] {
        let exists = Command::new("id")
            .arg("-u")
            .arg(user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if exists {
            return user.to_string();
        }
    }
    // Two test binaries may race to create it; the loser finds it there.
    let _ = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(FALLBACK_USER)
        .status();
    FALLBACK_USER.to_string()
}

fn run(command: &mut Command) {
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(status.success(), "{command:?} failed: {status}");
}

fn free_port() -> u16 {
    let probe = TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    probe.local_addr().expect("probed port").port()
}
