//! Which scopes a token needs on a mount: the daemon's scope model (`read_scope`, `write_scope`)
//! and a server's extra scopes, decided in one place for the HTTP door (a 403 the host can step
//! up from) and for every tool call the serving path runs (scripts' calls included).

use std::collections::BTreeSet;
use std::fmt;

/// Scopes are RFC 6749 §3.3 scope-tokens: printable ASCII without space, `"` or `\`.
pub fn check_scope(scope: &str) -> Result<(), InvalidScope> {
    if scope.is_empty() {
        return Err(InvalidScope::Empty);
    }
    if scope.len() > MAX_SCOPE_BYTES {
        return Err(InvalidScope::TooLong);
    }
    match scope.chars().find(|&c| !matches!(c, '\x21' | '\x23'..='\x5b' | '\x5d'..='\x7e')) {
        Some(c) => Err(InvalidScope::Character(c)),
        None => Ok(()),
    }
}

/// Why [`check_scope`] refused a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidScope {
    #[error("a scope cannot be empty")]
    Empty,
    #[error("a scope has at most {MAX_SCOPE_BYTES} characters")]
    TooLong,
    #[error("{0:?} cannot be part of a scope (RFC 6749 §3.3: printable ASCII without space, '\"' or '\\\\')")]
    Character(char),
}

/// Longer scopes are a mistake, not a scope.
const MAX_SCOPE_BYTES: usize = 128;

/// What a token must hold on one mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeRule {
    /// Calls read-only tools (with `write`: both or neither are set).
    read: Option<String>,
    /// Calls every tool.
    write: Option<String>,
    /// Needed for anything on the mount, on top of the above (a server's own scopes).
    extra: Vec<String>,
}

/// A token lacks scopes: the 403 `insufficient_scope` names `needed` so a host can ask for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingScope {
    /// The scopes to request for what was refused (space-joined in the challenge).
    pub needed: Vec<String>,
    /// What was refused, for the message: "tool \"x\"", "this server".
    pub what: String,
}

impl fmt::Display for MissingScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the access token lacks the scope needed for {}: it needs {}", self.what, self.needed.join(" "))
    }
}

impl ScopeRule {
    pub fn new(read: Option<String>, write: Option<String>, extra: Vec<String>) -> ScopeRule {
        ScopeRule { read, write, extra }
    }

    /// Whether this rule asks for nothing (every valid token may do everything).
    pub fn is_open(&self) -> bool {
        self.read.is_none() && self.write.is_none() && self.extra.is_empty()
    }

    /// Every scope this rule may ask for, for `scopes_supported` in the mount's metadata.
    pub fn scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self.read.iter().chain(&self.write).cloned().collect();
        scopes.extend(self.extra.iter().filter(|s| !scopes.contains(s)).cloned().collect::<Vec<_>>());
        scopes
    }

    /// The mount itself: a server's extra scopes are needed for any request.
    pub fn check_mount(&self, held: &BTreeSet<String>) -> Result<(), MissingScope> {
        if self.extra.iter().all(|scope| held.contains(scope)) {
            return Ok(());
        }
        Err(MissingScope {
            needed: self.with_extra(self.read.as_ref().or(self.write.as_ref())),
            what: "this server".into(),
        })
    }

    /// One tool: a read-only tool needs the read or the write scope, any other the write scope;
    /// the server's extra scopes always.
    pub fn check_tool(&self, held: &BTreeSet<String>, tool: &str, read_only: bool) -> Result<(), MissingScope> {
        let has = |scope: &Option<String>| scope.as_ref().is_none_or(|scope| held.contains(scope));
        let granted = if read_only { has(&self.read) || has(&self.write) } else { has(&self.write) };
        if granted && self.extra.iter().all(|scope| held.contains(scope)) {
            return Ok(());
        }
        let model = if read_only { self.read.as_ref() } else { self.write.as_ref() };
        Err(MissingScope { needed: self.with_extra(model), what: format!("tool {tool:?}") })
    }

    fn with_extra(&self, model: Option<&String>) -> Vec<String> {
        let mut needed: Vec<String> = model.into_iter().cloned().collect();
        needed.extend(self.extra.iter().filter(|scope| Some(*scope) != model).cloned());
        needed
    }
}

/// A token accepted on a mount: who holds it, and what it may call there. Travels with the
/// request into the serving path, which checks every tool call against it and logs the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub claims: super::claims::Claims,
    pub rule: ScopeRule,
}

impl Grant {
    pub fn check_tool(&self, tool: &str, read_only: bool) -> Result<(), MissingScope> {
        self.rule.check_tool(&self.claims.scopes, tool, read_only)
    }
}

/// How the HTTP door let a request in, carried with it into the serving path. A tool call that
/// arrives without one is refused there: a new way into a mount that forgets to carry the door's
/// verdict fails closed, not open.
#[derive(Debug, Clone)]
pub enum Admission {
    /// An open mount, or one with a static token: nothing to check per call.
    Unscoped,
    /// An OAuth token, whose grant every call is checked against.
    Granted(std::sync::Arc<Grant>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(scopes: &[&str]) -> BTreeSet<String> {
        scopes.iter().map(|s| s.to_string()).collect()
    }

    fn model(extra: &[&str]) -> ScopeRule {
        ScopeRule::new(Some("mcp:read".into()), Some("mcp:write".into()), extra.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn read_scope_calls_read_only_tools_and_write_scope_calls_all() {
        let rule = model(&[]);
        assert!(rule.check_tool(&held(&["mcp:read"]), "get", true).is_ok());
        assert!(rule.check_tool(&held(&["mcp:write"]), "get", true).is_ok());
        assert!(rule.check_tool(&held(&["mcp:write"]), "set", false).is_ok());
        let missing = rule.check_tool(&held(&["mcp:read"]), "set", false).unwrap_err();
        assert_eq!(missing.needed, ["mcp:write"]);
        assert_eq!(missing.to_string(), "the access token lacks the scope needed for tool \"set\": it needs mcp:write");
        assert_eq!(rule.check_tool(&held(&[]), "get", true).unwrap_err().needed, ["mcp:read"]);
        assert!(rule.check_mount(&held(&[])).is_ok(), "the model alone does not guard the mount");
    }

    #[test]
    fn extra_scopes_are_needed_for_everything() {
        let rule = model(&["billing"]);
        assert_eq!(rule.check_mount(&held(&["mcp:write"])).unwrap_err().needed, ["mcp:read", "billing"]);
        assert!(rule.check_mount(&held(&["billing"])).is_ok());
        assert_eq!(rule.check_tool(&held(&["mcp:write"]), "set", false).unwrap_err().needed, ["mcp:write", "billing"]);
        assert!(rule.check_tool(&held(&["mcp:read", "billing"]), "get", true).is_ok());
        assert_eq!(rule.scopes(), ["mcp:read", "mcp:write", "billing"]);

        let only_extra = ScopeRule::new(None, None, vec!["ops".into()]);
        assert!(only_extra.check_tool(&held(&["ops"]), "set", false).is_ok());
        assert_eq!(only_extra.check_tool(&held(&[]), "set", false).unwrap_err().needed, ["ops"]);
        assert!(ScopeRule::default().is_open() && ScopeRule::default().check_tool(&held(&[]), "x", false).is_ok());
    }

    #[test]
    fn scopes_are_rfc_6749_scope_tokens() {
        for good in ["mcp:read", "https://api.example.com/write", "a!#[]~"] {
            assert!(check_scope(good).is_ok(), "{good}");
        }
        for bad in ["", "two words", "quote\"", "back\\slash", "naïve", &"x".repeat(129)] {
            assert!(check_scope(bad).is_err(), "{bad}");
        }
    }

    /// Operators read these messages at start-up and admin API clients at registration, so they
    /// are pinned word for word.
    #[test]
    fn scope_refusals_read_as_before() {
        let refusal = |scope: &str| check_scope(scope).unwrap_err().to_string();
        assert_eq!(refusal(""), "a scope cannot be empty");
        assert_eq!(refusal(&"x".repeat(129)), "a scope has at most 128 characters");
        assert_eq!(
            refusal("two words"),
            r#"' ' cannot be part of a scope (RFC 6749 §3.3: printable ASCII without space, '"' or '\\')"#
        );
    }
}
