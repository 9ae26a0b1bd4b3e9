//! The catalog handle: opening a SQLite file or a PostgreSQL database and bringing its schema up
//! to date, the connection pools every other module of the catalog queries through, the lock
//! that keeps a second daemon off a SQLite file, and the probes and online backup.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::Executor;
use sqlx::any::AnyPoolOptions;

use super::error::CatalogError;
use super::registrations::{NewToolsetServer, Registrations};
use super::sql::Backend;
use super::values::now_millis;
use crate::config::CatalogLocation;
use crate::tasks::Tasks;

/// The catalog's connection pools. On SQLite, two pools on one file: every write goes through
/// `writer`, a single connection, so writers queue in the pool instead of meeting SQLite's busy
/// handler (which sleeps for milliseconds); reads use `reader` and, with WAL, never wait for a
/// writer. On PostgreSQL, which has row locks and MVCC, both are one pool.
// The fields are the room's: each module of the catalog queries through the pools and writes
// leases in the replica's name.
#[derive(Clone)]
pub struct Catalog {
    pub(super) backend: Backend,
    /// This daemon among the replicas sharing the catalog.
    pub(super) replica: Arc<Replica>,
    /// The PostgreSQL URL (with its password) a listening connection opens; `None` on SQLite.
    pub(super) listen_url: Option<Arc<str>>,
    pub(super) reader: AnyPool,
    pub(super) writer: AnyPool,
    /// Toolset registrations, written in batches by their own writer.
    registrations: Registrations,
    /// The exclusive lock on `<catalog>.lock` (SQLite only), held until [`Catalog::close`]: a
    /// second daemon on the same file is refused instead of sharing it unawares.
    lock: Arc<Mutex<Option<std::fs::File>>>,
    /// The SQLite file; `None` on PostgreSQL.
    file: Option<Arc<Path>>,
    /// Where the registration writer and the change listener run, so shutdown waits for them.
    pub(super) tasks: Tasks,
}

/// This daemon among the replicas sharing a catalog.
#[derive(Debug, Clone)]
pub struct Replica {
    /// Its name: written as the owner of the leases it holds, and as the PostgreSQL
    /// `application_name` of its connections, so the changes it announces name it.
    pub id: String,
    /// How long a lease lasts without being renewed.
    pub lease_ttl: Duration,
}

impl Replica {
    /// The only daemon on its catalog (a SQLite file, a tool).
    pub fn single() -> Replica {
        Replica { id: "mcpbootd".into(), lease_ttl: Duration::from_secs(15) }
    }
}

impl Catalog {
    /// Opens (creating if needed) the catalog and brings its schema up to date; its background
    /// tasks run on `tasks`.
    pub async fn open(location: &CatalogLocation, replica: Replica, tasks: &Tasks) -> anyhow::Result<Catalog> {
        sqlx::any::install_default_drivers();
        let (backend, reader, writer, lock, listen_url) = match location {
            CatalogLocation::Sqlite(path) => {
                let (reader, writer, lock) = open_sqlite(path).await?;
                (Backend::Sqlite, reader, writer, Some(lock), None)
            }
            CatalogLocation::Postgres { url, password_file, max_connections } => {
                let url = postgres_url(url, password_file.as_deref(), &replica.id)?;
                let pool = open_postgres(&url, location, *max_connections).await?;
                (Backend::Postgres, pool.clone(), pool, None, Some(Arc::from(url)))
            }
        };
        let registrations = Registrations::start(writer.clone(), tasks);
        Ok(Catalog {
            backend,
            replica: Arc::new(replica),
            listen_url,
            reader,
            writer,
            registrations,
            lock: Arc::new(Mutex::new(lock)),
            file: match location {
                CatalogLocation::Sqlite(path) => Some(Arc::from(path.as_path())),
                CatalogLocation::Postgres { .. } => None,
            },
            tasks: tasks.clone(),
        })
    }

    /// Opens a SQLite catalog file by path (tests and tools), its background tasks on a tracker
    /// of its own.
    pub async fn open_file(path: &Path) -> anyhow::Result<Catalog> {
        Catalog::open(&CatalogLocation::Sqlite(path.to_path_buf()), Replica::single(), &Tasks::new()).await
    }

    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The statement for this catalog's backend, where the two engines' SQL differs.
    pub(crate) fn sql(&self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self.backend {
            Backend::Sqlite => sqlite,
            Backend::Postgres => postgres,
        }
    }

    /// A read-only transaction whose statements all see one snapshot of the catalog (SQLite's
    /// read transactions do; PostgreSQL's default gives each statement its own).
    pub(crate) async fn snapshot(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, CatalogError> {
        let mut transaction = self.reader.begin().await?;
        if self.backend == Backend::Postgres {
            transaction.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").await?;
        }
        Ok(transaction)
    }

    /// Whether the catalog answers a query within a second (a probe must not hang on a database
    /// that is down while the pool waits to connect).
    pub async fn ping(&self) -> bool {
        let ping = sqlx::query("SELECT 1").execute(&self.reader);
        matches!(tokio::time::timeout(Duration::from_secs(1), ping).await, Ok(Ok(_)))
    }

    /// Whether the catalog can be written now: one small committed write (a full disk fails
    /// only writes, so only a write tells). A writer busy for longer than `wait` counts as
    /// writable: busy is not broken.
    pub async fn writable(&self, wait: Duration) -> bool {
        let probe = sqlx::query(
            "INSERT INTO write_probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        )
        .bind(now_millis())
        .execute(&self.writer);
        match tokio::time::timeout(wait, probe).await {
            Ok(Ok(_)) | Err(_) => true,
            Ok(Err(error)) => {
                tracing::warn!(%error, "the catalog cannot be written");
                false
            }
        }
    }

    /// A consistent copy of a SQLite catalog, taken while the daemon serves: `VACUUM INTO` writes
    /// one snapshot of it to a new file beside it, which is opened and then unlinked, so the open
    /// file is all that is left of it and nothing stays behind however the download ends. Other
    /// processes cannot read the catalog while the daemon has it open (see [`SQLITE_VFS`]), so
    /// this is how it is backed up online. `None` on PostgreSQL, which its own tools back up.
    pub async fn backup(&self) -> Result<Option<std::fs::File>, CatalogError> {
        let Some(catalog) = &self.file else {
            return Ok(None);
        };
        let copy = PathBuf::from(format!("{}.backup-{}-{}", catalog.display(), std::process::id(), now_millis()));
        let written =
            sqlx::query("VACUUM INTO $1").bind(copy.to_string_lossy().into_owned()).execute(&self.reader).await;
        let opened = written.map_err(CatalogError::from).and_then(|_| {
            std::fs::File::open(&copy)
                .map_err(|error| CatalogError::Unwritable(format!("cannot open the copy {}: {error}", copy.display())))
        });
        // Whether the copy was written, half written or not at all, its name goes now.
        let _ = std::fs::remove_file(&copy);
        opened.map(Some)
    }

    /// Stores a ready toolset server, its generation and tools; returns the generation id once
    /// the transaction is committed (and synced). Registrations arriving together share one
    /// transaction (see [`Registrations`]).
    pub async fn create_toolset_server(&self, new: NewToolsetServer) -> Result<i64, CatalogError> {
        self.registrations.register(new).await
    }

    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
        // Dropping the file releases the lock; the file stays, so the next start reuses it.
        self.lock.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// The SQLite VFS the catalog is opened with: `unix-excl` keeps WAL's index (the `-shm` file
/// other processes would share) in this process's heap, shared by its connections, which still
/// lock each other in memory so readers and the writer work side by side as with `unix`. The
/// usual `-shm` is a file mapped into memory, and every transaction writes into that mapping; if
/// the file turns unwritable under the daemon (`chattr +i`, a file system remounted read-only
/// after disk errors), the kernel answers the next such write with SIGBUS, which kills the
/// process. On the heap a catalog that cannot be written costs the writes that fail. The VFS
/// also holds a POSIX lock on the database file for the life of the connections, so no other
/// process opens the catalog meanwhile: the daemon's lock file (`lock_catalog`) already keeps
/// other daemons out, and no other process could share a heap index. Backups taken while the
/// daemon runs therefore go through it ([`Catalog::backup`], `GET /admin/backup`) instead of
/// `sqlite3 .backup`, which is told the database is locked.
const SQLITE_VFS: &str = "unix-excl";

async fn open_sqlite(path: &Path) -> anyhow::Result<(AnyPool, AnyPool, std::fs::File)> {
    use anyhow::Context;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the catalog directory {}", dir.display()))?;
    }
    let lock = lock_catalog(path)?;
    // `mode=rwc`: create the file when missing. `vfs=unix-excl`: see [`SQLITE_VFS`].
    let url = format!("sqlite://{}?mode=rwc&vfs={SQLITE_VFS}", path.display());
    let open = |connections: u32, writer: bool| {
        let pool = AnyPoolOptions::new().max_connections(connections).after_connect(|connection, _| {
            Box::pin(async move {
                // WAL with synchronous = FULL: every commit syncs the WAL before it returns, so a
                // registration answered 201 survives a crash of the process *and* of the machine
                // (with NORMAL the last commits could roll back on power loss). The cost is one
                // fsync per write transaction; the call log amortises it over a batch.
                connection
                    .execute(
                        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;
                         PRAGMA busy_timeout = 5000;",
                    )
                    .await?;
                Ok(())
            })
        });
        let pool = if writer {
            // A statement that fails inside a transaction (SQLITE_FULL, an I/O error) can leave
            // SQLite rolled back while the connection still holds an open transaction, and every
            // later write on it would sit in that transaction and never commit. And SQLite opens
            // a file it may not write (immutable, on a file system remounted read-only) read-only
            // instead of failing, so a connection opened then would refuse every write for the
            // rest of its life, even once the file is writable again. Such connections are
            // discarded instead of going back to the pool; a fresh one replaces them.
            pool.after_release(|connection, _| Box::pin(async move { Ok(ready_to_write(connection).await) }))
        } else {
            pool
        };
        pool.connect(&url)
    };
    let writer =
        open(1, true).await.with_context(|| format!("cannot open the catalog {} ([catalog] path)", path.display()))?;
    sqlx::migrate!("./migrations/sqlite").run(&writer).await.context("cannot apply catalog migrations")?;
    let reader =
        open(4, false).await.with_context(|| format!("cannot open the catalog {} ([catalog] path)", path.display()))?;
    Ok((reader, writer, lock))
}

/// Whether a SQLite connection can take the next write: `BEGIN IMMEDIATE` succeeds only outside
/// a transaction, and rewriting the header's `user_version` with its own value, rolled back, is
/// a write that a connection holding a read-only file refuses. `BEGIN IMMEDIATE` alone is not
/// enough: with WAL's index on the heap it takes the write lock in memory and succeeds on such a
/// connection, whose first real write then fails.
async fn ready_to_write(connection: &mut sqlx::AnyConnection) -> bool {
    if connection.execute("BEGIN IMMEDIATE").await.is_err() {
        return false;
    }
    let rewritten = match sqlx::query_scalar::<_, i64>("PRAGMA user_version").fetch_one(&mut *connection).await {
        Ok(version) => {
            connection.execute(sqlx::AssertSqlSafe(format!("PRAGMA user_version = {version}"))).await.is_ok()
        }
        Err(_) => false,
    };
    connection.execute("ROLLBACK").await.is_ok() && rewritten
}

/// The URL connections open: the configured one with the password from `password_file` and
/// the replica's name as `application_name`.
fn postgres_url(url: &str, password_file: Option<&Path>, replica: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let shown = || CatalogLocation::Postgres { url: url.into(), password_file: None, max_connections: 1 }.display();
    let mut parsed = url::Url::parse(url).with_context(|| format!("invalid [catalog] url {}", shown()))?;
    if let Some(file) = password_file {
        let password = std::fs::read_to_string(file).with_context(|| {
            format!("cannot read the catalog password from {} ([catalog] password_file)", file.display())
        })?;
        parsed
            .set_password(Some(password.trim_end_matches(['\r', '\n'])))
            .map_err(|()| anyhow::anyhow!("[catalog] url {} cannot carry a password", shown()))?;
    }
    if !parsed.query_pairs().any(|(key, _)| key == "application_name") {
        parsed.query_pairs_mut().append_pair("application_name", replica);
    }
    Ok(parsed.into())
}

async fn open_postgres(url: &str, location: &CatalogLocation, max_connections: u32) -> anyhow::Result<AnyPool> {
    use anyhow::Context;
    let pool = AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to the catalog database {} ([catalog] url)", location.display()))?;
    sqlx::migrate!("./migrations/postgres").run(&pool).await.context("cannot apply catalog migrations")?;
    Ok(pool)
}

/// Takes the catalog's lock file, or says who holds it. Also the first write into the catalog's
/// directory, so a permission problem is reported here, plainly.
fn lock_catalog(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    let lock_path = PathBuf::from(format!("{}.lock", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&lock_path)
        .map_err(|error| unwritable(&lock_path, error))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let holder = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            anyhow::bail!(
                "the catalog {} is in use by another mcpbootd process{holder}, which holds {}; stop it first, \
                 or give this daemon its own [catalog] path",
                path.display(),
                lock_path.display()
            );
        }
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(anyhow::anyhow!("cannot lock {}: {error}", lock_path.display()));
        }
    }
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// An error opening a file in the catalog's directory, saying whose the directory is when the
/// answer is "permission denied".
fn unwritable(path: &Path, error: std::io::Error) -> anyhow::Error {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if error.kind() != std::io::ErrorKind::PermissionDenied {
        return anyhow::anyhow!("cannot create {}: {error} ([catalog] path)", path.display());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata(dir) {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let me = unsafe { libc::geteuid() };
            return anyhow::anyhow!(
                "cannot write in the catalog directory {}: permission denied (it belongs to uid {}, mode {:o}; \
                 the daemon runs as uid {me}); make it writable for this user or set [catalog] path",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            );
        }
    }
    anyhow::anyhow!(
        "cannot write in the catalog directory {}: permission denied; make it writable or set [catalog] path",
        dir.display()
    )
}

/// PostgreSQL for the catalog's tests (shared with the integration tests).
#[cfg(test)]
#[path = "../../tests/support/postgres.rs"]
pub mod postgres_support;

/// A catalog of each backend, for tests that run on both: SQLite at `sqlite_file`, and a fresh
/// PostgreSQL database unless PostgreSQL tests are skipped.
#[cfg(test)]
pub async fn catalogs_of_each_backend(sqlite_file: &Path) -> Vec<Catalog> {
    let mut catalogs = vec![Catalog::open_file(sqlite_file).await.expect("the SQLite catalog opens")];
    if let Some(url) = postgres_support::fresh_database().await {
        let location = CatalogLocation::Postgres { url, password_file: None, max_connections: 4 };
        let catalog = Catalog::open(&location, Replica::single(), &crate::tasks::Tasks::new()).await;
        catalogs.push(catalog.expect("the PostgreSQL catalog opens"));
    }
    catalogs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_daemon_on_the_same_catalog_is_refused_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let first = Catalog::open_file(&path).await.unwrap();
        let error = Catalog::open_file(&path).await.err().expect("the second open is refused").to_string();
        assert!(error.contains("is in use by another mcpbootd process"), "{error}");
        assert!(error.contains(&format!("(pid {})", std::process::id())), "{error}");
        assert!(error.contains("[catalog] path"), "{error}");
        first.close().await;
        Catalog::open_file(&path).await.expect("the lock is released at close").close().await;
    }

    #[test]
    fn a_postgres_url_gets_the_password_file_and_the_replica_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "p@ss word\n").unwrap();
        let url =
            postgres_url("postgres://mcpbootd@db.example.com:5432/catalog?sslmode=verify-full", Some(&file), "r-1")
                .unwrap();
        let parsed = url::Url::parse(&url).unwrap();
        assert_eq!(parsed.password(), Some("p%40ss%20word"), "the trailing newline is not part of it: {url}");
        let query: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
        assert_eq!(
            query,
            [("sslmode".into(), "verify-full".into()), ("application_name".into(), "r-1".into())],
            "{url}"
        );
        // The operator's own application_name is kept.
        let own = postgres_url("postgres://db/catalog?application_name=mine", None, "r-1").unwrap();
        assert!(own.ends_with("?application_name=mine"), "{own}");
        let missing = postgres_url("postgres://db/catalog", Some(&dir.path().join("absent")), "r-1").unwrap_err();
        assert!(format!("{missing:#}").contains("[catalog] password_file"), "{missing:#}");
    }

    #[test]
    fn a_shown_postgres_url_hides_its_password() {
        let location = CatalogLocation::Postgres {
            url: "postgres://mcpbootd:secret@db/catalog".into(),
            password_file: None,
            max_connections: 1,
        };
        assert_eq!(location.display(), "postgres://mcpbootd:***@db/catalog");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn an_unwritable_catalog_directory_is_reported_with_its_owner() {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return; // root may write anywhere: nothing to observe
        }
        let dir = tempfile::tempdir().unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let error = Catalog::open_file(&locked.join("catalog.db")).await.err().unwrap().to_string();
        assert!(error.contains("permission denied") && error.contains("belongs to uid"), "{error}");
    }
}
