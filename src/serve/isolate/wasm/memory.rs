//! A call's memory: how far its instance's linear memory grows past the image, and the copies
//! natives hold outside it, both within the call's limit and drawn from the daemon-wide
//! [`IsolateMemory`].
//!
//! Growth is asked for by the guest (`memory.grow`) and answered by the store's
//! [`ResourceLimiter`], so a refusal is known to Rust the moment it happens and the call ends
//! over its limit even if JavaScript catches QuickJS's "out of memory" error.

use std::sync::Arc;

use wasmtime::{ResourceLimiter, Result};

use super::super::IsolateMemory;
use super::call::Host;
use super::state::LimitHit;

/// Table growth an instance may ask for; QuickJS's own table never grows near it.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// What one call may take, and has taken.
pub(super) struct Budget {
    limit: usize,
    /// Linear memory the image starts with (not charged: the pages are shared copy-on-write).
    base: usize,
    used: usize,
    daemon: Option<Arc<IsolateMemory>>,
    /// A request was refused: `Some(true)` if the daemon-wide budget refused it.
    refused: Option<bool>,
}

impl Budget {
    /// A call's budget: `limit` bytes past an image of `base` bytes, drawn from `daemon`.
    pub(super) fn new(limit: usize, base: usize, daemon: Arc<IsolateMemory>) -> Budget {
        Budget { limit, base, used: 0, daemon: Some(daemon), refused: None }
    }

    /// No limit and no daemon-wide budget: for building the image and for syntax checks.
    pub(super) fn unlimited() -> Budget {
        Budget { limit: usize::MAX, base: 0, used: 0, daemon: None, refused: None }
    }

    /// Takes `bytes` for the call, or refuses (remembering why).
    pub(super) fn take(&mut self, bytes: usize) -> bool {
        let total = match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => total,
            _ => {
                self.refused.get_or_insert(false);
                return false;
            }
        };
        if let Some(daemon) = &self.daemon
            && !daemon.take(bytes)
        {
            self.refused.get_or_insert(true);
            return false;
        }
        self.used = total;
        true
    }

    pub(super) fn give_back(&mut self, bytes: usize) {
        let bytes = bytes.min(self.used);
        self.used -= bytes;
        if let Some(daemon) = &self.daemon {
            daemon.give_back(bytes);
        }
    }

    /// The limit the call ran into, once a request was refused.
    pub(super) fn refusal(&self) -> Option<LimitHit> {
        match (self.refused?, &self.daemon) {
            (true, Some(daemon)) => Some(LimitHit::DaemonMemory(daemon.limit())),
            _ => Some(LimitHit::Memory),
        }
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        if let Some(daemon) = &self.daemon {
            daemon.give_back(self.used);
        }
    }
}

impl ResourceLimiter for Host {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> Result<bool> {
        let grow = desired.saturating_sub(current.max(self.memory.base));
        if grow == 0 || self.memory.take(grow) {
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
