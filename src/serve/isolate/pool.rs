//! A bounded pool of isolate worker threads.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use tokio::sync::oneshot;

use super::engine::{Engine, HostContext};
use super::quickjs::QuickJsEngine;
use super::stack_guard;
use super::{Completion, Invocation, Outcome};

/// Native stack of each worker. QuickJS's stack limit (`SandboxLimits::stack_bytes`) is
/// clamped to fit well inside it.
pub(super) const WORKER_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Why [`IsolatePool::run`] did not run the invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolError {
    /// Every worker is busy and the queue is full.
    Busy,
    /// The pool was closed (or its workers are gone).
    Closed,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolError::Busy => "all isolate workers are busy and the queue is full",
            PoolError::Closed => "the isolate pool is closed",
        })
    }
}

impl std::error::Error for PoolError {}

/// A snapshot of the pool's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub workers: usize,
    /// Workers currently running an invocation.
    pub busy: usize,
    /// Invocations waiting for a worker.
    pub queued: usize,
}

struct Job {
    invocation: Invocation,
    reply: oneshot::Sender<Completion>,
}

#[derive(Default)]
struct Counters {
    busy: AtomicUsize,
    queued: AtomicUsize,
}

/// Runs invocations on `workers` dedicated threads named `mcpbootd-isolate-N`.
pub struct IsolatePool {
    /// `None` once closed: dropping the sender lets workers drain the queue and exit.
    sender: Mutex<Option<Sender<Job>>>,
    counters: Arc<Counters>,
    workers: usize,
}

impl fmt::Debug for IsolatePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsolatePool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl IsolatePool {
    /// A pool of QuickJS workers. `queue_capacity` invocations may wait for a worker
    /// (0: only when a worker is idle); `runtime` is where fetches run.
    pub fn new(workers: usize, queue_capacity: usize, runtime: tokio::runtime::Handle) -> Self {
        Self::with_engine(
            Arc::new(QuickJsEngine::new()),
            workers,
            queue_capacity,
            runtime,
        )
    }

    /// A pool running a given engine.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to create a worker thread.
    pub fn with_engine(
        engine: Arc<dyn Engine>,
        workers: usize,
        queue_capacity: usize,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        let workers = workers.max(1);
        let (sender, receiver) = crossbeam_channel::bounded(queue_capacity);
        let counters = Arc::new(Counters::default());
        for index in 0..workers {
            let receiver = receiver.clone();
            let engine = Arc::clone(&engine);
            let runtime = runtime.clone();
            let counters = Arc::clone(&counters);
            // Detached: workers exit on their own once the pool is closed and drained.
            std::thread::Builder::new()
                .name(format!("mcpbootd-isolate-{index}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || worker(receiver, engine.as_ref(), &runtime, &counters))
                .expect("failed to spawn an isolate worker thread");
        }
        Self {
            sender: Mutex::new(Some(sender)),
            counters,
            workers,
        }
    }

    /// Runs an invocation on the next free worker. Returns [`PoolError::Busy`] at once if
    /// the queue is full rather than waiting for room in it.
    pub async fn run(&self, invocation: Invocation) -> Result<Completion, PoolError> {
        let (reply, completion) = oneshot::channel();
        {
            let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(sender) = sender.as_ref() else {
                return Err(PoolError::Closed);
            };
            // Counted before sending so a worker's decrement can never run first.
            self.counters.queued.fetch_add(1, Ordering::SeqCst);
            if let Err(e) = sender.try_send(Job { invocation, reply }) {
                self.counters.queued.fetch_sub(1, Ordering::SeqCst);
                return Err(match e {
                    TrySendError::Full(_) => PoolError::Busy,
                    TrySendError::Disconnected(_) => PoolError::Closed,
                });
            }
        }
        completion.await.map_err(|_| PoolError::Closed)
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            workers: self.workers,
            busy: self.counters.busy.load(Ordering::SeqCst),
            queued: self.counters.queued.load(Ordering::SeqCst),
        }
    }

    /// Stops accepting invocations; workers finish what is queued and exit.
    pub fn close(&self) {
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

impl Drop for IsolatePool {
    fn drop(&mut self) {
        self.close();
    }
}

fn worker(
    jobs: Receiver<Job>,
    engine: &dyn Engine,
    runtime: &tokio::runtime::Handle,
    counters: &Counters,
) {
    stack_guard::register_worker_thread(WORKER_STACK_BYTES);
    while let Ok(Job { invocation, reply }) = jobs.recv() {
        counters.queued.fetch_sub(1, Ordering::SeqCst);
        if reply.is_closed() {
            // The caller gave up while the job was queued.
            continue;
        }
        counters.busy.fetch_add(1, Ordering::SeqCst);
        let completion = {
            let cancelled = || reply.is_closed();
            let host = HostContext {
                runtime,
                cancelled: &cancelled,
            };
            // An engine bug must cost one call, not the worker thread.
            catch_unwind(AssertUnwindSafe(|| engine.execute(invocation, &host))).unwrap_or_else(
                |_| {
                    Completion::failed(
                        Outcome::Error,
                        "internal isolate error: the engine panicked",
                    )
                },
            )
        };
        counters.busy.fetch_sub(1, Ordering::SeqCst);
        let _ = reply.send(completion);
    }
}
