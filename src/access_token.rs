//! Per-server MCP access tokens: checked, stored as a sha256, compared in constant time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const MIN_LEN: usize = 16;
const MAX_LEN: usize = 512;

/// Why [`parse`] refused a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAccessToken {
    #[error("access_token must be {MIN_LEN} to {MAX_LEN} characters long")]
    Length,
    #[error("access_token may only contain printable ASCII characters without spaces")]
    Characters,
}

/// Parses an operator-chosen token, refusing ones too short to be secret or awkward in headers.
pub fn parse(raw: &str) -> Result<String, InvalidAccessToken> {
    if raw.len() < MIN_LEN || raw.len() > MAX_LEN {
        return Err(InvalidAccessToken::Length);
    }
    if !raw.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidAccessToken::Characters);
    }
    Ok(raw.to_string())
}

/// What the catalog keeps: the hex sha256, so a leaked catalog does not leak working tokens.
pub fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The token of a bearer `Authorization` header value, trimmed; `None` for another scheme. Every
/// token check (static, admin, OAuth) reads the header through this.
pub fn bearer(authorization: &str) -> Option<&str> {
    authorization.strip_prefix("Bearer ").or_else(|| authorization.strip_prefix("bearer ")).map(str::trim)
}

/// Whether a presented `Authorization` header value carries the token with this digest.
pub fn verify(authorization: Option<&str>, expected_digest: &str) -> bool {
    let Some(token) = authorization.and_then(bearer) else {
        return false;
    };
    // Both are hex sha256 digests of the same length; `subtle` compares them without an early exit.
    digest(token).as_bytes().ct_eq(expected_digest.as_bytes()).into()
}

/// Whether two secrets are equal, in time that depends on neither their content nor their
/// lengths: both are hashed to fixed-size digests, which `subtle` compares without an early exit,
/// so response timing reveals neither how much of a guess matched nor how long the secret is.
pub fn secrets_match(a: &[u8], b: &[u8]) -> bool {
    Sha256::digest(a).ct_eq(&Sha256::digest(b)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert_eq!(parse("short"), Err(InvalidAccessToken::Length));
        assert_eq!(parse("has a space in it ok"), Err(InvalidAccessToken::Characters));
        assert_eq!(parse(&"x".repeat(600)), Err(InvalidAccessToken::Length));
        // Admin API clients read these messages, so they are pinned word for word.
        assert_eq!(InvalidAccessToken::Length.to_string(), "access_token must be 16 to 512 characters long");
        assert_eq!(
            InvalidAccessToken::Characters.to_string(),
            "access_token may only contain printable ASCII characters without spaces"
        );
        let token = parse("0123456789abcdef-token").unwrap();
        let stored = digest(&token);
        assert!(verify(Some("Bearer 0123456789abcdef-token"), &stored));
        assert!(!verify(Some("Bearer 0123456789abcdef-tokem"), &stored));
        assert!(!verify(Some("0123456789abcdef-token"), &stored));
        assert!(!verify(None, &stored));
    }

    #[test]
    fn secrets_match_only_when_equal() {
        assert!(secrets_match(b"abc", b"abc"));
        assert!(!secrets_match(b"abc", b"abd"));
        assert!(!secrets_match(b"abc", b"abcd"));
        assert!(!secrets_match(b"", b"a"));
        assert!(secrets_match(b"", b""));
    }
}
