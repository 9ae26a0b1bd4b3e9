//! Admission: which calls may be in flight, which wait, and in what order waiting calls start.
//!
//! A call is *in flight* from the moment it is admitted until its isolate is freed, whether it
//! is running JavaScript or parked on a fetch. Three things bound that set, so that no input
//! can make the daemon hold an unbounded amount of work:
//!
//! * **slots** — at most `max_in_flight` calls per daemon and `max_in_flight_per_tenant` per
//!   tenant (a mounted server);
//! * **memory** — a call starts only while the daemon-wide isolate memory has room for a new
//!   isolate (or nothing else is in flight, so a lone call can always start);
//! * **the queue** — calls that cannot start yet wait, at most `max_queued` in all and
//!   `max_queued_per_tenant` per tenant, each for at most `queue_timeout`. Past any of these a
//!   call gets [`Busy`] at once: a clear refusal, never a hang.
//!
//! **Fairness.** Waiting calls are kept per tenant and started round-robin across tenants, one
//! call per tenant per round. A tenant with hundreds of calls parked on a slow upstream holds
//! at most its own slots and its own share of the queue; another tenant's calls start as soon
//! as a slot and memory are free, without waiting behind it.
//!
//! **Code-mode scripts** are admitted by a second [`Admission`] of the same kind
//! ([`Admission::without_memory`]; see `serve::code_mode`), with slots and a queue of their own
//! and no memory check, since each script's isolate is then admitted by the pool as a call.
//! [`Busy`]'s messages name the `[sandbox]` settings of tool calls; that admission words its
//! refusals itself.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// Memory a new isolate is expected to need before its handler allocates anything, with room
/// to spare.
const ISOLATE_START_BYTES: usize = 1024 * 1024;

/// Isolate memory across the daemon: every call's instance draws on it as it grows, and
/// admission holds new calls back while it is nearly used up.
#[derive(Debug)]
pub struct IsolateMemory {
    limit: usize,
    used: AtomicUsize,
    /// Highest `used` since the last [`IsolateMemory::take_peak`].
    peak: AtomicUsize,
}

impl IsolateMemory {
    pub fn new(limit: usize) -> Arc<IsolateMemory> {
        Arc::new(IsolateMemory { limit, used: AtomicUsize::new(0), peak: AtomicUsize::new(0) })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit under the limit.
    pub(super) fn take(&self, bytes: usize) -> bool {
        let taken = self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|total| *total <= self.limit)
        });
        match taken {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    pub(super) fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// The peak since the last call, resetting it to the current use.
    pub(super) fn take_peak(&self) -> usize {
        self.peak.swap(self.used(), Ordering::Relaxed)
    }
}

/// Admission limits; see the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionLimits {
    pub max_in_flight: usize,
    pub max_in_flight_per_tenant: usize,
    pub max_queued: usize,
    pub max_queued_per_tenant: usize,
    pub queue_timeout: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            max_in_flight: 4096,
            max_in_flight_per_tenant: 1024,
            max_queued: 256,
            max_queued_per_tenant: 64,
            queue_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a call was refused instead of started. The message names the setting to raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Busy {
    /// The queue is full (`max_queued` calls already wait).
    Queue { limit: usize },
    /// This tenant already has `max_queued_per_tenant` calls waiting.
    TenantQueue { limit: usize },
    /// The call waited `queue_timeout` without a slot becoming free.
    Waited { waited: Duration, reason: Blocked },
}

/// What a waiting call was waiting for, when it gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    Daemon { limit: usize },
    Tenant { limit: usize },
    Memory { budget: usize },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocked::Daemon { limit } => write!(f, "the daemon already runs {limit} calls ([sandbox] max_in_flight)"),
            Blocked::Tenant { limit } => {
                write!(f, "this server already runs {limit} calls ([sandbox] max_in_flight_per_server)")
            }
            Blocked::Memory { budget } => write!(
                f,
                "running calls use the daemon's isolate memory ({} MiB, [sandbox] memory_budget_mb)",
                budget / (1024 * 1024)
            ),
        }
    }
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Busy::Queue { limit } => write!(
                f,
                "the daemon is at capacity and {limit} calls are already waiting ([sandbox] queue); retry shortly"
            ),
            Busy::TenantQueue { limit } => write!(
                f,
                "this server is at capacity and {limit} of its calls are already waiting \
                 ([sandbox] max_queued_per_server); retry shortly"
            ),
            Busy::Waited { waited, reason } => write!(
                f,
                "the call waited {} ms for a slot and was not started ([sandbox] queue_timeout_ms): {reason}; retry shortly",
                waited.as_millis()
            ),
        }
    }
}

/// Why [`Admission::acquire`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Busy(Busy),
    Closed,
}

#[derive(Default)]
struct Tenant {
    in_flight: usize,
    waiters: VecDeque<oneshot::Sender<()>>,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    queued: usize,
    tenants: HashMap<Arc<str>, Tenant>,
    /// Tenants with waiting calls, in the order they are served next.
    ring: VecDeque<Arc<str>>,
    closed: bool,
}

pub struct Admission {
    limits: AdmissionLimits,
    /// The isolate memory new calls need room in; `None` admits by slots alone.
    memory: Option<Arc<IsolateMemory>>,
    state: Mutex<State>,
}

/// An admitted call's slot; dropping it lets the next waiting call start.
pub struct Permit {
    admission: Arc<Admission>,
    tenant: Arc<str>,
}

impl Permit {
    pub(super) fn tenant(&self) -> &Arc<str> {
        &self.tenant
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission.release(&self.tenant);
    }
}

/// A queued call. If it is dropped (the caller went away, the wait timed out) after a slot
/// was already handed to it, the slot is passed on.
struct Waiting {
    admission: Arc<Admission>,
    tenant: Arc<str>,
    granted: oneshot::Receiver<()>,
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.granted.close();
        if self.granted.try_recv().is_ok() {
            self.admission.release(&self.tenant);
            return;
        }
        // Forget this (and any other abandoned) waiter so it does not hold a queue place.
        let mut state = self.admission.lock();
        let state = &mut *state;
        if let Some(tenant) = state.tenants.get_mut(&self.tenant) {
            let before = tenant.waiters.len();
            tenant.waiters.retain(|waiter| !waiter.is_closed());
            state.queued -= before - tenant.waiters.len();
        }
        self.admission.forget_idle(state, &self.tenant);
    }
}

impl Admission {
    pub(super) fn new(limits: AdmissionLimits, memory: Arc<IsolateMemory>) -> Arc<Admission> {
        Arc::new(Admission { limits, memory: Some(memory), state: Mutex::new(State::default()) })
    }

    /// An admission bounded by slots and the queue only, for work whose isolates another
    /// admission already holds to the memory budget.
    pub(in crate::serve) fn without_memory(limits: AdmissionLimits) -> Arc<Admission> {
        Arc::new(Admission { limits, memory: None, state: Mutex::new(State::default()) })
    }

    pub(super) fn limits(&self) -> &AdmissionLimits {
        &self.limits
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a call for `tenant`, waiting in the queue if it cannot start at once.
    pub(in crate::serve) async fn acquire(self: &Arc<Self>, tenant: &str) -> Result<Permit, Refused> {
        let (grant, granted) = oneshot::channel();
        let tenant: Arc<str> = {
            let mut state = self.lock();
            if state.closed {
                return Err(Refused::Closed);
            }
            let key = match state.tenants.get_key_value(tenant) {
                Some((key, _)) => Arc::clone(key),
                None => Arc::from(tenant),
            };
            if self.blocked(&state, &key).is_none() {
                self.start(&mut state, &key);
                return Ok(Permit { admission: Arc::clone(self), tenant: key });
            }
            if state.queued >= self.limits.max_queued {
                return Err(Refused::Busy(Busy::Queue { limit: self.limits.max_queued }));
            }
            let entry = state.tenants.entry(Arc::clone(&key)).or_default();
            if entry.waiters.len() >= self.limits.max_queued_per_tenant {
                return Err(Refused::Busy(Busy::TenantQueue { limit: self.limits.max_queued_per_tenant }));
            }
            entry.waiters.push_back(grant);
            if entry.waiters.len() == 1 {
                state.ring.push_back(Arc::clone(&key));
            }
            state.queued += 1;
            key
        };
        let mut waiting = Waiting { admission: Arc::clone(self), tenant, granted, done: false };
        match tokio::time::timeout(self.limits.queue_timeout, &mut waiting.granted).await {
            Ok(Ok(())) => {
                waiting.done = true;
                Ok(Permit { admission: Arc::clone(self), tenant: Arc::clone(&waiting.tenant) })
            }
            // The sender was dropped: the pool closed while the call waited.
            Ok(Err(_)) => Err(Refused::Closed),
            Err(_) => {
                let reason = {
                    let state = self.lock();
                    self.blocked(&state, &waiting.tenant)
                }
                .unwrap_or(Blocked::Daemon { limit: self.limits.max_in_flight });
                Err(Refused::Busy(Busy::Waited { waited: self.limits.queue_timeout, reason }))
            }
        }
    }

    /// Calls admitted and not yet finished, and calls waiting.
    pub(super) fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.in_flight, state.queued)
    }

    /// Refuses new calls and fails waiting ones with `Closed`; admitted calls finish.
    pub(super) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.ring.clear();
        state.queued = 0;
        for tenant in state.tenants.values_mut() {
            tenant.waiters.clear();
        }
    }

    /// What keeps a new call for `tenant` from starting now, if anything.
    fn blocked(&self, state: &State, tenant: &str) -> Option<Blocked> {
        let limits = &self.limits;
        if state.in_flight >= limits.max_in_flight {
            return Some(Blocked::Daemon { limit: limits.max_in_flight });
        }
        let running = state.tenants.get(tenant).map_or(0, |t| t.in_flight);
        if running >= limits.max_in_flight_per_tenant {
            return Some(Blocked::Tenant { limit: limits.max_in_flight_per_tenant });
        }
        if let Some(memory) = &self.memory {
            let memory_full = memory.used().saturating_add(ISOLATE_START_BYTES) > memory.limit();
            if state.in_flight > 0 && memory_full {
                return Some(Blocked::Memory { budget: memory.limit() });
            }
        }
        None
    }

    fn start(&self, state: &mut State, tenant: &Arc<str>) {
        state.in_flight += 1;
        state.tenants.entry(Arc::clone(tenant)).or_default().in_flight += 1;
    }

    fn release(&self, tenant: &Arc<str>) {
        let mut state = self.lock();
        let state = &mut *state;
        state.in_flight -= 1;
        if let Some(entry) = state.tenants.get_mut(tenant) {
            entry.in_flight -= 1;
        }
        self.dispatch(state);
        self.forget_idle(state, tenant);
    }

    /// Starts waiting calls, one per tenant per round, while slots and memory allow.
    fn dispatch(&self, state: &mut State) {
        // Each tenant in the ring is looked at once per round; a round in which nobody
        // could start ends the dispatch.
        let mut unable = 0;
        while unable < state.ring.len() {
            let Some(key) = state.ring.pop_front() else {
                break;
            };
            match self.blocked(state, &key) {
                Some(Blocked::Tenant { .. }) => {
                    state.ring.push_back(key);
                    unable += 1;
                    continue;
                }
                Some(_) => {
                    // Daemon-wide: nobody can start.
                    state.ring.push_front(key);
                    return;
                }
                None => {}
            }
            let mut started = false;
            let tenant = state.tenants.entry(Arc::clone(&key)).or_default();
            while let Some(waiter) = tenant.waiters.pop_front() {
                state.queued -= 1;
                if waiter.send(()).is_ok() {
                    started = true;
                    break;
                }
            }
            let more = !tenant.waiters.is_empty();
            if started {
                self.start(state, &key);
                unable = 0;
            }
            if more {
                state.ring.push_back(key);
            } else {
                self.forget_idle(state, &key);
            }
        }
    }

    /// Drops the bookkeeping of a tenant with nothing in flight or waiting, so that the map
    /// does not grow with every server ever called.
    fn forget_idle(&self, state: &mut State, tenant: &Arc<str>) {
        let idle = state.tenants.get(tenant).is_some_and(|t| t.in_flight == 0 && t.waiters.is_empty());
        if idle {
            state.tenants.remove(tenant);
            state.ring.retain(|key| key != tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limits: AdmissionLimits) -> Arc<Admission> {
        Admission::new(limits, IsolateMemory::new(1 << 30))
    }

    /// Starts an acquire for `tenant` that has to wait, and returns once it is queued.
    async fn queue_one(
        admission: &Arc<Admission>,
        tenant: &'static str,
    ) -> tokio::task::JoinHandle<Result<(), Refused>> {
        let queued_before = admission.counts().1;
        let waiting = tokio::spawn({
            let admission = Arc::clone(admission);
            async move { admission.acquire(tenant).await.map(|_| ()) }
        });
        while admission.counts().1 == queued_before {
            tokio::task::yield_now().await;
        }
        waiting
    }

    fn limits(in_flight: usize, per_tenant: usize, queued: usize, per_tenant_queued: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_in_flight: in_flight,
            max_in_flight_per_tenant: per_tenant,
            max_queued: queued,
            max_queued_per_tenant: per_tenant_queued,
            queue_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn refuses_at_once_past_the_queue_and_names_the_setting() {
        let admission = admission(limits(1, 1, 1, 1));
        let _running = admission.acquire("a").await.unwrap();
        let waiting = queue_one(&admission, "a").await;
        let Err(Refused::Busy(busy)) = admission.acquire("b").await else {
            panic!("expected busy");
        };
        assert_eq!(busy, Busy::Queue { limit: 1 });
        assert!(busy.to_string().contains("[sandbox] queue"), "{busy}");
        drop(_running);
        waiting.await.unwrap().unwrap();
        assert_eq!(admission.counts(), (0, 0));
    }

    #[tokio::test]
    async fn a_tenant_at_its_cap_does_not_block_another() {
        let admission = admission(limits(10, 2, 10, 1));
        let a1 = admission.acquire("a").await.unwrap();
        let _a2 = admission.acquire("a").await.unwrap();
        // a's third call waits; a's fourth is past its share of the queue.
        let a3 = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.acquire("a").await.map(|_| ()) }
        });
        while admission.counts().1 == 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(admission.acquire("a").await, Err(Refused::Busy(Busy::TenantQueue { limit: 1 }))));
        // b starts at once.
        let _b = admission.acquire("b").await.unwrap();
        drop(a1);
        a3.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn waiting_calls_start_round_robin_across_tenants() {
        let admission = admission(limits(1, 1, 100, 100));
        let first = admission.acquire("a").await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for tenant in ["a", "a", "a", "b", "b", "c"] {
            let shared = Arc::clone(&admission);
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let permit = shared.acquire(tenant).await.unwrap();
                order.lock().unwrap().push(tenant);
                tokio::task::yield_now().await;
                drop(permit);
            }));
            // Queue them in a known order.
            let expected = tasks.len();
            while admission.counts().1 < expected {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a", "b", "c", "a", "b", "a"]);
        assert_eq!(admission.counts(), (0, 0));
    }

    #[tokio::test]
    async fn a_queued_call_gives_up_after_the_timeout_and_frees_its_place() {
        let admission = admission(AdmissionLimits { queue_timeout: Duration::from_millis(100), ..limits(1, 1, 1, 1) });
        let _running = admission.acquire("a").await.unwrap();
        let Err(Refused::Busy(busy)) = admission.acquire("b").await else {
            panic!("expected busy");
        };
        assert!(matches!(busy, Busy::Waited { reason: Blocked::Daemon { limit: 1 }, .. }), "{busy:?}");
        assert!(busy.to_string().contains("queue_timeout_ms"), "{busy}");
        assert_eq!(admission.counts(), (1, 0));
    }

    #[tokio::test]
    async fn an_abandoned_waiter_passes_its_slot_on() {
        let admission = admission(limits(1, 1, 10, 10));
        let running = admission.acquire("a").await.unwrap();
        let abandoned = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.acquire("b").await.map(|_| ()) }
        });
        let patient = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.acquire("c").await.map(|_| ()) }
        });
        while admission.counts().1 < 2 {
            tokio::task::yield_now().await;
        }
        abandoned.abort();
        let _ = abandoned.await;
        drop(running);
        patient.await.unwrap().unwrap();
        assert_eq!(admission.counts(), (0, 0));
    }

    #[tokio::test]
    async fn memory_in_use_holds_new_calls_but_never_a_lone_one() {
        let memory = IsolateMemory::new(4 * 1024 * 1024);
        let admission = Admission::new(
            AdmissionLimits { queue_timeout: Duration::from_millis(50), ..limits(10, 10, 10, 10) },
            Arc::clone(&memory),
        );
        assert!(memory.take(3 * 1024 * 1024 + 1));
        // Nothing in flight: a call starts even though the budget looks used.
        let lone = admission.acquire("a").await.unwrap();
        let Err(Refused::Busy(Busy::Waited { reason, .. })) = admission.acquire("b").await else {
            panic!("expected to wait for memory");
        };
        assert!(matches!(reason, Blocked::Memory { .. }), "{reason:?}");
        memory.give_back(3 * 1024 * 1024 + 1);
        let _second = admission.acquire("b").await.unwrap();
        drop(lone);
    }

    #[tokio::test]
    async fn closing_fails_waiters_and_new_calls() {
        let admission = admission(limits(1, 1, 10, 10));
        let _running = admission.acquire("a").await.unwrap();
        let waiting = queue_one(&admission, "a").await;
        admission.close();
        assert_eq!(waiting.await.unwrap(), Err(Refused::Closed));
        assert!(matches!(admission.acquire("b").await, Err(Refused::Closed)));
    }
}
