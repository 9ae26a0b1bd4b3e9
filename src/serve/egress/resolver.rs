//! The only resolver the egress HTTP client uses: `[egress.resolve]` mappings first, then DNS,
//! and every address vetted before the client may connect to it (policy rule 3). Because the
//! client connects to exactly the addresses returned here, a name cannot be rebound between the
//! check and the connection.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::policy::is_global;

/// A name the policy refuses to connect to, raised through reqwest so the decision survives its
/// error wrapping (see `transport::classify`).
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct AddressRefused {
    /// The name as looked up (lower-case, no trailing dot).
    pub host: String,
    pub reason: String,
}

/// The only resolver the egress client uses: `[egress.resolve]` first, then DNS, and every
/// resulting address vetted before the client may connect to it.
pub struct VettingResolver {
    resolve: Arc<BTreeMap<String, IpAddr>>,
    allow_private_networks: bool,
}

impl VettingResolver {
    pub fn new(resolve: &BTreeMap<String, IpAddr>, allow_private_networks: bool) -> VettingResolver {
        let resolve = resolve.iter().map(|(host, ip)| (host.to_ascii_lowercase(), *ip)).collect();
        VettingResolver { resolve: Arc::new(resolve), allow_private_networks }
    }
}

impl reqwest::dns::Resolve for VettingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let mapped = self.resolve.get(&name).copied();
        let allow_private = self.allow_private_networks;
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = match mapped {
                // Port 0 tells the connector to use the URL's port.
                Some(ip) => vec![SocketAddr::new(ip, 0)],
                None => tokio::net::lookup_host((name.as_str(), 0)).await?.collect(),
            };
            if addresses.is_empty() {
                return Err(Box::new(AddressRefused { reason: format!("{name} has no addresses"), host: name }) as _);
            }
            if !allow_private && let Some(bad) = addresses.iter().find(|a| !is_global(a.ip())) {
                let reason = format!("{name} resolves to {}, which is not a public address", bad.ip());
                return Err(Box::new(AddressRefused { host: name, reason }) as _);
            }
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(allow_private_networks: bool) -> VettingResolver {
        let mut map = BTreeMap::new();
        map.insert("mapped.test".to_string(), "10.0.0.7".parse().unwrap());
        map.insert("public.test".to_string(), "93.184.216.34".parse().unwrap());
        VettingResolver { resolve: Arc::new(map), allow_private_networks }
    }

    async fn lookup(resolver: &VettingResolver, name: &str) -> Result<Vec<SocketAddr>, String> {
        use reqwest::dns::Resolve;
        let name: reqwest::dns::Name = name.parse().unwrap();
        resolver.resolve(name).await.map(|addrs| addrs.collect()).map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn the_resolver_vets_real_dns_answers_and_mappings() {
        // `localhost` goes through the system resolver (hosts file, no network) and answers loopback.
        let strict = resolver(false);
        let refused = lookup(&strict, "localhost").await.unwrap_err();
        assert!(refused.contains("not a public address"), "{refused}");
        assert!(lookup(&strict, "mapped.test").await.is_err());
        assert!(lookup(&strict, "MAPPED.test.").await.is_err(), "names are canonicalised before the lookup");
        let public = lookup(&strict, "public.test").await.unwrap();
        assert_eq!(public, vec!["93.184.216.34:0".parse().unwrap()], "port 0 keeps the URL's port");

        let open = resolver(true);
        assert!(lookup(&open, "localhost").await.unwrap().iter().all(|a| a.ip().is_loopback()));
        assert_eq!(lookup(&open, "mapped.test").await.unwrap()[0].ip().to_string(), "10.0.0.7");
    }
}
