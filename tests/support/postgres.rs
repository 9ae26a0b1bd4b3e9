//! PostgreSQL for the tests. `fresh_database` gives a test a new, empty database on the server in
//! `DATABASE_URL` (`.ci/run` sets it from `.ci/postgres`) or, without one, on a private cluster that
//! this test process starts once and that goes away with the process. `PrivateCluster` is a cluster
//! of a test's own, for tests that stop and restart the server under traffic.
//!
//! Included by the integration tests and, through `#[path]`, by unit tests in src: it uses nothing
//! but std, tokio and sqlx. It starts clusters the way `.ci/postgres` does; keep the two in step.
#![allow(dead_code)] // each includer uses a different part

use std::hash::BuildHasher;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection;

/// The URL of a new, empty database `mcpbootd_test_<random hex>`, or None when the PostgreSQL half
/// of tests is to be skipped: no `DATABASE_URL` and `MCPBOOTD_SKIP_POSTGRES_TESTS=1`.
pub async fn fresh_database() -> Option<String> {
    let server = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if skipping() => return None,
        // Started once per test process, by whichever test gets here first; the others wait.
        _ => blocking(|| SHARED.get_or_init(Cluster::start).url()).await,
    };
    let name = format!("mcpbootd_test_{:016x}", random());
    let mut connection = sqlx::PgConnection::connect(&server)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the PostgreSQL server for the tests: {e}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut connection)
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    let _ = connection.close().await;
    Some(with_database(&server, &name))
}

/// Whether tests leave out PostgreSQL: `MCPBOOTD_SKIP_POSTGRES_TESTS=1` and no `DATABASE_URL`.
pub fn skipping() -> bool {
    std::env::var_os("DATABASE_URL").is_none_or(|url| url.is_empty())
        && std::env::var("MCPBOOTD_SKIP_POSTGRES_TESTS").is_ok_and(|skip| skip == "1")
}

/// A cluster of one test's own, in a temp directory on a free port. Dropping it stops it (`-m
/// immediate`) and removes the directory. Needs PostgreSQL installed here, even with `DATABASE_URL`.
pub struct PrivateCluster(Cluster);

impl PrivateCluster {
    pub async fn start() -> PrivateCluster {
        PrivateCluster(blocking(Cluster::start).await)
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// Stops the server (`pg_ctl stop -m fast`: open connections are cut), waiting until it is down.
    pub fn stop(&self) {
        self.0.pg_ctl(&["stop", "-w", "-t", "60", "-m", "fast", "-D", &self.0.path("data")]);
    }

    /// Starts the server again, on the same port and data, and returns once it accepts connections.
    pub fn start_again(&self) {
        self.0.start_server();
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        // Closing the reaper's stdin is its signal to stop the server and remove the directory.
        drop(self.0.reaper.stdin.take());
        let _ = self.0.reaper.wait();
    }
}

/// The per-process cluster behind `fresh_database`. Statics are never dropped: its reaper stops it
/// when the process exits.
static SHARED: OnceLock<Cluster> = OnceLock::new();

struct Cluster {
    /// Holds `data/`, the server's `log` and its socket; owned by the user the server runs as.
    dir: PathBuf,
    port: u16,
    /// The directory of initdb, pg_ctl and postgres.
    bin: PathBuf,
    /// PostgreSQL refuses to run as root: as root, it runs as the `postgres` system user.
    as_postgres: bool,
    /// `sh` waiting for EOF on its stdin, whose write end only this process holds. The end closes
    /// when dropped or when the process exits, however it exits (tests don't drop statics, and a
    /// killed process drops nothing); the reaper then stops the server and removes `dir`.
    reaper: Child,
}

impl Cluster {
    fn start() -> Cluster {
        let started = std::time::Instant::now();
        let bin = postgres_bin().unwrap_or_else(|| {
            panic!(
                "PostgreSQL is not installed, and the tests need a server: set DATABASE_URL to one the tests \
                 may create databases on, install PostgreSQL (Debian/Ubuntu: apt-get install postgresql), \
                 or set MCPBOOTD_SKIP_POSTGRES_TESTS=1 to skip the PostgreSQL tests"
            )
        });
        let as_postgres = is_root();
        let dir = std::env::temp_dir().join(format!("mcpbootd-postgres-{:016x}", random()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(&dir));
        }
        // Spawned before initdb, so that a failed start is cleaned up too.
        let reaper = Command::new("sh")
            .args(["-c", r#"read line; "$@" stop -m immediate -D "$0/data" >/dev/null 2>&1; rm -rf "$0""#])
            .arg(&dir)
            .args(if as_postgres { &["runuser", "-u", "postgres", "--"][..] } else { &[] })
            .arg(bin.join("pg_ctl"))
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C to the tests must not kill it before it has cleaned up.
            .process_group(0)
            .spawn()
            .expect("cannot spawn sh");
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("no free port").port();
        let cluster = Cluster { dir, port, bin, as_postgres, reaper };
        // Trust auth on 127.0.0.1 only, and a C locale so text sorts by bytes as it does in SQLite.
        // --no-sync (and fsync=off below): a throwaway cluster, nothing in it must survive a crash.
        let initdb =
            ["-D", &cluster.path("data"), "-A", "trust", "-U", "mcpbootd", "-E", "UTF8", "--locale=C", "--no-sync"];
        let out = cluster.command("initdb").args(initdb).output().expect("cannot run initdb");
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        cluster.start_server();
        let (dir, port) = (cluster.dir.display(), cluster.port);
        eprintln!("started PostgreSQL in {dir} on port {port} in {:.1?}", started.elapsed());
        cluster
    }

    /// `pg_ctl start`, returning once the server accepts connections. The socket goes in `dir`
    /// (`-k`): /var/run/postgresql may not exist or be writable.
    fn start_server(&self) {
        let options = format!(
            "-p {} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300",
            self.port,
            self.dir.display()
        );
        let (data, log) = (self.path("data"), self.path("log"));
        if !self.try_pg_ctl(&["start", "-w", "-t", "60", "-D", &data, "-l", &log, "-o", &options]) {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            panic!("PostgreSQL did not start in {}:\n{log}", self.dir.display());
        }
    }

    /// A file or directory in `dir`.
    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://mcpbootd@127.0.0.1:{}/postgres", self.port)
    }

    /// A PostgreSQL program, run as the cluster's owner.
    fn command(&self, program: &str) -> Command {
        let mut command = if self.as_postgres {
            let mut runuser = Command::new("runuser");
            runuser.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            runuser
        } else {
            Command::new(self.bin.join(program))
        };
        command.current_dir(&self.dir).stdin(Stdio::null());
        command
    }

    fn try_pg_ctl(&self, args: &[&str]) -> bool {
        // pg_ctl -l hands the server the log file for stdout and stderr, so output() returns.
        let out = self.command("pg_ctl").args(args).output().expect("cannot run pg_ctl");
        if !out.status.success() {
            eprintln!("pg_ctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        out.status.success()
    }

    fn pg_ctl(&self, args: &[&str]) {
        assert!(self.try_pg_ctl(args), "pg_ctl {args:?} failed");
    }
}

/// The newest installed server's bin directory (Debian's layout), else wherever initdb is on PATH.
fn postgres_bin() -> Option<PathBuf> {
    let version = |bin: &PathBuf| -> Vec<u32> {
        let name = bin.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        name.unwrap_or_default().split('.').map(|part| part.parse().unwrap_or(0)).collect()
    };
    let installed = std::fs::read_dir("/usr/lib/postgresql").into_iter().flatten().flatten();
    let newest = installed.map(|entry| entry.path().join("bin")).filter(|bin| bin.join("initdb").is_file());
    newest
        .max_by_key(version)
        .or_else(|| std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| dir.join("initdb").is_file()))
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("cannot run id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

fn run(command: &mut Command) {
    let status = command.status().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(status.success(), "{command:?} failed: {status}");
}

/// `url` with its database (the path) replaced by `name`; the query string is kept.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(base, query)| (base, Some(query)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let base = base[authority..].find('/').map_or(base, |slash| &base[..authority + slash]);
    format!("{base}/{name}{}", query.map(|q| format!("?{q}")).unwrap_or_default())
}

/// Distinct on every call, across threads and processes; no need for a rand dependency.
fn random() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    std::collections::hash_map::RandomState::new().hash_one((call, std::process::id(), nanos))
}

/// Runs blocking work (initdb, pg_ctl) off the async runtime; a panic in it is the caller's panic.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}
