//! Handlers must never reach the daemon itself. With loopback upstreams allowed
//! (`allow_private_networks`) or a name mapped or resolving to one of this host's addresses, a
//! handler could otherwise `fetch` the daemon's own port and use its admin API: read other
//! servers' handlers and logs, register servers with any whitelist.
//!
//! The check is on the connection itself, after the connector has connected and before a byte
//! is written: the peer address of the socket is compared with the daemon's listening addresses
//! (with every address of this host when it listens on `0.0.0.0` or `::`). Whatever the
//! resolver, the whitelist or a redirect said, and even if DNS answered differently a moment
//! before, a connection to the daemon is dropped unused.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connection, HttpInfo};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The daemon's listening addresses, set once it listens; shared by the egress connector.
#[derive(Clone, Default)]
pub struct OwnAddresses {
    inner: Arc<RwLock<Vec<SocketAddr>>>,
}

/// A connection refused because its peer is the daemon itself.
#[derive(Debug, thiserror::Error)]
#[error("{address} is this daemon's own address; handlers cannot call the daemon")]
pub struct OwnAddressRefused {
    pub address: SocketAddr,
}

impl OwnAddresses {
    /// Records a listening address; for an unspecified one (`0.0.0.0`, `::`) every address of
    /// this host with that port.
    pub fn add(&self, listening: SocketAddr) {
        let mut addresses = vec![listening];
        if listening.ip().is_unspecified() {
            addresses.extend(host_addresses().into_iter().map(|ip| SocketAddr::new(ip, listening.port())));
            addresses.push(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), listening.port()));
            addresses.push(SocketAddr::new(IpAddr::from(std::net::Ipv6Addr::LOCALHOST), listening.port()));
        }
        self.inner.write().unwrap_or_else(|p| p.into_inner()).extend(addresses);
    }

    /// Whether a connection to `peer` reaches the daemon.
    pub fn contains(&self, peer: SocketAddr) -> bool {
        let peer = SocketAddr::new(canonical(peer.ip()), peer.port());
        let own = self.inner.read().unwrap_or_else(|p| p.into_inner());
        own.iter().any(|address| {
            address.port() == peer.port()
                && (canonical(address.ip()) == peer.ip()
                    // 127.0.0.2 and friends reach a daemon listening on 127.0.0.1 too.
                    || address.ip().is_loopback() && peer.ip().is_loopback())
        })
    }
}

/// IPv4-mapped IPv6 addresses compare as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Every address of this host's interfaces (`getifaddrs`); empty where it is not available.
fn host_addresses() -> Vec<IpAddr> {
    #[cfg(unix)]
    {
        let mut addresses = Vec::new();
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs fills `list` with a linked list we only read, then free once.
        unsafe {
            if libc::getifaddrs(&mut list) != 0 {
                return addresses;
            }
            let mut entry = list;
            while !entry.is_null() {
                let address = (*entry).ifa_addr;
                if !address.is_null() {
                    match i32::from((*address).sa_family) {
                        libc::AF_INET => {
                            let v4 = &*(address as *const libc::sockaddr_in);
                            addresses.push(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()));
                        }
                        libc::AF_INET6 => {
                            let v6 = &*(address as *const libc::sockaddr_in6);
                            addresses.push(IpAddr::from(v6.sin6_addr.s6_addr));
                        }
                        _ => {}
                    }
                }
                entry = (*entry).ifa_next;
            }
            libc::freeifaddrs(list);
        }
        addresses
    }
    #[cfg(not(unix))]
    Vec::new()
}

/// The connector layer: refuses connections whose peer is the daemon.
#[derive(Clone)]
pub struct RefuseOwnAddressLayer {
    own: OwnAddresses,
}

impl RefuseOwnAddressLayer {
    pub fn new(own: OwnAddresses) -> RefuseOwnAddressLayer {
        RefuseOwnAddressLayer { own }
    }
}

impl<S> tower::Layer<S> for RefuseOwnAddressLayer {
    type Service = RefuseOwnAddress<S>;

    fn layer(&self, inner: S) -> RefuseOwnAddress<S> {
        RefuseOwnAddress { inner, own: self.own.clone() }
    }
}

#[derive(Clone)]
pub struct RefuseOwnAddress<S> {
    inner: S,
    own: OwnAddresses,
}

impl<S, R> tower::Service<R> for RefuseOwnAddress<S>
where
    S: tower::Service<R, Error = BoxError>,
    S::Response: Connection,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let connecting = self.inner.call(request);
        let own = self.own.clone();
        Box::pin(async move {
            let connection = connecting.await?;
            let mut extras = http::Extensions::new();
            connection.connected().get_extras(&mut extras);
            match extras.get::<HttpInfo>().map(HttpInfo::remote_addr) {
                Some(peer) if own.contains(peer) => Err(Box::new(OwnAddressRefused { address: peer }) as BoxError),
                // A connection without its peer address cannot be checked: refuse it.
                None => Err("the connection's peer address is unknown; refused".into()),
                Some(_) => Ok(connection),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_addresses_match_by_port_and_address_or_any_loopback() {
        let own = OwnAddresses::default();
        own.add("127.0.0.1:8080".parse().unwrap());
        assert!(own.contains("127.0.0.1:8080".parse().unwrap()));
        assert!(own.contains("127.0.0.2:8080".parse().unwrap()), "any loopback address reaches it");
        assert!(own.contains("[::ffff:127.0.0.1]:8080".parse().unwrap()), "mapped IPv6 too");
        assert!(!own.contains("127.0.0.1:8081".parse().unwrap()), "another port is another service");
        assert!(!own.contains("10.0.0.1:8080".parse().unwrap()));

        let any = OwnAddresses::default();
        any.add("0.0.0.0:9000".parse().unwrap());
        assert!(any.contains("127.0.0.1:9000".parse().unwrap()));
        assert!(any.contains("[::1]:9000".parse().unwrap()));
        for ip in host_addresses() {
            assert!(any.contains(SocketAddr::new(ip, 9000)), "{ip} is this host's");
        }
        assert!(!any.contains("127.0.0.1:9001".parse().unwrap()));
    }
}
