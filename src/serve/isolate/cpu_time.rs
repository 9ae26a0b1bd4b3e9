//! The CPU time of the current thread, which the sandbox's CPU limit counts.

use std::time::Duration;

/// CPU time the current thread has used. Every turn of a call runs on its worker thread,
/// so the difference across a turn is what the call itself used, however busy the machine
/// is (a wall-clock measure would charge a handler for time the OS gave other processes). It
/// budgets work on blocking threads too (the reading of an API description), which is why it
/// lives here rather than in an engine.
#[cfg(unix)]
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0))
}

/// Elsewhere, the monotonic clock since an arbitrary origin (wall time inside turns).
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}
