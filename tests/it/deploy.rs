//! The deployment files against the real binary: what they ask of the kernel lets the daemon run.

use std::process::{Command, Stdio};
use std::time::Duration;

/// The systemd unit's memory protection, applied to the real binary the way systemd applies it
/// (`PR_SET_MDWE`, which refuses to make memory executable that was not): the WebAssembly engine
/// compiles the QuickJS module to machine code at start, so a unit that denies that cannot run
/// the daemon at all.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_systemd_units_memory_protection_lets_the_engine_start() {
    use std::os::unix::process::CommandExt;

    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/systemd/mcpbootd.service"))
        .expect("the systemd unit");
    let deny_write_execute = unit.lines().any(|line| line.trim() == "MemoryDenyWriteExecute=yes");
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpbootd"));
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("MCPBOOTD_CATALOG__PATH", dir.path().join("c.db"))
        .env("MCPBOOTD_LOG__LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if deny_write_execute {
        // SAFETY: prctl is async-signal-safe and touches only the child's own flags.
        unsafe {
            command.pre_exec(|| {
                let flags = libc::PR_MDWE_REFUSE_EXEC_GAIN as libc::c_ulong;
                if libc::prctl(libc::PR_SET_MDWE, flags, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong)
                    != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command.spawn().expect("the daemon starts");
    mcpbootd::install_crypto_provider();
    let http = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..1000 {
        if http.get(format!("http://127.0.0.1:{port}/readyz")).send().await.is_ok_and(|r| r.status() == 200) {
            ready = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert!(
        ready,
        "the daemon did not start under the unit's memory protection: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
