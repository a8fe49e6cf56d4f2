//! DNS-rebinding protection: refuse requests whose `Host` or `Origin` is not an allowed one.
//!
//! A web page can make a victim's browser send requests to `127.0.0.1` under the page's own
//! host name (DNS rebinding) or from its own origin. Checking both headers against allow-lists
//! (loopback by default) stops that before authentication runs, so a refused request learns
//! nothing about credentials. rmcp applies the same lists again inside its service; this check
//! comes first so the order of answers is fixed (403 before 401).

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

/// Host (lowercase, without IPv6 brackets) and optional port.
fn split_authority(s: &str) -> Option<(String, Option<u16>)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        return Some((host.to_ascii_lowercase(), port));
    }
    match s.matches(':').count() {
        0 => Some((s.to_ascii_lowercase(), None)),
        1 => {
            let (h, p) = s.split_once(':')?;
            if h.is_empty() {
                return None;
            }
            Some((h.to_ascii_lowercase(), Some(p.parse().ok()?)))
        }
        // A bare IPv6 address (allow-list entries such as `::1`).
        _ => Some((s.to_ascii_lowercase(), None)),
    }
}

fn host_allowed(host: &str, allowed: &[String]) -> Result<(), Refusal> {
    if allowed.is_empty() {
        return Ok(());
    }
    let (h, p) = split_authority(host).ok_or(Refusal::BadHost)?;
    let ok = allowed
        .iter()
        .filter_map(|a| split_authority(a))
        .any(|(ah, ap)| {
            ah == h
                && match ap {
                    Some(ap) => p == Some(ap),
                    None => true,
                }
        });
    if ok {
        Ok(())
    } else {
        Err(Refusal::HostNotAllowed)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Port {
    Any,
    Is(u16),
}

fn parse_origin(s: &str, allow_wildcard: bool) -> Option<(String, String, Port)> {
    let (scheme, rest) = s.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return None;
    }
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => 0,
    };
    if allow_wildcard && let Some(h) = rest.strip_suffix(":*") {
        let (host, port) = split_authority(h)?;
        return port.is_none().then_some((scheme, host, Port::Any));
    }
    let (host, port) = split_authority(rest)?;
    Some((scheme, host, Port::Is(port.unwrap_or(default))))
}

fn origin_allowed(origin: &str, allowed: &[String]) -> Result<(), Refusal> {
    if allowed.is_empty() {
        return Ok(());
    }
    if origin.trim() == "null" {
        return if allowed.iter().any(|a| a.trim() == "null") {
            Ok(())
        } else {
            Err(Refusal::OriginNotAllowed)
        };
    }
    let (s, h, p) = parse_origin(origin, false).ok_or(Refusal::OriginNotAllowed)?;
    let ok = allowed
        .iter()
        .filter_map(|a| parse_origin(a, true))
        .any(|(as_, ah, ap)| as_ == s && ah == h && (ap == Port::Any || ap == p));
    if ok {
        Ok(())
    } else {
        Err(Refusal::OriginNotAllowed)
    }
}

/// Checks `Host` (or the URI authority) and `Origin` against the allow-lists.
pub(crate) fn check(
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    hosts: &[String],
    origins: &[String],
) -> Result<(), Refusal> {
    let host = match headers.get(header::HOST) {
        Some(h) => h.to_str().map_err(|_| Refusal::BadHost)?.to_string(),
        None => uri
            .authority()
            .map(|a| a.as_str().to_string())
            .ok_or(Refusal::BadHost)?,
    };
    host_allowed(&host, hosts)?;
    if let Some(o) = headers.get(header::ORIGIN) {
        let o = o.to_str().map_err(|_| Refusal::OriginNotAllowed)?;
        origin_allowed(o, origins)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LOOPBACK_HOSTS, LOOPBACK_ORIGINS};

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
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
