//! Per-server MCP access tokens: checked, stored as a sha256, compared in constant time.

use sha2::{Digest, Sha256};

const MIN_LEN: usize = 16;
const MAX_LEN: usize = 512;

/// Parses an operator-chosen token, refusing ones too short to be secret or awkward in headers.
pub fn parse(raw: &str) -> Result<String, String> {
    if raw.len() < MIN_LEN || raw.len() > MAX_LEN {
        return Err(format!("access_token must be {MIN_LEN} to {MAX_LEN} characters long"));
    }
    if !raw.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("access_token may only contain printable ASCII characters without spaces".into());
    }
    Ok(raw.to_string())
}

/// What the catalog keeps: the hex sha256, so a leaked catalog does not leak working tokens.
pub fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether a presented `Authorization` header value carries the token with this digest.
pub fn verify(authorization: Option<&str>, expected_digest: &str) -> bool {
    let Some(token) = authorization.and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
    else {
        return false;
    };
    constant_time_eq(digest(token.trim()).as_bytes(), expected_digest.as_bytes())
}

/// Compares without an early exit, so response timing does not reveal how much of a guess matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert!(parse("short").is_err());
        assert!(parse("has a space in it ok").is_err());
        assert!(parse(&"x".repeat(600)).is_err());
        let token = parse("0123456789abcdef-token").unwrap();
        let stored = digest(&token);
        assert!(verify(Some("Bearer 0123456789abcdef-token"), &stored));
        assert!(!verify(Some("Bearer 0123456789abcdef-tokem"), &stored));
        assert!(!verify(Some("0123456789abcdef-token"), &stored));
        assert!(!verify(None, &stored));
    }

    #[test]
    fn constant_time_eq_matches_only_equal_inputs() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
