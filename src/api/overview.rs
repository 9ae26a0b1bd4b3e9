//! `GET /admin/overview`: the last minutes of calls/s, errors/s, latency percentiles and isolate
//! pool load, from this daemon's own metrics (`telemetry::overview`), for the console.

use axum::Json;
use axum::extract::State;

use crate::api::model::{Overview, OverviewPoint};
use crate::api::state::AppState;
use crate::catalog::{format_millis, now_millis};
use crate::telemetry::overview::{INTERVAL, Load, WINDOW};

/// Calls and load over the last minutes
///
/// One point per sampling interval, oldest first, from this daemon's own metrics (on a shared
/// catalog, each replica reports its own). Rates are over the interval that ends at `at`; the
/// load is read at `at`.
#[utoipa::path(
    get,
    path = "/admin/overview",
    responses((status = 200, description = "the last minutes, oldest first", body = Overview)),
)]
pub async fn overview(State(state): State<AppState>) -> Json<Overview> {
    let samples = state
        .overview
        .points()
        .into_iter()
        .map(|point| OverviewPoint {
            at: format_millis(point.at),
            calls_per_second: point.calls_per_second,
            errors_per_second: point.errors_per_second,
            p50_ms: point.p50_ms,
            p99_ms: point.p99_ms,
            in_flight_calls: point.load.in_flight_calls,
            queue_depth: point.load.queue_depth,
            busy_workers: point.load.busy_workers,
            workers: point.load.workers,
            memory_bytes: point.load.memory_bytes,
            memory_budget_bytes: point.load.memory_budget_bytes,
        })
        .collect();
    Json(Overview {
        interval_seconds: INTERVAL.as_secs(),
        window_seconds: WINDOW.as_secs(),
        replica: state.catalog.replica().id.clone(),
        mounted_servers: state.registry.len(),
        samples,
    })
}

/// Samples the call totals and the pool every [`INTERVAL`] until shutdown.
pub fn spawn_sampler(state: &AppState) {
    let state = state.clone();
    let shutdown = state.tasks.shutdown_started();
    state.tasks.clone().spawn(async move {
        let sample = async {
            let mut ticks = tokio::time::interval(INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                state.overview.record(now_millis(), state.metrics.call_totals(), load(&state));
            }
        };
        tokio::select! {
            () = sample => {}
            () = shutdown => {}
        }
    });
}

fn load(state: &AppState) -> Load {
    let gauges = state.gauges();
    Load {
        in_flight_calls: gauges.in_flight_calls,
        queue_depth: gauges.queue_depth,
        busy_workers: gauges.busy_workers,
        workers: gauges.workers,
        memory_bytes: gauges.memory_bytes,
        memory_budget_bytes: gauges.memory_budget_bytes,
        mounted_servers: gauges.mounted_servers,
    }
}
