//! The egress log: one entry per hop of every request a call made, allowed or not, with the
//! operator-facing reason for a refusal or a failure. It goes into the call log; handlers never
//! see it.
//!
//! **Every hop that leaves is logged.** A hop is entered in the log before it is sent
//! ([`EgressLog::sending`]) and its entry completed when it is answered or fails. Taking the
//! log for the call log ([`EgressLog::take`]) closes it: a hop still in flight then is logged
//! as cut off by the end of the call (a handler may start a fetch and return without awaiting
//! it, and the call's end aborts it whether or not the upstream already has it), and a hop that
//! would start later is not sent at all. The entry and the close are decided under one lock,
//! so no hop can slip between them, whichever task or process the fetch runs on.
//!
//! An entry also says what the upstream protection did with the hop (waited for `Retry-After`
//! or a rate limit and for how long, refused it, let it through as a breaker's probe) and how
//! the cache took part (see `upstream` and `cache`). A hop answered from the cache is logged as
//! well, though it never left.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::policy::Failure;
use crate::catalog::EgressRecord;
use crate::states::{CacheUse, UpstreamDecision};

/// The reason logged for a hop that was in flight when its call ended.
pub const CUT_OFF: &str = "the call ended before the response arrived; the request was cancelled";

/// One call's (or one documentation fetch's) log.
#[derive(Default)]
pub struct EgressLog {
    state: Mutex<LogState>,
}

#[derive(Default)]
struct LogState {
    entries: Vec<EgressRecord>,
    /// Hops sent and not finished: their entry's index and when they started.
    in_flight: Vec<(usize, Instant)>,
    /// Taken for the call log: nothing more may be sent under it.
    closed: bool,
}

/// Where a hop went.
pub struct Hop<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub started: Instant,
    /// Names of the credentials added to this hop.
    pub credentials: &'a [String],
    /// What the upstream protection did with it, and how long it waited before it was sent.
    pub decision: Option<UpstreamDecision>,
    pub waited: Option<Duration>,
    /// How the cache took part, when it did.
    pub cache: Option<CacheUse>,
}

impl<'a> Hop<'a> {
    pub fn of(method: &'a str, url: &'a url::Url, started: Instant) -> Hop<'a> {
        Hop::at(method, url.host_str().unwrap_or(""), url.path(), started)
    }

    /// A hop to `host` and `path`, with nothing decided about it yet.
    pub fn at(method: &'a str, host: &'a str, path: &'a str, started: Instant) -> Hop<'a> {
        Hop { method, host, path, started, credentials: &[], decision: None, waited: None, cache: None }
    }
}

/// A hop entered in the log as sent; [`EgressLog::finished`] completes its entry.
#[must_use = "a sent hop's entry is completed with `EgressLog::finished`"]
pub struct Sent {
    index: usize,
    started: Instant,
}

impl EgressLog {
    /// A hop refused before it was sent.
    pub fn refused(&self, hop: &Hop<'_>, failure: &Failure) {
        let mut state = self.lock();
        if !state.closed {
            state.entries.push(entry(hop, Some(failure)));
        }
    }

    /// Enters a hop about to be sent; `None` once the log was taken, and then it must not be sent.
    pub fn sending(&self, hop: &Hop<'_>) -> Option<Sent> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        let index = state.entries.len();
        state.entries.push(entry(hop, None));
        state.in_flight.push((index, hop.started));
        Some(Sent { index, started: hop.started })
    }

    /// A hop answered from the cache, which was not sent: `status`, `bytes` and `scrubs` as for
    /// [`Self::finished`]. False once the log was taken, and then the answer must not be used.
    pub fn answered_from_cache(&self, hop: &Hop<'_>, answer: (u16, usize, usize)) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        let mut entry = entry(hop, None);
        let (status, bytes, scrubs) = answer;
        entry.status = Some(i64::from(status));
        entry.bytes = bytes as i64;
        entry.scrubs = scrubs as i64;
        state.entries.push(entry);
        true
    }

    /// Sets how the cache took part in a sent hop, once its answer decided it.
    pub fn cache_use(&self, sent: &Sent, cache: CacheUse) {
        let mut state = self.lock();
        if let Some(entry) = state.entries.get_mut(sent.index) {
            entry.cache = Some(cache);
        }
    }

    /// Completes a sent hop's entry: its response (`status`, `bytes` of body as the handler got
    /// it, `scrubs` credential values taken out of it) or its failure. A hop that finishes after
    /// the log was taken was logged as cut off then.
    pub fn finished(&self, sent: Sent, answer: Result<(u16, usize, usize), &Failure>) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        state.in_flight.retain(|(index, _)| *index != sent.index);
        let duration_us = micros_since(sent.started);
        let Some(entry) = state.entries.get_mut(sent.index) else { return };
        entry.duration_us = duration_us;
        match answer {
            Ok((status, bytes, scrubs)) => {
                entry.status = Some(i64::from(status));
                entry.bytes = bytes as i64;
                entry.scrubs = scrubs as i64;
            }
            Err(failure) => {
                entry.allowed = !failure.is_policy_decision();
                entry.reason = Some(failure.reason().to_string());
            }
        }
    }

    /// Everything logged, hops still in flight as cut off by the end of the call; closes the log.
    pub fn take(&self) -> Vec<EgressRecord> {
        let mut state = self.lock();
        state.closed = true;
        let LogState { entries, in_flight, .. } = &mut *state;
        for (index, started) in in_flight.drain(..) {
            if let Some(entry) = entries.get_mut(index) {
                entry.duration_us = micros_since(started);
                entry.reason = Some(CUT_OFF.to_string());
            }
        }
        std::mem::take(entries)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A hop's entry before its answer: refused with `failure`, or sent and not answered yet.
fn entry(hop: &Hop<'_>, failure: Option<&Failure>) -> EgressRecord {
    EgressRecord {
        method: hop.method.chars().take(16).collect(),
        host: hop.host.chars().take(255).collect(),
        // The query string is left out: it often carries API keys.
        path: hop.path.chars().take(512).collect(),
        allowed: !failure.is_some_and(Failure::is_policy_decision),
        status: None,
        bytes: 0,
        duration_us: micros_since(hop.started),
        reason: failure.map(|f| f.reason().to_string()),
        credentials: hop.credentials.to_vec(),
        scrubs: 0,
        decision: hop.decision,
        waited_ms: hop.waited.map(|waited| waited.as_millis() as i64),
        cache: hop.cache,
    }
}

fn micros_since(started: Instant) -> i64 {
    started.elapsed().as_micros() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(path: &str) -> Hop<'_> {
        Hop::at("GET", "api.example.test", path, Instant::now())
    }

    #[test]
    fn a_hop_in_flight_when_the_log_is_taken_is_logged_as_cut_off_and_nothing_is_sent_after() {
        let log = EgressLog::default();
        let answered = log.sending(&hop("/answered")).unwrap();
        log.finished(answered, Ok((200, 12, 0)));
        let failed = log.sending(&hop("/failed")).unwrap();
        log.finished(failed, Err(&Failure::Network("connection reset".into())));
        log.refused(&hop("/refused"), &Failure::Refused("only http and https URLs can be fetched".into()));
        let dangling = log.sending(&hop("/dangling")).unwrap();

        let taken = log.take();
        let by_path = |path: &str| taken.iter().find(|e| e.path == path).unwrap();
        assert_eq!(taken.len(), 4);
        assert_eq!((by_path("/answered").status, by_path("/answered").bytes), (Some(200), 12));
        assert_eq!(by_path("/failed").reason.as_deref(), Some("connection reset"));
        assert!(!by_path("/refused").allowed);
        let cut_off = by_path("/dangling");
        assert_eq!((cut_off.allowed, cut_off.status, cut_off.reason.as_deref()), (true, None, Some(CUT_OFF)));

        // What finishes or starts after the log was taken changes nothing, and is not sent.
        log.finished(dangling, Ok((200, 1, 0)));
        assert!(log.sending(&hop("/late")).is_none());
        log.refused(&hop("/late-refusal"), &Failure::Refused("no".into()));
        assert!(log.take().is_empty());
    }
}
