//! Verdicts on tokens kept for a short while, keyed by a digest of the token (tokens themselves
//! are not kept): a host sends the same token with every request, and checking it again each time
//! (a signature verification, or a request to the issuer) would cost far more than the call.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Entries kept at most; when full, expired ones go first, then all of them.
const MAX_ENTRIES: usize = 10_000;

pub struct TokenCache<T> {
    entries: Mutex<HashMap<[u8; 32], (Instant, T)>>,
}

impl<T> Default for TokenCache<T> {
    fn default() -> Self {
        TokenCache { entries: Mutex::new(HashMap::new()) }
    }
}

impl<T: Clone> TokenCache<T> {
    /// The key for `token` checked for `resource` ("" when the verdict does not depend on it).
    pub fn key(token: &str, resource: &str) -> [u8; 32] {
        let mut digest = Sha256::new();
        digest.update(resource.as_bytes());
        digest.update([0]);
        digest.update(token.as_bytes());
        digest.finalize().into()
    }

    pub fn get(&self, key: &[u8; 32]) -> Option<T> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.get(key).filter(|(until, _)| *until > Instant::now()).map(|(_, value)| value.clone())
    }

    /// Keeps `value` for `at_most`, and never past `expires_at` (seconds since the Unix epoch, the
    /// token's `exp`); a value that would not be kept at all is not stored.
    pub fn put(&self, key: [u8; 32], at_most: Duration, expires_at: Option<i64>, value: T) {
        let left = expires_at.map_or(at_most, |exp| {
            Duration::from_secs(u64::try_from(exp.saturating_sub(super::claims::unix_now() as i64)).unwrap_or(0))
        });
        let keep = at_most.min(left);
        if keep.is_zero() {
            return;
        }
        let until = Instant::now() + keep;
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            let now = Instant::now();
            entries.retain(|_, (until, _)| *until > now);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (until, value));
    }
}
