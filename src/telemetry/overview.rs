//! The last minutes of the daemon's own metrics, for the console's overview: every call adds to
//! daemon-wide totals ([`CallTotals`], a few atomics), a task takes a [`Sample`] of them and of the
//! isolate pool every [`INTERVAL`], and [`History`] keeps the last [`WINDOW`] of samples. The
//! rates and latency percentiles are worked out from the differences between neighbouring
//! samples, as Prometheus's `rate` and `histogram_quantile` would from a scrape.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::CALL_BUCKETS;

/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How far back the history goes.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Samples kept: one per interval over the window, plus the one the first difference starts from.
const KEPT: usize = (WINDOW.as_secs() / INTERVAL.as_secs()) as usize + 1;
/// Histogram buckets: one per upper bound, and one for slower calls.
const BUCKETS: usize = CALL_BUCKETS.len() + 1;

/// Every call the daemon finished, whatever its server, with its duration in
/// [`CALL_BUCKETS`] (the buckets of the per-tool Prometheus histogram).
#[derive(Debug, Default)]
pub struct CallTotals {
    calls: AtomicU64,
    errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl CallTotals {
    pub fn record(&self, failed: bool, duration: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let seconds = duration.as_secs_f64();
        let bucket = CALL_BUCKETS.iter().position(|bound| seconds <= *bound).unwrap_or(CALL_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64, [u64; BUCKETS]) {
        let buckets = std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed));
        (self.calls.load(Ordering::Relaxed), self.errors.load(Ordering::Relaxed), buckets)
    }
}

/// The isolate pool and mounts at the moment of a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    pub in_flight_calls: usize,
    pub queue_depth: usize,
    pub busy_workers: usize,
    pub workers: usize,
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
    pub mounted_servers: usize,
}

/// The totals and the load at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Milliseconds since the Unix epoch.
    at: i64,
    calls: u64,
    errors: u64,
    buckets: [u64; BUCKETS],
    load: Load,
}

/// One interval of the overview: rates over it and the load at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// When the interval ended (milliseconds since the Unix epoch).
    pub at: i64,
    pub calls_per_second: f64,
    pub errors_per_second: f64,
    /// Latency percentiles of the calls that finished in the interval; `None` without calls.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub load: Load,
}

/// The samples of the last [`WINDOW`].
#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Takes a sample of `totals` and `load` at `at` (milliseconds since the Unix epoch).
    pub fn record(&self, at: i64, totals: &CallTotals, load: Load) {
        let (calls, errors, buckets) = totals.read();
        let mut samples = self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(Sample { at, calls, errors, buckets, load });
    }

    /// One point per interval between samples, oldest first.
    pub fn points(&self) -> Vec<Point> {
        let samples = self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        samples
            .iter()
            .zip(samples.iter().skip(1))
            .map(|(before, after)| {
                let seconds = ((after.at - before.at) as f64 / 1000.0).max(0.001);
                let finished: [u64; BUCKETS] =
                    std::array::from_fn(|i| after.buckets[i].saturating_sub(before.buckets[i]));
                Point {
                    at: after.at,
                    calls_per_second: after.calls.saturating_sub(before.calls) as f64 / seconds,
                    errors_per_second: after.errors.saturating_sub(before.errors) as f64 / seconds,
                    p50_ms: quantile(&finished, 0.50).map(|s| s * 1000.0),
                    p99_ms: quantile(&finished, 0.99).map(|s| s * 1000.0),
                    load: after.load,
                }
            })
            .collect()
    }
}

/// The `q` quantile (seconds) of calls counted per bucket, interpolated linearly inside the
/// bucket it falls in, as `histogram_quantile` does; in the open last bucket, its lower bound.
fn quantile(counts: &[u64; BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, count) in counts.iter().enumerate() {
        if *count > 0 && (below + count) as f64 >= rank {
            let Some(upper) = CALL_BUCKETS.get(i) else {
                return Some(CALL_BUCKETS[CALL_BUCKETS.len() - 1]);
            };
            let lower = if i == 0 { 0.0 } else { CALL_BUCKETS[i - 1] };
            let into = (rank - below as f64) / *count as f64;
            return Some(lower + (upper - lower) * into.clamp(0.0, 1.0));
        }
        below += count;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(busy: usize) -> Load {
        Load { busy_workers: busy, workers: 4, ..Load::default() }
    }

    #[test]
    fn rates_and_percentiles_come_from_the_difference_between_samples() {
        let totals = CallTotals::default();
        let history = History::default();
        history.record(0, &totals, load(0));
        assert!(history.points().is_empty(), "one sample is no interval");
        // 98 fast calls (under 1 ms) and 2 slow failures (between 0.5 and 1 s), in 5 s.
        for _ in 0..98 {
            totals.record(false, Duration::from_micros(500));
        }
        for _ in 0..2 {
            totals.record(true, Duration::from_millis(700));
        }
        history.record(5_000, &totals, load(3));
        let points = history.points();
        assert_eq!(points.len(), 1);
        let point = &points[0];
        assert_eq!(point.at, 5_000);
        assert!((point.calls_per_second - 20.0).abs() < 1e-9);
        assert!((point.errors_per_second - 0.4).abs() < 1e-9);
        let p50 = point.p50_ms.unwrap();
        assert!(p50 > 0.0 && p50 <= 1.0, "p50 {p50} ms within the first bucket");
        let p99 = point.p99_ms.unwrap();
        assert!((500.0..=1000.0).contains(&p99), "p99 {p99} ms in the 0.5–1 s bucket");
        assert_eq!(point.load.busy_workers, 3);
        // A quiet interval: no calls, no percentiles.
        history.record(10_000, &totals, load(0));
        let quiet = &history.points()[1];
        assert_eq!((quiet.calls_per_second, quiet.p50_ms, quiet.p99_ms), (0.0, None, None));
    }

    #[test]
    fn the_history_keeps_the_window_only() {
        let totals = CallTotals::default();
        let history = History::default();
        for i in 0..(KEPT as i64 + 10) {
            history.record(i * 5_000, &totals, load(0));
        }
        let points = history.points();
        assert_eq!(points.len(), KEPT - 1);
        assert_eq!(points.last().unwrap().at, (KEPT as i64 + 9) * 5_000);
    }

    #[test]
    fn calls_slower_than_every_bucket_report_the_largest_bound() {
        let mut counts = [0u64; BUCKETS];
        counts[BUCKETS - 1] = 3;
        assert_eq!(quantile(&counts, 0.5), Some(30.0));
        assert_eq!(quantile(&[0; BUCKETS], 0.5), None);
    }
}
