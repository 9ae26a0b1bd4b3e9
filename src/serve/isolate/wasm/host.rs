//! The store's data: one call's state, reachable from the natives, the epoch callback and the
//! resource limiter that answers the instance's requests for memory.

use std::sync::Arc;

use wasmtime::{ResourceLimiter, Result};

use super::guest::Guest;
use super::image::Image;
use super::memory::Budget;
use super::state::CallState;

/// Table growth an instance may ask for; QuickJS's own table never grows near it.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// The store's data: one call's state, reachable from the natives and the epoch callback.
pub struct Host {
    pub guest: Option<Arc<Guest>>,
    pub image: Option<Arc<Image>>,
    pub call: Option<CallState>,
    pub memory: Budget,
}

impl Host {
    /// The data of the one store the image is built in, and of syntax checks: no call.
    pub fn for_image() -> Host {
        Host { guest: None, image: None, call: None, memory: Budget::unlimited() }
    }
}

/// Growth is asked for by the guest (`memory.grow`) and answered here from the call's
/// [`Budget`], so a refusal is latched on the call the moment it happens.
impl ResourceLimiter for Host {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        if self.memory.grow(current, desired) {
            return Ok(true);
        }
        if let (Some(call), Some(limit)) = (&mut self.call, self.memory.refusal()) {
            call.hit(limit);
        }
        Ok(false)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}
