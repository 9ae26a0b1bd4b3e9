//! Traffic limits at the door: how many tool calls a caller, a server and a tool may make per
//! minute, and how many one caller may have running at once (docs/traffic.md).
//!
//! Each mounted server holds its own limiters, built with the mount from the daemon's `[limits]`
//! and the server's own settings, so servers never share a bucket and a deleted server takes
//! its state with it. Rates are GCRA (`governor`): `Quota::per_minute(N)` lets a burst of N
//! through and refills it over a minute. A caller is checked first, so a caller refused for
//! their own rate spends nothing of the server's or the tool's; then the tool, then the server.
//! A refusal says which limit and when a retry can pass, before any work is done.
//!
//! The counts are this replica's: behind a balancer over R replicas a caller may get up to R
//! times each rate (the operator divides by R).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::LimitsConfig;
use crate::toolset::ServerLimits;

/// Keyed limiters drop the state of callers idle for a while once this many are kept.
const PRUNE_ABOVE: usize = 10_000;
/// What a refused concurrent call is told to wait: a call usually ends within it.
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// Who a call counts against: the OAuth subject, else the static token, else the client's
/// address; set by the HTTP door as a request extension.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallerKey(pub Arc<str>);

impl CallerKey {
    pub fn subject(sub: &str) -> CallerKey {
        CallerKey(Arc::from(format!("subject:{sub}")))
    }

    pub fn token() -> CallerKey {
        CallerKey(Arc::from("token"))
    }

    pub fn address(ip: std::net::IpAddr) -> CallerKey {
        CallerKey(Arc::from(format!("address:{ip}")))
    }

    /// Calls with no door of their own (the admin API's, a script's with no caller).
    pub fn unknown() -> CallerKey {
        CallerKey(Arc::from("unknown"))
    }
}

/// The limits in force for one server: its own settings over the daemon's defaults (0 is off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EffectiveLimits {
    pub per_caller_per_minute: u32,
    pub per_server_per_minute: u32,
    pub per_tool_per_minute: u32,
    pub per_caller_concurrency: u32,
}

impl EffectiveLimits {
    pub fn of(defaults: &LimitsConfig, server: Option<&ServerLimits>) -> EffectiveLimits {
        let pick = |own: Option<u32>, default: u32| own.unwrap_or(default);
        EffectiveLimits {
            per_caller_per_minute: pick(server.and_then(|s| s.per_caller_per_minute), defaults.per_caller_per_minute),
            per_server_per_minute: pick(server.and_then(|s| s.per_server_per_minute), defaults.per_server_per_minute),
            per_tool_per_minute: pick(server.and_then(|s| s.per_tool_per_minute), defaults.per_tool_per_minute),
            per_caller_concurrency: pick(
                server.and_then(|s| s.per_caller_concurrency),
                defaults.per_caller_concurrency,
            ),
        }
    }
}

/// A call refused at the door.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "too many calls: the {limit} limit ({allowed}) is reached; retry in {} s",
    retry_after_seconds(*.retry_after)
)]
pub struct QuotaRefusal {
    /// The limit's key, as `[limits]` names it.
    pub limit: &'static str,
    /// The limit, in words ("60 per minute", "4 at once").
    pub allowed: String,
    pub retry_after: Duration,
}

impl QuotaRefusal {
    /// Whole seconds to wait, at least 1.
    pub fn retry_after_seconds(&self) -> u64 {
        retry_after_seconds(self.retry_after)
    }
}

fn retry_after_seconds(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

/// A call let in: holds its place among the caller's running calls until dropped.
#[derive(Debug)]
pub struct Admitted {
    _running: Option<OwnedSemaphorePermit>,
}

/// One server's limiters.
pub struct ServerQuota {
    limits: EffectiveLimits,
    per_caller: Option<DefaultKeyedRateLimiter<Arc<str>>>,
    /// One limiter per tool, made with the mount (the tools are known), so a call looks its
    /// tool up by name without allocating a key.
    per_tool: HashMap<String, DefaultDirectRateLimiter>,
    per_server: Option<DefaultDirectRateLimiter>,
    running: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
    /// Read once per call; made once, because making a clock calibrates it.
    clock: DefaultClock,
}

impl ServerQuota {
    /// The limiters for a server whose tools are `tools`.
    pub fn new<'a>(limits: EffectiveLimits, tools: impl IntoIterator<Item = &'a str>) -> ServerQuota {
        let quota = |n: u32| NonZeroU32::new(n).map(Quota::per_minute);
        let per_tool = match quota(limits.per_tool_per_minute) {
            Some(per_tool) => tools.into_iter().map(|tool| (tool.to_string(), RateLimiter::direct(per_tool))).collect(),
            None => HashMap::new(),
        };
        ServerQuota {
            limits,
            per_caller: quota(limits.per_caller_per_minute).map(RateLimiter::keyed),
            per_tool,
            per_server: quota(limits.per_server_per_minute).map(RateLimiter::direct),
            running: Mutex::default(),
            clock: DefaultClock::default(),
        }
    }

    pub fn limits(&self) -> EffectiveLimits {
        self.limits
    }

    /// Lets a call of `tool` by `caller` in, or says which limit refuses it and for how long.
    pub fn admit(&self, caller: &CallerKey, tool: &str) -> Result<Admitted, QuotaRefusal> {
        let running = match self.limits.per_caller_concurrency {
            0 => None,
            most => {
                let semaphore = {
                    let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                    if running.len() > PRUNE_ABOVE {
                        running.retain(|_, semaphore| Arc::strong_count(semaphore) > 1);
                    }
                    running.entry(caller.0.clone()).or_insert_with(|| Arc::new(Semaphore::new(most as usize))).clone()
                };
                match semaphore.try_acquire_owned() {
                    Ok(permit) => Some(permit),
                    Err(_) => {
                        return Err(QuotaRefusal {
                            limit: "per_caller_concurrency",
                            allowed: format!("{most} at once"),
                            retry_after: BUSY_RETRY,
                        });
                    }
                }
            }
        };
        let now = self.clock.now();
        let refused = |limit: &'static str, per_minute: u32, wait: Duration| QuotaRefusal {
            limit,
            allowed: format!("{per_minute} per minute"),
            retry_after: wait,
        };
        if let Some(limiter) = &self.per_caller {
            keyed_check(limiter, &caller.0).map_err(|not_until| {
                refused("per_caller_per_minute", self.limits.per_caller_per_minute, not_until.wait_time_from(now))
            })?;
        }
        if let Some(limiter) = self.per_tool.get(tool) {
            limiter.check().map_err(|not_until| {
                refused("per_tool_per_minute", self.limits.per_tool_per_minute, not_until.wait_time_from(now))
            })?;
        }
        if let Some(limiter) = &self.per_server {
            limiter.check().map_err(|not_until| {
                refused("per_server_per_minute", self.limits.per_server_per_minute, not_until.wait_time_from(now))
            })?;
        }
        Ok(Admitted { _running: running })
    }
}

fn keyed_check(
    limiter: &DefaultKeyedRateLimiter<Arc<str>>,
    key: &Arc<str>,
) -> Result<(), governor::NotUntil<governor::clock::QuantaInstant>> {
    if limiter.len() > PRUNE_ABOVE {
        // Keys whose bucket has refilled hold nothing worth keeping.
        limiter.retain_recent();
    }
    limiter.check_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(caller: u32, server: u32, tool: u32, concurrency: u32) -> EffectiveLimits {
        EffectiveLimits {
            per_caller_per_minute: caller,
            per_server_per_minute: server,
            per_tool_per_minute: tool,
            per_caller_concurrency: concurrency,
        }
    }

    #[test]
    fn a_caller_over_their_rate_is_refused_and_spends_nothing_of_the_server() {
        let quota = ServerQuota::new(limits(2, 3, 0, 0), ["t"]);
        let (alice, bob) = (CallerKey::subject("alice"), CallerKey::subject("bob"));
        assert!(quota.admit(&alice, "t").is_ok() && quota.admit(&alice, "t").is_ok());
        let refused = quota.admit(&alice, "t").expect_err("alice's third call in a minute");
        assert_eq!(refused.limit, "per_caller_per_minute");
        assert!((1..=30).contains(&refused.retry_after_seconds()), "{refused}");
        // Alice's refusals did not use the server's third call: bob gets it.
        assert!(quota.admit(&bob, "t").is_ok());
        assert_eq!(quota.admit(&bob, "t").expect_err("the server's fourth").limit, "per_server_per_minute");
    }

    #[test]
    fn running_calls_are_limited_per_caller_until_they_end() {
        let quota = ServerQuota::new(limits(0, 0, 0, 1), ["t"]);
        let alice = CallerKey::subject("alice");
        let first = quota.admit(&alice, "t").expect("first");
        assert_eq!(quota.admit(&alice, "t").expect_err("second at once").limit, "per_caller_concurrency");
        assert!(quota.admit(&CallerKey::subject("bob"), "t").is_ok(), "another caller is not held up");
        drop(first);
        assert!(quota.admit(&alice, "t").is_ok());
    }

    #[test]
    fn server_settings_replace_the_defaults_key_by_key() {
        let defaults = LimitsConfig { per_caller_per_minute: 60, per_server_per_minute: 600, ..Default::default() };
        let own = ServerLimits { per_caller_per_minute: Some(0), per_tool_per_minute: Some(5), ..Default::default() };
        assert_eq!(EffectiveLimits::of(&defaults, Some(&own)), limits(0, 600, 5, 0));
        assert_eq!(EffectiveLimits::of(&defaults, None), limits(60, 600, 0, 0));
    }
}
