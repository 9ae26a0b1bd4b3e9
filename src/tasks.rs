//! The daemon's background work and its one shutdown signal.
//!
//! Everything the daemon spawns beyond a request's own future (the remount at start-up,
//! generation jobs, the catalog's registration writer and change listener, the OAuth issuer's
//! discovery, the call-log writer) runs on one [`TaskTracker`], and everything that stops when
//! shutdown starts (generation jobs, `/events` streams, loops that retry or listen) watches one
//! [`CancellationToken`]. `app` cancels the token when the shutdown signal arrives, drains HTTP
//! requests, and then waits for the tracker, so nothing the daemon started is cut off silently and
//! an open stream cannot hold the drain to its deadline. Tasks that serve requests (the
//! registration writer) keep working through the drain and watch [`Tasks::requests_drained`]
//! instead, which [`Tasks::wait`] signals once no request can queue more work.
//!
//! This is the only module that calls `tokio::spawn` (a tidy test holds it to that), apart from
//! the HTTP connections, which the server's own graceful shutdown waits for, and the watcher of a
//! second shutdown signal, which must outlive the drain.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

/// Cheap to clone; every clone is the same set of tasks and the same signal.
#[derive(Clone, Default)]
pub struct Tasks {
    shutdown: CancellationToken,
    drained: CancellationToken,
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

    /// Resolves once requests are no longer served (the drain ended or ran out of time), so
    /// nothing can queue more work for a task that serves them.
    pub fn requests_drained(&self) -> WaitForCancellationFutureOwned {
        self.drained.clone().cancelled_owned()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Starts shutdown: every task watching [`Tasks::shutdown_started`] wraps up.
    pub fn start_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Called once requests are drained: accepts no new tasks, tells the tasks that serve requests
    /// to finish what is queued, and waits up to `within` for the running ones; false if some
    /// were still running when the time was up.
    pub async fn wait(&self, within: Duration) -> bool {
        self.tracker.close();
        self.drained.cancel();
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

    #[tokio::test]
    async fn tasks_serving_requests_are_told_once_requests_are_drained() {
        let tasks = Tasks::new();
        let drained = tasks.requests_drained();
        tasks.spawn(drained);
        tasks.start_shutdown();
        tokio::task::yield_now().await;
        assert_eq!(tasks.running(), 1, "shutdown starting is not the drain's end");
        assert!(tasks.wait(Duration::from_secs(5)).await, "waiting signals the drain's end");
        assert_eq!(tasks.running(), 0);
    }
}
