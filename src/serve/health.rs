//! A tool's health: whether its last calls failed, and whether that makes it `degraded`.
//!
//! Each built mount keeps, per tool, a window of its last `[generation] health_window` calls
//! (failed or not, newest first), seeded from the call log when the mount is built so a restart
//! does not forget, and updated as calls end. A tool is degraded once at least
//! `degraded_error_rate` of the calls in the window failed and the window holds at least
//! `degraded_min_calls`. Calls that never ran because of the daemon (`busy`, `shutting_down`,
//! `cancelled`) are not the tool's doing and are not counted; argument errors never reach the
//! handler and are not logged at all. The same [`HealthRule`] judges a window read from the call
//! log, so the admin view agrees whether or not the mount has been built.

use std::sync::Mutex;

use crate::config::GenerationConfig;
use crate::states::CallOutcome;

/// The thresholds, from `[generation]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthRule {
    pub window: u32,
    pub min_calls: u32,
    pub degraded_rate: f64,
}

/// A tool's health at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Health {
    /// Calls in the window.
    pub calls: u32,
    pub failures: u32,
    pub degraded: bool,
}

impl Health {
    pub fn error_rate(&self) -> f64 {
        if self.calls == 0 { 0.0 } else { f64::from(self.failures) / f64::from(self.calls) }
    }
}

impl HealthRule {
    pub fn new(config: &GenerationConfig) -> HealthRule {
        HealthRule {
            window: config.health_window.clamp(1, 64),
            min_calls: config.degraded_min_calls,
            degraded_rate: config.degraded_error_rate,
        }
    }

    /// Judges a window of calls, newest first (`true`: failed); only the first `window` count.
    pub fn judge(&self, failed_newest_first: &[bool]) -> Health {
        let window = &failed_newest_first[..failed_newest_first.len().min(self.window as usize)];
        self.judge_counts(window.len() as u32, window.iter().filter(|failed| **failed).count() as u32)
    }

    /// Judges `calls` calls of which `failures` failed.
    fn judge_counts(&self, calls: u32, failures: u32) -> Health {
        let mut health = Health { calls, failures, degraded: false };
        health.degraded = calls > 0 && calls >= self.min_calls && health.error_rate() >= self.degraded_rate;
        health
    }

    /// Whether a call that ended this way counts toward its tool's health.
    pub fn counts(outcome: CallOutcome) -> bool {
        !matches!(outcome, CallOutcome::Busy | CallOutcome::ShuttingDown | CallOutcome::Cancelled)
    }
}

/// One tool's window of recent calls.
pub struct ToolHealth {
    rule: HealthRule,
    /// Bit i set: the i-th newest call failed; `len` calls are in the window.
    window: Mutex<Window>,
}

#[derive(Clone, Copy)]
struct Window {
    failed: u64,
    len: u32,
    degraded: bool,
}

impl ToolHealth {
    /// A window seeded with calls from the log, newest first.
    pub fn new(rule: HealthRule, failed_newest_first: &[bool]) -> ToolHealth {
        let seed = &failed_newest_first[..failed_newest_first.len().min(rule.window as usize)];
        let failed = seed.iter().enumerate().filter(|(_, f)| **f).fold(0u64, |bits, (i, _)| bits | (1 << i));
        let degraded = rule.judge(seed).degraded;
        ToolHealth { rule, window: Mutex::new(Window { failed, len: seed.len() as u32, degraded }) }
    }

    /// Adds a call; returns the new `degraded` when this call changed it.
    pub fn record(&self, failed: bool) -> Option<bool> {
        let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let mask = if self.rule.window >= 64 { u64::MAX } else { (1u64 << self.rule.window) - 1 };
        window.failed = ((window.failed << 1) | u64::from(failed)) & mask;
        window.len = (window.len + 1).min(self.rule.window);
        let degraded = self.judge(&window).degraded;
        let changed = degraded != window.degraded;
        window.degraded = degraded;
        changed.then_some(degraded)
    }

    pub fn health(&self) -> Health {
        let window = *self.window.lock().unwrap_or_else(|p| p.into_inner());
        self.judge(&window)
    }

    /// Runs on every call: counts bits, allocates nothing.
    fn judge(&self, window: &Window) -> Health {
        self.rule.judge_counts(window.len, window.failed.count_ones())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: HealthRule = HealthRule { window: 4, min_calls: 3, degraded_rate: 0.5 };

    #[test]
    fn a_tool_is_degraded_once_enough_of_its_last_calls_failed() {
        let health = ToolHealth::new(RULE, &[]);
        assert_eq!(health.record(true), None, "one call is too few to judge");
        assert_eq!(health.record(false), None);
        assert_eq!(health.record(true), Some(true), "2 of 3 failed");
        assert_eq!(health.health(), Health { calls: 3, failures: 2, degraded: true });
        assert_eq!(health.record(false), None, "2 of 4 is still at the rate");
        assert_eq!(health.record(false), Some(false), "the oldest failure left the window: 1 of 4");
        assert_eq!(health.health(), Health { calls: 4, failures: 1, degraded: false });
    }

    #[test]
    fn a_seeded_window_is_judged_like_a_recorded_one() {
        let seeded = ToolHealth::new(RULE, &[true, true, false, false, true, true]);
        assert_eq!(seeded.health(), RULE.judge(&[true, true, false, false]));
        assert!(seeded.health().degraded);
        let full = HealthRule { window: 64, ..RULE };
        let health = ToolHealth::new(full, &[true; 70]);
        assert_eq!(health.health().calls, 64);
        assert_eq!(health.record(false), None);
        assert_eq!(health.health().failures, 63);
    }

    #[test]
    fn only_calls_the_tool_ran_count() {
        assert!(HealthRule::counts(CallOutcome::Error));
        assert!(HealthRule::counts(CallOutcome::Timeout));
        assert!(!HealthRule::counts(CallOutcome::Busy));
        assert!(!HealthRule::counts(CallOutcome::Cancelled));
    }
}
