//! Who may talk to a loopback server. Listening on 127.0.0.1 keeps other machines out, but not
//! a web page open in the learner's browser: a page can post to http://127.0.0.1:8080 (CSRF),
//! or rebind its own domain name to 127.0.0.1 and then read the answers (DNS rebinding). So
//! every request must name this server in `Host` (a loopback address or `localhost`, with our
//! port), a browser's `Origin` must be a loopback page, and a predict body must say it is JSON
//! (which a cross-site form cannot do without a CORS preflight, which this server never grants).

use axum::http::{HeaderMap, header};

/// Whether `host` (a URL's or a header's host part, IPv6 in brackets or not) is this machine:
/// `localhost` or a loopback address.
pub fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Splits `host[:port]` (`[v6]:port` for IPv6); None when the port is not a number.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = match s.rfind(':') {
        // A colon inside brackets belongs to an IPv6 address, not a port.
        Some(i) if !s[i..].contains(']') => (&s[..i], Some(s[i + 1..].parse().ok()?)),
        _ => (s, None),
    };
    Some((host, port))
}

/// Checks `Host` and `Origin`; the refusal names the header and what was wrong.
pub fn check_peer(headers: &HeaderMap, port: u16) -> Result<(), String> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).ok_or("the request has no readable Host header")?;
    let ours = split_host_port(host).is_some_and(|(h, p)| is_loopback_host(h) && p.unwrap_or(80) == port);
    if !ours {
        return Err(format!(
            "Host {host:?} is not this server; only 127.0.0.1:{port}, localhost:{port} or [::1]:{port} are answered (a page that renamed itself to this address is refused)"
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let text = origin.to_str().unwrap_or("");
        let loopback = ["http://", "https://"]
            .iter()
            .find_map(|scheme| text.strip_prefix(scheme))
            .and_then(split_host_port)
            .is_some_and(|(h, _)| is_loopback_host(h));
        if !loopback {
            return Err(format!("cross-origin request from {text:?} refused: only pages on this machine's loopback may call this server"));
        }
    }
    Ok(())
}

/// Checks that a body says it is JSON (`application/json`, parameters allowed).
pub fn check_json(headers: &HeaderMap) -> Result<(), String> {
    let ct = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?"));
    let essence = ct.map(|c| c.split(';').next().unwrap_or("").trim());
    if essence.is_some_and(|e| e.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    Err(format!(
        "Content-Type {} is not JSON; send the body with Content-Type: application/json",
        ct.map_or("(none)".into(), |c| format!("{c:?}"))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn answers_only_its_own_loopback_name_and_port() {
        for ok in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080", "[::1]:8080"] {
            assert!(check_peer(&headers(&[(header::HOST, ok)]), 8080).is_ok(), "{ok}");
        }
        for bad in ["evil.example:8080", "127.0.0.1:9090", "127.0.0.1", "localhost.evil.example:8080", "[::1]", "127.0.0.1:x", ""] {
            assert!(check_peer(&headers(&[(header::HOST, bad)]), 8080).is_err(), "{bad}");
        }
        assert!(check_peer(&headers(&[(header::HOST, "127.0.0.1")]), 80).is_ok(), "port 80 may be left out");
        assert!(check_peer(&HeaderMap::new(), 8080).unwrap_err().contains("no readable Host"));
    }

    #[test]
    fn refuses_pages_that_are_not_on_loopback() {
        let with = |o: &str| check_peer(&headers(&[(header::HOST, "127.0.0.1:8080"), (header::ORIGIN, o)]), 8080);
        for ok in ["http://127.0.0.1:8080", "http://localhost:3000", "https://[::1]"] {
            assert!(with(ok).is_ok(), "{ok}");
        }
        for bad in ["http://evil.example", "null", "file://", "http://127.0.0.1.evil.example", "http://localhost@evil.example"] {
            assert!(with(bad).unwrap_err().contains("cross-origin"), "{bad}");
        }
    }

    #[test]
    fn a_body_must_say_it_is_json() {
        assert!(check_json(&headers(&[(header::CONTENT_TYPE, "application/json")])).is_ok());
        assert!(check_json(&headers(&[(header::CONTENT_TYPE, "Application/JSON; charset=utf-8")])).is_ok());
        for bad in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonp"] {
            assert!(check_json(&headers(&[(header::CONTENT_TYPE, bad)])).unwrap_err().contains("not JSON"), "{bad}");
        }
        assert!(check_json(&HeaderMap::new()).unwrap_err().contains("(none)"));
    }
}
