//! Replicas benchmark: what moving the catalog to PostgreSQL, and adding a second replica on it,
//! costs a call. Prints figures from one run, side by side, so ratios survive a noisy machine.
//!
//! `cargo bench --bench replicas` (add `-- --quick` for 2 s windows instead of 5 s). PostgreSQL is
//! the server in `DATABASE_URL` (each setup gets a fresh database on it) or, without one, a private
//! cluster the bench starts (`tests/support/postgres.rs`); `MCPBOOTD_SKIP_POSTGRES_TESTS=1` without
//! `DATABASE_URL` skips the PostgreSQL rows. Measures calls/s and p50/p99 of
//! * pure calls (64 clients) and I/O-bound calls (256 clients, one fetch to a loopback upstream
//!   that answers after 100 ms),
//! * on one replica on SQLite, one replica on PostgreSQL, the same behind a loopback round-robin
//!   TCP proxy, and two replicas on one PostgreSQL database behind that proxy;
//!
//! then the ratios: PostgreSQL / SQLite, the proxy's cost, and two replicas / one replica (both
//! behind the proxy, so that the proxy's own cost cancels out). Every call writes a call-log record,
//! which is where the catalog is on the path of a call.
//!
//! Each row gets fresh daemons on a fresh catalog, so no call log or calls left queued by an
//! earlier row weigh on it. Both replicas run in this process, on the cores the clients, the proxy
//! and PostgreSQL use too: on a small machine the two-replica rows measure what a second replica
//! costs, not what it adds.

// The crate denies `unwrap` in the daemon; a benchmark may unwrap: a failed unwrap stops it
// with its cause, which is what it should do.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::load::{
    RawCall, Report, Window, loaded_daemon_env, ms, print_left_queued, register, spawn_raw_clients, start_upstream,
};

mod support;

#[path = "../tests/support/postgres.rs"]
mod postgres;

/// The key that encrypts upstream credentials in the catalog: a PostgreSQL catalog needs one
/// configured (there is no catalog file beside which to keep it), and replicas sharing a catalog
/// must share it.
const CREDENTIALS_KEY: &str = "6d6370626f6f74642062656e6368206b657920666f72207265706c6963617321";

/// How long replica B may take to serve a server registered through replica A. Replicas follow each
/// other through LISTEN/NOTIFY within milliseconds; the reconcile interval is the safety net.
const FOLLOW_WITHIN: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq)]
enum Setup {
    Sqlite,
    Postgres,
    PostgresProxied,
    TwoReplicas,
}

impl Setup {
    const ALL: [Setup; 4] = [Setup::Sqlite, Setup::Postgres, Setup::PostgresProxied, Setup::TwoReplicas];

    fn label(self) -> &'static str {
        match self {
            Setup::Sqlite => "SQLite",
            Setup::Postgres => "PostgreSQL",
            Setup::PostgresProxied => "PostgreSQL, via proxy",
            Setup::TwoReplicas => "PostgreSQL, 2 replicas via proxy",
        }
    }
}

struct Workload {
    label: &'static str,
    clients: usize,
    handler: String,
    /// The upstream's answer time, for the ideal rate (clients / wait); None for pure calls.
    upstream_wait: Option<Duration>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let length = if quick { Duration::from_secs(2) } else { Duration::from_secs(5) };
    // All clients start at once, and their burst of connections overflows the daemon's listen
    // queue (128, tokio's default): the kernel drops those SYNs and the client retries them after
    // 1 s. Two seconds of warm-up keep those calls out of the measured window.
    let warmup = Duration::from_secs(2);
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    println!(
        "mcpbootd replicas benchmark: {cpus} CPUs, {} s windows after {} s warm-up",
        length.as_secs(),
        warmup.as_secs()
    );
    println!(
        "note: both replicas run in this process, on the same {cpus} CPUs as the clients, the proxy and PostgreSQL: \
         the 2-replica rows measure a second replica's overhead, not scale-out"
    );

    let upstream = start_upstream().await?;
    let slow_url = format!("http://api.bench.test:{}/slow", upstream.port());
    let workloads = [
        Workload {
            label: "pure",
            clients: 64,
            handler: "return { sum: args.a + args.b };".into(),
            upstream_wait: None,
        },
        Workload {
            label: "I/O-bound",
            clients: 256,
            handler: format!("const r = await fetch('{slow_url}'); return await r.json();"),
            upstream_wait: Some(Duration::from_millis(100)),
        },
    ];

    let mut reports: Vec<Vec<Option<Report>>> = Vec::new();
    for workload in &workloads {
        println!();
        println!("{} calls, {} clients:", workload.label, workload.clients);
        let mut row = Vec::new();
        for setup in Setup::ALL {
            let name = format!("{}: {}", workload.label, setup.label());
            let report = measure(setup, workload, warmup, length, &name).await?;
            if report.is_none() {
                println!("{name:<44} skipped: no PostgreSQL (MCPBOOTD_SKIP_POSTGRES_TESTS=1 and no DATABASE_URL)");
            }
            row.push(report);
        }
        reports.push(row);
    }

    // Ratios of calls/s, p50 and p99: above 1x, the first setup has the higher figure.
    println!();
    let at = |w: usize, setup: Setup| reports[w][Setup::ALL.iter().position(|&s| s == setup).unwrap()].as_ref();
    for (w, workload) in workloads.iter().enumerate() {
        for (name, over, under) in [
            ("PostgreSQL / SQLite", Setup::Postgres, Setup::Sqlite),
            ("proxy / direct, PostgreSQL", Setup::PostgresProxied, Setup::Postgres),
            ("2 replicas / 1 replica, proxy", Setup::TwoReplicas, Setup::PostgresProxied),
        ] {
            print_ratio(&format!("{}: {name}", workload.label), at(w, over), at(w, under));
        }
    }
    Ok(())
}

/// One row: fresh daemons for `setup`, a server whose tool runs the workload's handler, and the
/// workload's clients calling it over a window. None when PostgreSQL is skipped.
async fn measure(
    setup: Setup,
    workload: &Workload,
    warmup: Duration,
    length: Duration,
    name: &str,
) -> anyhow::Result<Option<Report>> {
    let daemons = match setup {
        Setup::Sqlite => vec![support::start_daemon(loaded_daemon_env()).await?],
        Setup::Postgres | Setup::PostgresProxied | Setup::TwoReplicas => {
            let Some(url) = postgres::fresh_database().await else { return Ok(None) };
            let replicas: &[&str] = if setup == Setup::TwoReplicas { &["bench-a", "bench-b"] } else { &["bench-a"] };
            let mut daemons = Vec::new();
            for replica in replicas {
                let mut env = loaded_daemon_env();
                env.push(("MCPBOOTD_CATALOG__URL", url.clone()));
                env.push(("MCPBOOTD_CREDENTIALS__KEY", CREDENTIALS_KEY.to_string()));
                env.push(("MCPBOOTD_CATALOG__REPLICA_ID", replica.to_string()));
                daemons.push(support::start_daemon(env).await?);
            }
            daemons
        }
    };
    let http = reqwest::Client::new();
    let registered = Instant::now();
    register(&http, daemons[0].address, "bench", &workload.handler).await?;
    // Registered through A: B learns of it from the catalog. Measuring before B serves it would
    // count B's "no such server" replies as failures.
    let mut followed = None;
    for daemon in &daemons[1..] {
        followed = Some(wait_until_served(daemon.address, registered).await?);
    }

    let addresses: Vec<SocketAddr> = daemons.iter().map(|d| d.address).collect();
    let proxy = match setup {
        Setup::PostgresProxied | Setup::TwoReplicas => Some(Proxy::start(addresses.clone()).await?),
        Setup::Sqlite | Setup::Postgres => None,
    };
    let target = proxy.as_ref().map_or(addresses[0], |proxy| proxy.address);
    let window = Window::after(warmup, length);
    let overflows_before = listen_overflows();
    let report =
        Report::collect(window, spawn_raw_clients(&RawCall::new(target, "bench"), workload.clients, window)).await?;
    let overflows = listen_overflows().zip(overflows_before).map(|(after, before)| after - before);

    let mut extra = String::new();
    if let Some(wait) = workload.upstream_wait {
        let ideal = workload.clients as f64 / wait.as_secs_f64();
        extra.push_str(&format!("ideal {ideal:>5.0}/s = {:>5.1}%   ", 100.0 * report.rate() / ideal));
    }
    if let Some(proxy) = &proxy {
        // One per client, split evenly between replicas: keep-alive holds each client to its replica.
        let split: Vec<String> = proxy.connections.iter().map(|n| n.load(Ordering::SeqCst).to_string()).collect();
        extra.push_str(&format!("proxied connections {}", split.join("/")));
    }
    report.print(name, &extra);
    if let Some(overflows) = overflows.filter(|&n| n > 0) {
        println!("{:<44} {overflows} connection attempts overflowed a listen queue (retried after 1 s)", "");
    }
    if let Some(followed) = followed {
        println!("{:<44} replica B served the server {:.0} ms after its registration through A", "", ms(followed));
    }
    for address in &addresses {
        print_left_queued(&http, *address).await;
    }
    if let Some(proxy) = proxy {
        proxy.accepting.abort();
    }
    for daemon in daemons {
        daemon.stop().await?;
    }
    Ok(Some(report))
}

/// Calls `bench` through the replica at `address` until a call succeeds, returning how long after
/// `registered` it did (that includes the call itself).
async fn wait_until_served(address: SocketAddr, registered: Instant) -> anyhow::Result<Duration> {
    let call = RawCall::new(address, "bench");
    loop {
        if call.call().await.is_ok() {
            return Ok(registered.elapsed());
        }
        anyhow::ensure!(
            registered.elapsed() < FOLLOW_WITHIN,
            "replica B did not serve the server within {FOLLOW_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A round-robin TCP load balancer on loopback, as an L4 balancer in front of replicas would be:
/// each accepted connection goes to the next backend, and its bytes are copied both ways until
/// either side closes. Round robin is per connection, so a keep-alive client stays on its replica.
struct Proxy {
    address: SocketAddr,
    /// Connections handed to each backend.
    connections: Arc<Vec<AtomicU64>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(backends: Vec<SocketAddr>) -> anyhow::Result<Proxy> {
        // A balancer's listen queue is long. With tokio's default of 128, the clients' first burst of
        // connections would overflow it as well as the daemon's, and the proxy rows pay for it twice.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        let listener = socket.listen(4096)?;
        let address = listener.local_addr()?;
        let connections: Arc<Vec<AtomicU64>> = Arc::new(backends.iter().map(|_| AtomicU64::new(0)).collect());
        let counts = connections.clone();
        let accepting = tokio::spawn(async move {
            let mut next = 0;
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    // Out of file descriptors, say: wait rather than spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let backend = next % backends.len();
                next += 1;
                counts[backend].fetch_add(1, Ordering::SeqCst);
                let backend = backends[backend];
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await else { return };
                    // Requests and replies are small writes: without this, Nagle's algorithm holds
                    // one back for the other side's delayed ACK, adding tens of milliseconds.
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        Ok(Proxy { address, connections, accepting })
    }
}

fn print_ratio(name: &str, over: Option<&Report>, under: Option<&Report>) {
    let (Some(over), Some(under)) = (over, under) else {
        println!("{name:<44} n/a (a row was skipped)");
        return;
    };
    let ratio = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) => format!("{:>6.2}x", a.as_secs_f64() / b.as_secs_f64()),
        _ => format!("{:>7}", "n/a"),
    };
    let rate = match under.rate() > 0.0 {
        true => format!("{:>6.2}x", over.rate() / under.rate()),
        false => format!("{:>7}", "n/a"),
    };
    println!(
        "{name:<44} calls/s {rate}   p50 {}   p99 {}",
        ratio(over.latency(0.50), under.latency(0.50)),
        ratio(over.p99(), under.p99())
    );
}

/// Connection attempts this host's listen queues had no room for (`ListenOverflows` in
/// /proc/net/netstat): each is a SYN dropped and retried a second later. None where not Linux.
fn listen_overflows() -> Option<u64> {
    let netstat = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = netstat.lines().filter(|line| line.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let column = names.split_whitespace().position(|name| name == "ListenOverflows")?;
    values.split_whitespace().nth(column)?.parse().ok()
}
