//! A call's memory: how far its instance's linear memory grows past the image, and the copies
//! natives hold outside it, both within the call's limit and drawn from the daemon-wide
//! [`IsolateMemory`].
//!
//! Growth is asked for by the guest (`memory.grow`) and answered by the store's resource
//! limiter (`host.rs`) from the call's [`Budget`], so a refusal is known to Rust the moment it
//! happens and the call ends over its limit even if JavaScript catches QuickJS's "out of
//! memory" error.

use std::sync::Arc;

use super::super::admission::IsolateMemory;
use super::state::LimitHit;

/// What one call may take, and has taken.
pub struct Budget {
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

    /// Whether linear memory of `current` bytes may grow to `desired`, taking what it grows past
    /// the image.
    pub fn grow(&mut self, current: usize, desired: usize) -> bool {
        let grow = desired.saturating_sub(current.max(self.base));
        grow == 0 || self.take(grow)
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
