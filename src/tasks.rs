//! The daemon's background work and its one shutdown signal.
//!
//! Everything the daemon spawns beyond a request's own future (the remount at start-up,
//! generation jobs, registration writes, the call-log writer) runs on one [`TaskTracker`], and
//! everything that stops when shutdown starts (generation jobs, `/events` streams) watches one
//! [`CancellationToken`]. `app` cancels the token when the shutdown signal arrives, drains HTTP
//! requests, and then waits for the tracker, so nothing the daemon started is cut off silently and
//! an open stream cannot hold the drain to its deadline.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

/// Cheap to clone; every clone is the same set of tasks and the same signal.
#[derive(Clone, Default)]
pub struct Tasks {
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    pub fn new() -> Tasks {
        Tasks::default()
    }

    /// Runs `task` in the background; shutdown waits for it.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Resolves once shutdown has started.
    pub fn shutdown_started(&self) -> WaitForCancellationFutureOwned {
        self.shutdown.clone().cancelled_owned()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Starts shutdown: every task watching [`Tasks::shutdown_started`] wraps up.
    pub fn start_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Accepts no new tasks and waits up to `within` for the running ones; false if some were
    /// still running when the time was up.
    pub async fn wait(&self, within: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait()).await.is_ok()
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_signals_tasks_and_waits_for_them() {
        let tasks = Tasks::new();
        let (done, finished) = tokio::sync::oneshot::channel();
        let watcher = tasks.shutdown_started();
        tasks.spawn(async move {
            watcher.await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = done.send(());
        });
        assert!(!tasks.wait(Duration::from_millis(50)).await, "the task waits for the signal");
        tasks.start_shutdown();
        assert!(tasks.is_shutting_down());
        assert!(tasks.wait(Duration::from_secs(5)).await);
        assert!(finished.await.is_ok());
        assert_eq!(tasks.running(), 0);
    }
}
