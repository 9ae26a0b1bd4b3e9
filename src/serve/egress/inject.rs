//! Credentials added to a request on its way out: after the policy allowed the hop, to that hop
//! only, and only when its host matches a credential's domains (the caller passes none once a
//! redirect has left the request's origin), so a credential never follows a request off its
//! domains. A header the handler set with the same name is replaced, never merged, and a query
//! parameter of the same name is replaced.
//!
//! [`CredentialIdentity`] names, without revealing them, the credentials a hop carried: the cache
//! keeps what one identity fetched from every other, and a `Retry-After` holds only the identity
//! it answered.

use std::borrow::Cow;

use base64::Engine;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use sha2::{Digest, Sha256};

use crate::credentials::{Credential, Injection};
use crate::whitelist::CanonicalHost;

/// The request headers that carry credentials, whoever set them: dropped when a redirect leaves
/// the origin, and part of a hop's [`CredentialIdentity`].
pub const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

/// Which credentials a hop carried, as a digest of their names and values: those the egress
/// added, and the `Authorization`, `Cookie` and `Proxy-Authorization` headers it sent (which a
/// handler may have set from its arguments). Two hops have the same identity exactly when the
/// upstream would see the same credentials. [`CredentialIdentity::NONE`] is a hop with none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CredentialIdentity(Option<[u8; 32]>);

impl CredentialIdentity {
    pub const NONE: CredentialIdentity = CredentialIdentity(None);

    /// The identity of a hop that got the credentials named `applied` (from `credentials`) and
    /// was sent with `headers`.
    pub fn of_hop(credentials: &[Credential], applied: &[String], headers: &HeaderMap) -> CredentialIdentity {
        let added =
            credentials.iter().filter(|c| applied.contains(&c.name)).map(|c| (c.name.as_str(), c.value.as_bytes()));
        let sent = CREDENTIAL_HEADERS
            .iter()
            .flat_map(|name| headers.get_all(*name).iter().map(move |value| (*name, value.as_bytes())));
        Self::digest(added.chain(sent))
    }

    /// The identity of named values, as [`Self::of_hop`] computes it.
    pub fn of_values<'a>(values: impl IntoIterator<Item = (&'a str, &'a str)>) -> CredentialIdentity {
        Self::digest(values.into_iter().map(|(name, value)| (name, value.as_bytes())))
    }

    fn digest<'a>(values: impl Iterator<Item = (&'a str, &'a [u8])>) -> CredentialIdentity {
        let mut values: Vec<_> = values.collect();
        if values.is_empty() {
            return CredentialIdentity::NONE;
        }
        values.sort();
        let mut hasher = Sha256::new();
        for (name, value) in values {
            // Lengths first, so no two lists of pairs hash the same bytes.
            hasher.update((name.len() as u64).to_be_bytes());
            hasher.update(name.as_bytes());
            hasher.update((value.len() as u64).to_be_bytes());
            hasher.update(value);
        }
        CredentialIdentity(Some(hasher.finalize().into()))
    }
}

/// One hop's URL and headers with the matching credentials added, and their names; borrowed
/// unchanged when none matches.
pub fn apply<'a>(
    credentials: &[Credential],
    url: &'a url::Url,
    headers: &'a HeaderMap,
) -> (Cow<'a, url::Url>, Cow<'a, HeaderMap>, Vec<String>) {
    let (mut url, mut headers, mut applied) = (Cow::Borrowed(url), Cow::Borrowed(headers), Vec::new());
    let Some(host) = CanonicalHost::of_url(&url).map(|host| host.to_string()) else {
        return (url, headers, applied);
    };
    for credential in credentials.iter().filter(|c| c.binding.matches(&host)) {
        let added = match &credential.binding.inject {
            Injection::Header { header, format } => {
                let value = format.replacen("{value}", &credential.value, 1);
                set_header(headers.to_mut(), header, &value)
            }
            Injection::Basic { basic } => {
                let pair = format!("{}:{}", basic.username, credential.value);
                let value = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair));
                set_header(headers.to_mut(), AUTHORIZATION.as_str(), &value)
            }
            Injection::Query { query } => {
                let url = url.to_mut();
                let kept: Vec<(String, String)> = url
                    .query_pairs()
                    .filter(|(name, _)| name != query)
                    .map(|(n, v)| (n.into_owned(), v.into_owned()))
                    .collect();
                url.query_pairs_mut().clear().extend_pairs(kept).append_pair(query, &credential.value);
                true
            }
        };
        if added {
            applied.push(credential.name.clone());
        }
    }
    (url, headers, applied)
}

fn set_header(headers: &mut HeaderMap, name: &str, value: &str) -> bool {
    let (Ok(name), Ok(mut value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) else {
        // Checked when the credential was stored; a value that no longer fits is left out.
        return false;
    };
    value.set_sensitive(true);
    headers.insert(name, value);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::{BasicUser, Binding};

    fn credential(name: &str, domain: &str, inject: Injection) -> Credential {
        Credential {
            name: name.into(),
            binding: Binding { domains: vec![domain.into()], inject, per_user: None },
            value: format!("{name}-secret-value"),
        }
    }

    #[test]
    fn only_matching_hosts_get_credentials_and_handler_headers_are_replaced() {
        let credentials = [
            credential(
                "gh",
                "api.github.test",
                Injection::Header { header: "authorization".into(), format: "Bearer {value}".into() },
            ),
            credential("weather", "weather.test", Injection::Query { query: "appid".into() }),
            credential("svc", "svc.test", Injection::Basic { basic: BasicUser { username: "me".into() } }),
        ];
        let mut handler_headers = HeaderMap::new();
        handler_headers.insert("authorization", HeaderValue::from_static("Bearer handler-made"));

        let url = url::Url::parse("https://API.github.test./repos").unwrap();
        let (out_url, out_headers, applied) = apply(&credentials, &url, &handler_headers);
        assert_eq!(applied, ["gh"]);
        assert_eq!(out_headers.get_all("authorization").iter().count(), 1, "replaced, not merged");
        assert_eq!(out_headers["authorization"], "Bearer gh-secret-value");
        assert!(matches!(out_url, Cow::Borrowed(_)));

        let url = url::Url::parse("https://eu.weather.test/now?appid=guess&q=Oslo").unwrap();
        let none = HeaderMap::new();
        let (out_url, _, applied) = apply(&credentials, &url, &none);
        assert_eq!(applied, ["weather"]);
        assert_eq!(out_url.query(), Some("q=Oslo&appid=weather-secret-value"));

        let url = url::Url::parse("https://svc.test/").unwrap();
        let (_, out_headers, _) = apply(&credentials, &url, &none);
        assert_eq!(out_headers["authorization"], "Basic bWU6c3ZjLXNlY3JldC12YWx1ZQ==");

        for elsewhere in ["https://github.test/", "https://api.github.test.evil.test/", "https://notweather.test/"] {
            let url = url::Url::parse(elsewhere).unwrap();
            let (out_url, out_headers, applied) = apply(&credentials, &url, &handler_headers);
            assert!(applied.is_empty(), "{elsewhere}");
            assert!(matches!((out_url, out_headers), (Cow::Borrowed(_), Cow::Borrowed(_))), "{elsewhere}");
        }
    }
}
