//! Upstream protection: the egress keeps handlers from sending requests to an upstream that
//! asked for a pause, that is failing, or that the operator rations for a server. Every hop the
//! policy allowed and the cache could not answer passes [`Upstreams::admit`] before it is sent,
//! and reports how it was answered to [`Upstreams::answered`]. Origins are compared as the web
//! serialises them (`scheme://host[:port]`, the port left out when it is the scheme's default).
//!
//! 1. **`Retry-After`** (`[egress] respect_retry_after`). An origin that answers 429 or 503 with
//!    `Retry-After` (seconds or an HTTP date, capped at [`MAX_RETRY_AFTER`]) gets no further
//!    request under the same credentials until then. The hold is kept per origin *and* per
//!    credential identity (a digest of the credential values the hop carried, or "none";
//!    see [`CredentialIdentity`]): an upstream that rations each token answers one user's token
//!    with 429 while serving the others, so one person's pause must not stop everyone. Requests
//!    without credentials share one hold per origin, as they share the daemon's address, which
//!    is what an upstream rations them by.
//! 2. **A circuit breaker per origin** (`breaker_failures`, `breaker_open_ms`). That many
//!    consecutive failures open it: connection failures, and 502, 503 and 504 answers, which
//!    say the origin (or its gateway) is unavailable. Other 5xx answers do not count: a 500 is
//!    often one request's fault, and a handler of one server could otherwise provoke it to shut
//!    an origin off for every server. While open, requests fail at once; after `breaker_open_ms`
//!    one probe is let through (half-open): an answer that is not a failure closes the breaker,
//!    a failure opens it again. A probe whose answer never comes (its call ended) gives way to
//!    another after `breaker_open_ms`, so a dead upstream receives at most one probe per period.
//!    The breaker is shared by every server that reaches the origin: an origin that is down is
//!    down for all of them.
//! 3. **A server's rate limit per origin** ([`UpstreamLimits`], from the server's limits). Each
//!    origin named has its own GCRA limiter (`governor`), per server, so one server's traffic
//!    never uses up another's allowance.
//!
//! A request waits for a `Retry-After` or a rate limit only when the wait ends before the call's
//! deadline; otherwise it fails at once with the time left ([`Held`]), so a handler can tell its
//! caller when to try again. Waiting holds no thread: the call's isolate is parked meanwhile.
//! The state kept is bounded: an origin is tracked only while it has a hold or failures, and at
//! most [`MAX_TRACKED_ORIGINS`] at once (beyond that, new origins go untracked: protection fails
//! open rather than refusing requests it knows nothing against).

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};

use super::inject::CredentialIdentity;
use crate::config::EgressConfig;
use crate::states::UpstreamDecision;

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// Origins with a hold or failures tracked at most.
pub const MAX_TRACKED_ORIGINS: usize = 10_000;

/// The daemon-wide protection state of every origin handlers reach.
pub struct Upstreams {
    respect_retry_after: bool,
    /// Consecutive failures that open an origin's breaker; 0 turns breakers off.
    breaker_failures: u32,
    breaker_open: Duration,
    origins: Mutex<HashMap<String, OriginState>>,
}

/// A server's rate limits on the origins the operator named, one limiter per origin.
#[derive(Debug, Default)]
pub struct UpstreamLimits {
    by_origin: HashMap<String, UpstreamLimit>,
}

/// A hop the protection let through: what it decided (if anything) and how long the hop waited.
#[derive(Debug, Clone, Copy, Default)]
pub struct Admitted {
    /// The last decision taken for the hop (a probe after a wait names the probe).
    pub decision: Option<UpstreamDecision>,
    pub waited: Duration,
}

/// A hop the protection refused, with the reason the handler and the call log see (the egress
/// reports it as a held request, `Failure::Held`).
#[derive(Debug)]
pub struct Held {
    pub decision: UpstreamDecision,
    pub waited: Duration,
    /// Why, and when to try again.
    pub reason: String,
}

/// How an upstream answered a hop, as far as its protection is concerned.
#[derive(Debug, Clone, Copy)]
pub enum Answer<'a> {
    /// A response arrived: its status and its `Retry-After` header, if any.
    Response { status: u16, retry_after: Option<&'a str> },
    /// No connection could be made, or it broke before the response arrived.
    Unreachable,
    /// Anything else (a deadline, a body too large): says nothing about the origin's health.
    Inconclusive,
}

/// One origin's circuit breaker. Pure: the caller passes the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// One probe is out; others are refused until it answers or `probe_until` passes.
    HalfOpen {
        probe_until: Instant,
    },
}

/// What a breaker says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Pass,
    Probe,
    Refuse { until: Instant },
}

#[derive(Debug)]
struct UpstreamLimit {
    per_minute: NonZeroU32,
    limiter: DefaultDirectRateLimiter,
}

/// What is known about one origin.
#[derive(Debug)]
struct OriginState {
    breaker: Breaker,
    /// By credential identity: when the origin's `Retry-After` ends, and the status that set it.
    retry_after: HashMap<CredentialIdentity, (Instant, u16)>,
}

impl Upstreams {
    pub fn new(settings: &EgressConfig) -> Upstreams {
        Upstreams {
            respect_retry_after: settings.respect_retry_after,
            breaker_failures: settings.breaker_failures,
            breaker_open: Duration::from_millis(settings.breaker_open_ms),
            origins: Mutex::default(),
        }
    }

    /// Waits until a hop to `origin` may be sent, or says why it may not be sent before
    /// `deadline`. `limits` are the server's rate limits.
    pub async fn admit(
        &self,
        origin: &str,
        identity: &CredentialIdentity,
        limits: Option<&UpstreamLimits>,
        deadline: Instant,
    ) -> Result<Admitted, Held> {
        let started = Instant::now();
        let mut decision = None;
        let held = |decision, reason| Held { decision, waited: started.elapsed(), reason };
        if let Some((until, status)) = self.retry_after(origin, identity) {
            let left = until.saturating_duration_since(Instant::now());
            if until >= deadline {
                let reason = format!(
                    "{origin} answered {status}; retry after {} s (the call's deadline comes sooner)",
                    whole_seconds(left)
                );
                return Err(held(UpstreamDecision::RetryAfterRefused, reason));
            }
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            decision = Some(UpstreamDecision::RetryAfterWait);
        }
        if let Some(limit) = limits.and_then(|limits| limits.by_origin.get(origin)) {
            while let Err(not_until) = limit.limiter.check() {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                if Instant::now() + wait >= deadline {
                    let reason = format!(
                        "the server's rate limit for {origin} ({} requests per minute) allows the next request in \
                         {} s, after the call's deadline",
                        limit.per_minute,
                        whole_seconds(wait)
                    );
                    return Err(held(UpstreamDecision::UpstreamLimitRefused, reason));
                }
                tokio::time::sleep(wait).await;
                decision = Some(UpstreamDecision::UpstreamLimitWait);
            }
        }
        match self.breaker_admission(origin, Instant::now()) {
            Admission::Pass => {}
            Admission::Probe => decision = Some(UpstreamDecision::BreakerProbe),
            Admission::Refuse { until } => {
                let reason = format!(
                    "{origin} is failing ({} connection failures or 502/503/504 answers in a row); requests to it \
                     are refused for {} s more",
                    self.breaker_failures,
                    whole_seconds(until.saturating_duration_since(Instant::now()))
                );
                return Err(held(UpstreamDecision::BreakerOpen, reason));
            }
        }
        Ok(Admitted { decision, waited: started.elapsed() })
    }

    /// Records how `origin` answered a hop sent under `identity`.
    pub fn answered(&self, origin: &str, identity: &CredentialIdentity, answer: Answer<'_>) {
        let now = Instant::now();
        let hold = match answer {
            Answer::Response { status: status @ (429 | 503), retry_after: Some(value) } if self.respect_retry_after => {
                parse_retry_after(value, SystemTime::now()).filter(|d| !d.is_zero()).map(|d| (now + d, status))
            }
            _ => None,
        };
        let failed = match answer {
            Answer::Response { status, .. } => matches!(status, 502..=504),
            Answer::Unreachable => true,
            Answer::Inconclusive => return self.forget_idle(origin),
        };
        let mut origins = lock(&self.origins);
        let tracking = origins.contains_key(origin);
        if !tracking && hold.is_none() && (!failed || self.breaker_failures == 0) {
            return;
        }
        if !tracking && origins.len() >= MAX_TRACKED_ORIGINS {
            origins.retain(|_, state| !state.is_idle(now));
            if origins.len() >= MAX_TRACKED_ORIGINS {
                return;
            }
        }
        let state = origins.entry(origin.to_string()).or_insert_with(OriginState::new);
        if let Some(hold) = hold {
            let entry = state.retry_after.entry(*identity).or_insert(hold);
            entry.0 = entry.0.max(hold.0);
            entry.1 = hold.1;
        }
        if self.breaker_failures > 0 {
            state.breaker.record(!failed, now, self.breaker_failures, self.breaker_open);
        }
        if state.is_idle(now) {
            origins.remove(origin);
        }
    }

    fn retry_after(&self, origin: &str, identity: &CredentialIdentity) -> Option<(Instant, u16)> {
        if !self.respect_retry_after {
            return None;
        }
        let origins = lock(&self.origins);
        let (until, status) = *origins.get(origin)?.retry_after.get(identity)?;
        (until > Instant::now()).then_some((until, status))
    }

    fn breaker_admission(&self, origin: &str, now: Instant) -> Admission {
        if self.breaker_failures == 0 {
            return Admission::Pass;
        }
        let mut origins = lock(&self.origins);
        match origins.get_mut(origin) {
            Some(state) => state.breaker.admit(now, self.breaker_open),
            None => Admission::Pass,
        }
    }

    fn forget_idle(&self, origin: &str) {
        let mut origins = lock(&self.origins);
        if origins.get_mut(origin).is_some_and(|state| state.is_idle(Instant::now())) {
            origins.remove(origin);
        }
    }
}

impl UpstreamLimits {
    /// Limits from origin → requests per minute, as the operator wrote them
    /// (`"https://api.example.com": 60`); the error names the entry that is wrong and why.
    pub fn new(per_minute: &BTreeMap<String, u32>) -> Result<UpstreamLimits, UpstreamLimitError> {
        let mut by_origin = HashMap::new();
        for (written, &limit) in per_minute {
            let refused = |problem| UpstreamLimitError { written: written.clone(), problem };
            let origin = origin_of(written).map_err(refused)?;
            let per_minute = NonZeroU32::new(limit).ok_or_else(|| refused(OriginProblem::ZeroRate))?;
            let limiter = DefaultDirectRateLimiter::direct(Quota::per_minute(per_minute));
            if by_origin.insert(origin.clone(), UpstreamLimit { per_minute, limiter }).is_some() {
                return Err(refused(OriginProblem::NamedTwice(origin)));
            }
        }
        Ok(UpstreamLimits { by_origin })
    }

    pub fn is_empty(&self) -> bool {
        self.by_origin.is_empty()
    }
}

/// Why an entry of a server's upstream limits was refused; `written` is the entry's key as the
/// operator wrote it.
#[derive(Debug, thiserror::Error)]
#[error("upstream limit for {written:?}: {problem}")]
pub struct UpstreamLimitError {
    written: String,
    problem: OriginProblem,
}

#[derive(Debug, thiserror::Error)]
enum OriginProblem {
    #[error("not a URL ({0}){WRITE_AN_ORIGIN}")]
    NotAUrl(url::ParseError),
    #[error("only http and https origins can be limited{WRITE_AN_ORIGIN}")]
    NotHttp,
    #[error("no host{WRITE_AN_ORIGIN}")]
    NoHost,
    #[error("an origin has no user, query or fragment{WRITE_AN_ORIGIN}")]
    NotOnlyAnOrigin,
    #[error("an origin has no path{WRITE_AN_ORIGIN}")]
    HasPath,
    #[error("per_minute must be at least 1 (leave the origin out for no limit)")]
    ZeroRate,
    /// Two keys name the same origin (`https://a.test` and `https://a.test:443`).
    #[error("{0} is named twice")]
    NamedTwice(String),
}

const WRITE_AN_ORIGIN: &str = "; write an origin such as \"https://api.example.com\" or \"http://10.0.0.5:8080\"";

/// `written` as an origin key (`scheme://host[:port]`), if it is only an origin.
fn origin_of(written: &str) -> Result<String, OriginProblem> {
    let url = url::Url::parse(written).map_err(OriginProblem::NotAUrl)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(OriginProblem::NotHttp);
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(OriginProblem::NoHost);
    }
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
        return Err(OriginProblem::NotOnlyAnOrigin);
    }
    if url.path() != "/" {
        return Err(OriginProblem::HasPath);
    }
    Ok(url.origin().ascii_serialization())
}

impl Breaker {
    /// Whether a request may go now; a probe is let through once the open period has passed.
    pub fn admit(&mut self, now: Instant, open_for: Duration) -> Admission {
        match *self {
            Breaker::Closed { .. } => Admission::Pass,
            Breaker::Open { until } | Breaker::HalfOpen { probe_until: until } if now < until => {
                Admission::Refuse { until }
            }
            Breaker::Open { .. } | Breaker::HalfOpen { .. } => {
                *self = Breaker::HalfOpen { probe_until: now + open_for };
                Admission::Probe
            }
        }
    }

    /// Records an answer: `ok` closes the breaker; a failure counts towards `threshold`, or
    /// reopens a half-open breaker.
    pub fn record(&mut self, ok: bool, now: Instant, threshold: u32, open_for: Duration) {
        *self = match (*self, ok) {
            (_, true) => Breaker::Closed { failures: 0 },
            (Breaker::Closed { failures }, false) if failures + 1 < threshold => {
                Breaker::Closed { failures: failures + 1 }
            }
            // A request sent before the breaker opened fails late: the period is not extended.
            (open @ Breaker::Open { .. }, false) => open,
            (Breaker::Closed { .. } | Breaker::HalfOpen { .. }, false) => Breaker::Open { until: now + open_for },
        }
    }
}

impl OriginState {
    fn new() -> OriginState {
        OriginState { breaker: Breaker::Closed { failures: 0 }, retry_after: HashMap::new() }
    }

    /// Holds nothing worth keeping: no failures and no `Retry-After` still running (those that
    /// ended are dropped on the way).
    fn is_idle(&mut self, now: Instant) -> bool {
        self.retry_after.retain(|_, (until, _)| *until > now);
        self.retry_after.is_empty() && self.breaker == Breaker::Closed { failures: 0 }
    }
}

/// A `Retry-After` value (RFC 9110 §10.2.3): delay seconds or an HTTP date, as a wait from
/// `now`, at most [`MAX_RETRY_AFTER`]; a date in the past is no wait. `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still "a long time".
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX).min(MAX_RETRY_AFTER.as_secs()))
    } else {
        httpdate::parse_http_date(value).ok()?.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Seconds for a person, rounded up so "0 s" is never said of a wait still running.
fn whole_seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_after_consecutive_failures_and_lets_one_probe_through_when_the_period_ends() {
        let open_for = Duration::from_secs(30);
        let start = Instant::now();
        let mut breaker = Breaker::Closed { failures: 0 };
        breaker.record(false, start, 3, open_for);
        breaker.record(false, start, 3, open_for);
        breaker.record(true, start, 3, open_for);
        assert_eq!(breaker, Breaker::Closed { failures: 0 }, "a success in between starts the count again");
        for _ in 0..2 {
            breaker.record(false, start, 3, open_for);
        }
        assert_eq!(breaker.admit(start, open_for), Admission::Pass);
        breaker.record(false, start, 3, open_for);
        let until = start + open_for;
        assert_eq!(breaker, Breaker::Open { until });
        assert_eq!(breaker.admit(start + Duration::from_secs(29), open_for), Admission::Refuse { until });
        // A request sent before it opened fails late: the period is not extended.
        breaker.record(false, start + Duration::from_secs(5), 3, open_for);
        assert_eq!(breaker, Breaker::Open { until });

        // Half-open: one probe, the others refused while it is out.
        let later = start + open_for;
        assert_eq!(breaker.admit(later, open_for), Admission::Probe);
        assert_eq!(breaker.admit(later, open_for), Admission::Refuse { until: later + open_for });
        // The probe fails: open again for a whole period.
        breaker.record(false, later, 3, open_for);
        assert_eq!(breaker, Breaker::Open { until: later + open_for });
        // A probe whose answer never came gives way to another after a period.
        let again = later + open_for;
        assert_eq!(breaker.admit(again, open_for), Admission::Probe);
        assert_eq!(breaker.admit(again + open_for, open_for), Admission::Probe);
        // The probe succeeds: closed.
        breaker.record(true, again + open_for, 3, open_for);
        assert_eq!(breaker.admit(again + open_for, open_for), Admission::Pass);
        assert_eq!(breaker, Breaker::Closed { failures: 0 });
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date_capped_at_ten_minutes() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        for (value, expected) in [
            ("120", Some(120)),
            (" 2 ", Some(2)),
            ("0", Some(0)),
            ("86400", Some(600)),
            ("99999999999999999999999", Some(600)),
            ("Sun, 06 Nov 1994 08:50:07 GMT", Some(30)),
            ("Sunday, 06-Nov-94 08:50:07 GMT", Some(30)),
            ("Sun Nov  6 08:50:07 1994", Some(30)),
            ("Sun, 06 Nov 1994 08:00:00 GMT", Some(0)),
            ("Mon, 07 Nov 1994 08:49:37 GMT", Some(600)),
            ("-5", None),
            ("1.5", None),
            ("soon", None),
            ("", None),
        ] {
            assert_eq!(parse_retry_after(value, now).map(|d| d.as_secs()), expected, "{value:?}");
        }
    }

    #[test]
    fn upstream_limits_name_origins_and_say_what_is_wrong() {
        let limits = |entries: &[(&str, u32)]| {
            UpstreamLimits::new(&entries.iter().map(|(origin, n)| (origin.to_string(), *n)).collect())
        };
        let ok = limits(&[("https://API.example.com:443", 60), ("http://10.0.0.5:8080/", 5)]).unwrap();
        let mut origins: Vec<&str> = ok.by_origin.keys().map(String::as_str).collect();
        origins.sort();
        assert_eq!(origins, ["http://10.0.0.5:8080", "https://api.example.com"]);
        let write = r#"write an origin such as "https://api.example.com" or "http://10.0.0.5:8080""#;
        for (entries, expected) in [
            (
                vec![("https://api.example.com/v1", 5)],
                format!(r#"upstream limit for "https://api.example.com/v1": an origin has no path; {write}"#),
            ),
            (
                vec![("api.example.com", 5)],
                format!(r#"upstream limit for "api.example.com": not a URL (relative URL without a base); {write}"#),
            ),
            (
                vec![("ftp://api.example.com", 5)],
                format!(r#"upstream limit for "ftp://api.example.com": only http and https origins can be limited; {write}"#),
            ),
            (
                vec![("https://api.example.com?a=1", 5)],
                format!(r#"upstream limit for "https://api.example.com?a=1": an origin has no user, query or fragment; {write}"#),
            ),
            (
                vec![("https://api.example.com", 0)],
                r#"upstream limit for "https://api.example.com": per_minute must be at least 1 (leave the origin out for no limit)"#.to_string(),
            ),
            (
                vec![("https://api.example.com", 5), ("https://api.example.com:443", 6)],
                r#"upstream limit for "https://api.example.com:443": https://api.example.com is named twice"#.to_string(),
            ),
        ] {
            let error = limits(&entries).unwrap_err();
            assert_eq!(error.to_string(), expected, "{entries:?}");
        }
    }

    fn upstreams(breaker_failures: u32) -> Upstreams {
        let settings =
            EgressConfig { breaker_failures, breaker_open_ms: 60_000, respect_retry_after: true, ..Default::default() };
        Upstreams::new(&settings)
    }

    #[tokio::test]
    async fn a_retry_after_holds_only_the_credential_it_answered_and_fails_fast_past_the_deadline() {
        let upstreams = upstreams(0);
        let (alice, bob) =
            (CredentialIdentity::of_values([("token", "alice")]), CredentialIdentity::of_values([("token", "bob")]));
        let origin = "https://api.example.test";
        upstreams.answered(origin, &alice, Answer::Response { status: 429, retry_after: Some("30") });
        let soon = Instant::now() + Duration::from_secs(5);
        let held = upstreams.admit(origin, &alice, None, soon).await.unwrap_err();
        assert_eq!(held.decision, UpstreamDecision::RetryAfterRefused);
        assert!(held.reason.starts_with("https://api.example.test answered 429; retry after 30 s"), "{held:?}");
        let admitted = upstreams.admit(origin, &bob, None, soon).await.unwrap();
        assert_eq!(admitted.decision, None, "another credential is not held");
        assert!(upstreams.admit("https://other.example.test", &alice, None, soon).await.is_ok());
    }

    #[tokio::test]
    async fn an_upstream_limit_waits_within_the_deadline_and_refuses_past_it() {
        let limits = UpstreamLimits::new(&[("https://api.example.test".to_string(), 60)].into()).unwrap();
        let upstreams = upstreams(0);
        let origin = "https://api.example.test";
        let none = CredentialIdentity::NONE;
        let far = Instant::now() + Duration::from_secs(10);
        // A burst of 60, then one a second.
        for _ in 0..60 {
            assert_eq!(upstreams.admit(origin, &none, Some(&limits), far).await.unwrap().decision, None);
        }
        let waited = upstreams.admit(origin, &none, Some(&limits), far).await.unwrap();
        assert_eq!(waited.decision, Some(UpstreamDecision::UpstreamLimitWait));
        assert!(waited.waited >= Duration::from_millis(900), "{waited:?}");
        let held = upstreams.admit(origin, &none, Some(&limits), Instant::now() + Duration::from_millis(100)).await;
        let held = held.unwrap_err();
        assert_eq!(held.decision, UpstreamDecision::UpstreamLimitRefused);
        assert!(held.reason.contains("(60 requests per minute) allows the next request in 1 s"), "{held:?}");
        assert!(upstreams.admit("https://unlimited.example.test", &none, Some(&limits), far).await.is_ok());
    }

    #[tokio::test]
    async fn five_hundreds_do_not_open_the_breaker_but_unavailability_does() {
        let upstreams = upstreams(2);
        let origin = "https://api.example.test";
        let none = CredentialIdentity::NONE;
        let far = Instant::now() + Duration::from_secs(10);
        for _ in 0..5 {
            upstreams.answered(origin, &none, Answer::Response { status: 500, retry_after: None });
        }
        assert!(upstreams.admit(origin, &none, None, far).await.is_ok());
        assert!(lock(&upstreams.origins).is_empty(), "a healthy origin is not tracked");
        upstreams.answered(origin, &none, Answer::Unreachable);
        upstreams.answered(origin, &none, Answer::Response { status: 503, retry_after: None });
        let held = upstreams.admit(origin, &none, None, far).await.unwrap_err();
        assert_eq!(held.decision, UpstreamDecision::BreakerOpen);
        assert!(held.reason.contains("requests to it are refused for 60 s more"), "{held:?}");
    }
}
