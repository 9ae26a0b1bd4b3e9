//! Connections that send nothing, drip their headers or sit idle are closed, and a flood of them
//! cannot take the daemon's descriptors: at `[server] max_connections` a new connection replaces
//! the oldest silent one, or is answered 503 at once (attack run D6: 300 idle connections stopped
//! `/healthz`).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

/// Reads until the peer closes (or `within` passes: `None`); what was read.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut read = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    closed.ok().map(|()| String::from_utf8_lossy(&read).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed_and_a_flood_is_refused_at_once() {
    let app = spawn_app_with(AppOptions {
        env: vec![
            ("MCPBOOTD_SERVER__HEADER_READ_TIMEOUT_MS".into(), "400".into()),
            ("MCPBOOTD_SERVER__MAX_CONNECTIONS".into(), "16".into()),
        ],
        ..AppOptions::default()
    })
    .await;

    // Silent connections fill every slot; a new connection takes the oldest one's place, so a
    // health probe still gets through.
    let mut silent = Vec::new();
    for _ in 0..16 {
        silent.push(TcpStream::connect(app.address).await.unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut probe = TcpStream::connect(app.address).await.unwrap();
    probe.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut probe, Duration::from_secs(5)).await.expect("answered and closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let oldest = read_until_closed(&mut silent[0], Duration::from_millis(300)).await;
    assert!(oldest.is_some_and(|read| read.is_empty()), "the oldest silent connection made room");

    // The silent ones are closed by the header timeout.
    for stream in &mut silent[1..] {
        assert!(read_until_closed(stream, Duration::from_secs(10)).await.is_some(), "a silent connection was closed");
    }

    // Connections that have started a request are not evicted: past the cap, one more is
    // answered 503 at once, not queued.
    let mut started = Vec::new();
    for _ in 0..16 {
        let mut stream = TcpStream::connect(app.address).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        started.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(app.address).await.unwrap();
    extra.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut extra, Duration::from_secs(5)).await.expect("answered and closed");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_connections"), "{answer}");
    for stream in &mut started {
        assert!(read_until_closed(stream, Duration::from_secs(10)).await.is_some(), "a started connection was closed");
    }
    assert_eq!(app.get("/healthz").await.0, 200);

    // Dripping headers do not keep a connection open past the timeout.
    let mut drip = TcpStream::connect(app.address).await.unwrap();
    drip.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let dripping = async {
        for n in 0..100 {
            if drip.write_all(format!("x-drip-{n}: 1\r\n").as_bytes()).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    let cut_off = tokio::time::timeout(Duration::from_secs(10), dripping).await.unwrap_or(false);
    assert!(cut_off, "a connection dripping its headers was closed");

    // A keep-alive connection idle after its response is closed too.
    let mut idle = TcpStream::connect(app.address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut idle, Duration::from_secs(10)).await.expect("closed after idling");
    assert!(answer.starts_with("HTTP/1.1 200"), "answered first: {answer}");
}

/// A connection that never sends a byte does not hold up shutdown until its header-read timer
/// runs out (it held every shutdown for `header_read_timeout_ms` before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_does_not_delay_shutdown() {
    let app = spawn_app_with(AppOptions {
        env: vec![("MCPBOOTD_SERVER__HEADER_READ_TIMEOUT_MS".into(), "120000".into())],
        ..AppOptions::default()
    })
    .await;
    let mut silent = TcpStream::connect(app.address).await.unwrap();
    // Let the daemon accept it and start waiting for its first byte.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopped = tokio::time::timeout(Duration::from_secs(60), app.stop()).await;
    assert!(stopped.is_ok(), "shutdown waited for a connection that never spoke");
    assert_eq!(read_until_closed(&mut silent, Duration::from_secs(5)).await.as_deref(), Some(""), "and it is closed");
}
