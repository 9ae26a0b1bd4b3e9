//! Accepting connections, with the limits axum's own `serve` does not set: a connection must send
//! a request's headers within `[server] header_read_timeout_ms` of opening or of its previous
//! response (so silent, dripping and idle keep-alive connections are closed), and at most
//! `[server] max_connections` are open at once. At that cap a new connection takes the place of
//! the oldest one that has not sent a byte yet (a flood of silent sockets cannot lock out a
//! health probe); when every open connection has sent something, the new one is answered 503 and
//! closed at once, so the daemon never runs out of descriptors and nothing queues behind the
//! accept loop.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// What a connection may cost.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

/// The body of the answer to a connection past `max_connections`.
const AT_CAPACITY: &str = "{\"error\":{\"code\":\"busy\",\"message\":\"the daemon has [server] max_connections \
                           connections open; retry shortly\"}}";

/// Connections that have not sent their first byte, oldest first: the ones a new connection may
/// replace at the cap.
#[derive(Default)]
struct SilentConnections {
    queue: Mutex<VecDeque<Arc<Silent>>>,
}

struct Silent {
    /// Set once, by whichever comes first: the connection's first byte or its eviction.
    settled: AtomicBool,
    evict: Notify,
}

impl Silent {
    /// Claims the connection, for its first byte (or its end) or for an eviction; false if the
    /// other side claimed it first.
    fn settle(&self) -> bool {
        !self.settled.swap(true, Ordering::AcqRel)
    }
}

impl SilentConnections {
    fn track(&self, capacity: usize) -> Arc<Silent> {
        let silent = Arc::new(Silent { settled: AtomicBool::new(false), evict: Notify::new() });
        let mut queue = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if queue.len() >= capacity {
            queue.retain(|entry| !entry.settled.load(Ordering::Acquire));
        }
        queue.push_back(silent.clone());
        silent
    }

    /// Tells the oldest still-silent connection to close; false if there is none.
    fn evict_oldest(&self) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(oldest) = queue.pop_front() {
            if oldest.settle() {
                oldest.evict.notify_one();
                return true;
            }
        }
        false
    }
}

/// A connection slot: taken at once, or by closing the oldest silent connection.
async fn take_slot(slots: &Arc<Semaphore>, silent: &SilentConnections) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Some(slot);
    }
    while silent.evict_oldest() {
        // The evicted connection's task gives its slot back as soon as it runs.
        if let Ok(Ok(slot)) = tokio::time::timeout(Duration::from_millis(100), slots.clone().acquire_owned()).await {
            return Some(slot);
        }
    }
    None
}

/// The address a request's connection came from (the client's, or a proxy's in front of it).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub std::net::SocketAddr);

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting and waits for
/// the open connections to finish their requests (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let silent = Arc::new(SilentConnections::default());
    let graceful = GracefulShutdown::new();
    // Connections that have not spoken yet are not watched by `graceful`, but they hold a
    // watcher, which `graceful.shutdown()` waits for: at shutdown they are closed at once
    // instead of when their header-read timer runs out.
    let stopping = tokio_util::sync::CancellationToken::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(limits.header_read_timeout));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (mut stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors or a connection reset before accept: not the listener's end.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = take_slot(&slots, &silent).await else {
            tokio::spawn(async move {
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
                     connection: close\r\ncontent-length: {}\r\n\r\n{AT_CAPACITY}",
                    AT_CAPACITY.len()
                );
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(answer.as_bytes())).await;
            });
            continue;
        };
        // Without TCP_NODELAY, small MCP responses wait on Nagle's algorithm (~40 ms with some clients).
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone().map_request(move |request: Request<Incoming>| {
            let mut request = request.map(axum::body::Body::new);
            request.extensions_mut().insert(ClientAddress(peer));
            request
        }));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let header_read_timeout = limits.header_read_timeout;
        let this = silent.track(limits.max_connections);
        let stopping = stopping.clone();
        tokio::spawn(async move {
            // Telling HTTP/1 from HTTP/2 waits for the first bytes with no timer of its own, so
            // a connection that sends nothing is closed here; hyper's header timer covers the rest.
            let mut first = [0u8; 1];
            let spoke = tokio::select! {
                peeked = tokio::time::timeout(header_read_timeout, stream.peek(&mut first)) => {
                    matches!(peeked, Ok(Ok(1..)))
                }
                () = this.evict.notified() => false,
                () = stopping.cancelled() => false,
            };
            // Its first byte and an eviction may race: whichever settles first decides.
            let evicted = !this.settle();
            if !spoke || evicted {
                drop(slot);
                return;
            }
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let _ = watcher.watch(connection.into_owned()).await;
            drop(slot);
        });
    }
    drop(listener);
    stopping.cancel();
    graceful.shutdown().await;
    Ok(())
}

/// `max_connections`, lowered to what the process's open-file limit leaves after the catalog,
/// the egress client and the isolate workers take theirs.
pub fn effective_max_connections(configured: usize) -> usize {
    const RESERVED: usize = 128;
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct we own.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            let available = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX).saturating_sub(RESERVED).max(16);
            if available < configured {
                tracing::warn!(
                    configured,
                    allowed = available,
                    "[server] max_connections is above what the open-file limit (ulimit -n) leaves; lowered"
                );
                return available;
            }
        }
    }
    configured
}
