//! DNS-rebinding protection: refuse requests whose `Host` or `Origin` is not an allowed one.
//!
//! A web page can make a victim's browser send requests to `127.0.0.1` under the page's own
//! host name (DNS rebinding) or from its own origin. Checking both headers against allow-lists
//! (loopback by default) stops that before authentication runs, so a refused request learns
//! nothing about credentials (403 always comes before 401). This is the only Host/Origin check
//! on the route: rmcp's own copy is switched off, since this layer always runs first.

use axum::http::{HeaderMap, header};

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Missing or malformed `Host`.
    BadHost,
    /// `Host` not in the allow-list.
    HostNotAllowed,
    /// `Origin` malformed or not in the allow-list.
    OriginNotAllowed,
}

impl Refusal {
    pub(crate) fn message(self) -> &'static str {
        match self {
            Refusal::BadHost => "Bad Request: missing or malformed Host header",
            Refusal::HostNotAllowed => "Forbidden: Host header is not allowed",
            Refusal::OriginNotAllowed => "Forbidden: Origin header is not allowed",
        }
    }
}

/// The name (without IPv6 brackets, case as given) and port of a `Host` header's value or an
/// allow-list entry (`name`, `name:port`, `[v6]:port`, a bare IPv6 address); `None` when it is
/// malformed (empty, a port that is not a number, a path, user info or a space in it). The
/// reading the MCP endpoint's DNS-rebinding check uses, public so that another listener of the
/// same app checks hosts the same way.
///
/// ```
/// assert_eq!(kberg_server::host_and_port("127.0.0.1:7878"), Some(("127.0.0.1", Some(7878))));
/// assert_eq!(kberg_server::host_and_port("[::1]"), Some(("::1", None)));
/// assert_eq!(kberg_server::host_and_port("u@evil.example"), None);
/// ```
pub fn host_and_port(s: &str) -> Option<(&str, Option<u16>)> {
    let s = s.trim();
    if s.is_empty() || s.contains(['/', '@', ' ']) {
        return None;
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        return Some((host, port));
    }
    match s.matches(':').count() {
        0 => Some((s, None)),
        1 => {
            let (h, p) = s.split_once(':')?;
            if h.is_empty() {
                return None;
            }
            Some((h, Some(p.parse().ok()?)))
        }
        // A bare IPv6 address (allow-list entries such as `::1`).
        _ => Some((s, None)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Port {
    Any,
    Is(u16),
}

/// `(scheme, host, port)` of an origin; `allow_wildcard` admits `:*` (allow-list entries).
fn parse_origin(s: &str, allow_wildcard: bool) -> Option<(&str, &str, Port)> {
    let (scheme, rest) = s.trim().split_once("://")?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return None;
    }
    let default = if scheme.eq_ignore_ascii_case("http") {
        80
    } else if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        0
    };
    if allow_wildcard && let Some(h) = rest.strip_suffix(":*") {
        let (host, port) = host_and_port(h)?;
        return port.is_none().then_some((scheme, host, Port::Any));
    }
    let (host, port) = host_and_port(rest)?;
    Some((scheme, host, Port::Is(port.unwrap_or(default))))
}

/// The accepted `Host` and `Origin` values, parsed once when the server is built so a request
/// costs no allocation to check.
#[derive(Debug, Clone)]
pub(crate) struct AllowList {
    /// `None`: every host.
    hosts: Option<Vec<(String, Option<u16>)>>,
    /// `None`: every origin.
    origins: Option<Vec<(String, String, Port)>>,
    null_origin: bool,
}

impl AllowList {
    /// Parses the configured lists; malformed entries are logged and ignored.
    pub(crate) fn new(hosts: &[String], origins: &[String]) -> Self {
        let hosts = (!hosts.is_empty()).then(|| {
            hosts
                .iter()
                .filter_map(|h| {
                    let parsed = host_and_port(h).map(|(n, p)| (n.to_ascii_lowercase(), p));
                    if parsed.is_none() {
                        tracing::warn!(entry = %h, "ignoring a malformed allowed host");
                    }
                    parsed
                })
                .collect()
        });
        let null_origin = origins.iter().any(|o| o.trim() == "null");
        let origins = (!origins.is_empty()).then(|| {
            origins
                .iter()
                .filter(|o| o.trim() != "null")
                .filter_map(|o| {
                    let parsed = parse_origin(o, true)
                        .map(|(s, h, p)| (s.to_ascii_lowercase(), h.to_ascii_lowercase(), p));
                    if parsed.is_none() {
                        tracing::warn!(entry = %o, "ignoring a malformed allowed origin");
                    }
                    parsed
                })
                .collect()
        });
        Self {
            hosts,
            origins,
            null_origin,
        }
    }

    fn host(&self, host: &str) -> Result<(), Refusal> {
        let Some(allowed) = &self.hosts else {
            return Ok(());
        };
        let (h, p) = host_and_port(host).ok_or(Refusal::BadHost)?;
        let ok = allowed.iter().any(|(ah, ap)| {
            h.eq_ignore_ascii_case(ah)
                && match ap {
                    Some(ap) => p == Some(*ap),
                    None => true,
                }
        });
        if ok {
            Ok(())
        } else {
            Err(Refusal::HostNotAllowed)
        }
    }

    fn origin(&self, origin: &str) -> Result<(), Refusal> {
        let Some(allowed) = &self.origins else {
            return Ok(());
        };
        if origin.trim() == "null" {
            return if self.null_origin {
                Ok(())
            } else {
                Err(Refusal::OriginNotAllowed)
            };
        }
        let (s, h, p) = parse_origin(origin, false).ok_or(Refusal::OriginNotAllowed)?;
        let ok = allowed.iter().any(|(as_, ah, ap)| {
            s.eq_ignore_ascii_case(as_)
                && h.eq_ignore_ascii_case(ah)
                && (*ap == Port::Any || *ap == p)
        });
        if ok {
            Ok(())
        } else {
            Err(Refusal::OriginNotAllowed)
        }
    }

    /// Checks `Host` (or the URI authority) and `Origin`.
    pub(crate) fn check(&self, uri: &axum::http::Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        match headers.get(header::HOST) {
            Some(h) => self.host(h.to_str().map_err(|_| Refusal::BadHost)?)?,
            None => self.host(uri.authority().ok_or(Refusal::BadHost)?.as_str())?,
        }
        if let Some(o) = headers.get(header::ORIGIN) {
            self.origin(o.to_str().map_err(|_| Refusal::OriginNotAllowed)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LOOPBACK_HOSTS, LOOPBACK_ORIGINS};

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    fn host_allowed(host: &str, hosts: &[String]) -> Result<(), Refusal> {
        AllowList::new(hosts, &[]).host(host)
    }

    fn origin_allowed(origin: &str, origins: &[String]) -> Result<(), Refusal> {
        AllowList::new(&[], origins).origin(origin)
    }

    #[test]
    fn loopback_hosts() {
        let hosts = v(&LOOPBACK_HOSTS);
        for ok in [
            "localhost",
            "127.0.0.1:8080",
            "LOCALHOST:1",
            "[::1]:9",
            "[::1]",
        ] {
            assert_eq!(host_allowed(ok, &hosts), Ok(()), "{ok}");
        }
        for bad in ["evil.example", "127.0.0.2", "localhost.evil.example:80"] {
            assert_eq!(
                host_allowed(bad, &hosts),
                Err(Refusal::HostNotAllowed),
                "{bad}"
            );
        }
        for malformed in ["", ":80", "localhost:notaport", "[::1"] {
            assert_eq!(
                host_allowed(malformed, &hosts),
                Err(Refusal::BadHost),
                "{malformed}"
            );
        }
        assert_eq!(host_allowed("anything", &[]), Ok(()));
        assert_eq!(
            host_allowed("example.com:8080", &v(&["example.com:8080"])),
            Ok(())
        );
        assert_eq!(
            host_allowed("example.com:8081", &v(&["example.com:8080"])),
            Err(Refusal::HostNotAllowed)
        );
    }

    #[test]
    fn loopback_origins() {
        let origins = v(&LOOPBACK_ORIGINS);
        for ok in [
            "http://localhost:5173",
            "https://127.0.0.1",
            "http://[::1]:3000/",
        ] {
            assert_eq!(origin_allowed(ok, &origins), Ok(()), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "file://",
            "localhost",
            "http://localhost:1/x",
        ] {
            assert_eq!(
                origin_allowed(bad, &origins),
                Err(Refusal::OriginNotAllowed),
                "{bad}"
            );
        }
        let exact = v(&["https://app.example.com", "null"]);
        assert_eq!(
            origin_allowed("https://app.example.com:443", &exact),
            Ok(())
        );
        assert_eq!(origin_allowed("null", &exact), Ok(()));
        assert_eq!(
            origin_allowed("https://app.example.com:8443", &exact),
            Err(Refusal::OriginNotAllowed)
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_headers_never_panic(host in ".{0,40}", origin in ".{0,60}") {
            let hosts = v(&LOOPBACK_HOSTS);
            let origins = v(&LOOPBACK_ORIGINS);
            let _ = host_allowed(&host, &hosts);
            let _ = origin_allowed(&origin, &origins);
            let _ = origin_allowed(&origin, &v(&[origin.as_str()]));
            let _ = host_allowed(&host, &v(&[host.as_str()]));
        }

        #[test]
        fn loopback_with_any_port_is_allowed(port in 1u16..) {
            let hosts = v(&LOOPBACK_HOSTS);
            let origins = v(&LOOPBACK_ORIGINS);
            let host = format!("127.0.0.1:{port}");
            let origin = format!("http://localhost:{port}");
            proptest::prop_assert_eq!(host_allowed(&host, &hosts), Ok(()));
            proptest::prop_assert_eq!(origin_allowed(&origin, &origins), Ok(()));
        }
    }
}
