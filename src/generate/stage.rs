//! What every stage shares: how it fails ([`StageError`]), how it is timed ([`StageClock`]) and
//! how the LLM usage it causes is counted.

use std::time::Instant;

use crate::catalog::{FinishedGeneration, StageTimings};
use crate::llm::Usage;
use crate::states::Stage;

/// A stage failure: which stage, and what went wrong.
pub struct StageError {
    pub stage: Stage,
    pub message: String,
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.stage, self.message)
    }
}

impl StageError {
    pub fn new(stage: Stage, message: impl std::fmt::Display) -> StageError {
        StageError { stage, message: message.to_string() }
    }

    /// A catalog error: logged in full, reported to the operator without internals.
    pub fn internal(stage: Stage, error: impl std::fmt::Display) -> StageError {
        tracing::error!(%stage, %error, "catalog error during generation");
        StageError::new(stage, "internal error; see the daemon log")
    }
}

/// Times the stages: each lap is the time since the previous one.
pub struct StageClock {
    last: Instant,
}

impl StageClock {
    pub fn new() -> StageClock {
        StageClock { last: Instant::now() }
    }

    pub fn lap(&mut self, timings: &mut StageTimings, stage: Stage) {
        let now = Instant::now();
        timings.stages.insert(stage, (now - self.last).as_millis() as u64);
        self.last = now;
    }
}

/// Adds what an LLM request cost to the generation's totals.
pub fn add_usage(finished: &mut FinishedGeneration, usage: Usage) {
    finished.input_tokens += usage.input_tokens;
    finished.output_tokens += usage.output_tokens;
    finished.llm_requests += usage.requests;
}
