//! The web server's decisions on a request, as pure functions: which route
//! it asks for ([`route`]), whether its `Host` may be served ([`host_allowed`]:
//! an IP literal or `localhost`, against DNS rebinding), whether a change
//! comes from the page itself ([`origin_allowed`], [`is_json`]) and carries
//! the run's [`Token`] (compared in constant time).

use anyhow::{Context, Result};
use hyper::Method;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Bytes a change's body may have.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// One of the page's files: its name, its content type.
    File(&'static str, &'static str),
    State,
    History,
    Events,
    Change,
    /// A known path asked with another method (OPTIONS among them: no
    /// preflight is ever granted).
    MethodNotAllowed,
    NotFound,
}

pub fn route(method: &Method, path: &str) -> Route {
    let (want, r) = match path {
        "/" | "/index.html" => (
            Method::GET,
            Route::File("index.html", "text/html; charset=utf-8"),
        ),
        "/app.js" => (
            Method::GET,
            Route::File("app.js", "text/javascript; charset=utf-8"),
        ),
        "/style.css" => (
            Method::GET,
            Route::File("style.css", "text/css; charset=utf-8"),
        ),
        "/api/state" => (Method::GET, Route::State),
        "/api/history" => (Method::GET, Route::History),
        "/api/events" => (Method::GET, Route::Events),
        "/api/change" => (Method::POST, Route::Change),
        _ if method == Method::OPTIONS => return Route::MethodNotAllowed,
        _ => return Route::NotFound,
    };
    if *method == want {
        r
    } else {
        Route::MethodNotAllowed
    }
}

/// `Host` names this server by an IP literal or `localhost` (any port): a
/// page of another site that a DNS name rebound to this address names that
/// name, and is refused.
pub fn host_allowed(host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let name = if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, port)) = rest.split_once(']') else {
            return false;
        };
        if !(port.is_empty() || port.strip_prefix(':').is_some_and(is_port)) {
            return false;
        }
        return ip.parse::<Ipv6Addr>().is_ok();
    } else {
        match host.split_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        }
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<Ipv4Addr>().is_ok()
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// A change's `Origin`, when the browser sends one, must be this server's
/// own (`http://` and the `Host` it was asked by).
pub fn origin_allowed(origin: Option<&str>, host: &str) -> bool {
    match origin {
        None => true,
        Some(o) => o
            .strip_prefix("http://")
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host)),
    }
}

/// `Content-Type: application/json` (parameters such as a charset allowed).
pub fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// The value of `key` in a query string, percent-decoded (`+` a blank).
pub fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k)? == key).then(|| decode(v)).flatten()
    })
}

fn decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                let hex = std::str::from_utf8(&hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// The run's secret: 128 bits from the OS, shown as 32 hex digits in the
/// page's address; a request that carries it may change links.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new() -> Result<Token> {
        let mut bits = [0u8; 16];
        getrandom::fill(&mut bits)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("--web: cannot draw the page's token from the OS")?;
        Ok(Token(bits.iter().map(|b| format!("{b:02x}")).collect()))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }

    /// Whether `given` is the token, in a time that does not depend on
    /// where they differ.
    pub fn matches(&self, given: Option<&[u8]>) -> bool {
        let (mine, given) = (self.0.as_bytes(), given.unwrap_or_default());
        if given.len() != mine.len() {
            return false;
        }
        mine.iter().zip(given).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let get = Method::GET;
        assert_eq!(
            route(&get, "/"),
            Route::File("index.html", "text/html; charset=utf-8")
        );
        assert!(matches!(route(&get, "/app.js"), Route::File("app.js", _)));
        assert!(matches!(
            route(&get, "/style.css"),
            Route::File("style.css", _)
        ));
        assert_eq!(route(&get, "/api/state"), Route::State);
        assert_eq!(route(&get, "/api/history"), Route::History);
        assert_eq!(route(&get, "/api/events"), Route::Events);
        assert_eq!(route(&Method::POST, "/api/change"), Route::Change);
        assert_eq!(route(&get, "/api/change"), Route::MethodNotAllowed);
        assert_eq!(route(&Method::POST, "/api/state"), Route::MethodNotAllowed);
        assert_eq!(
            route(&Method::OPTIONS, "/api/change"),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::OPTIONS, "/elsewhere"),
            Route::MethodNotAllowed
        );
        assert_eq!(route(&get, "/etc/passwd"), Route::NotFound);
        assert_eq!(route(&get, "/../app.js"), Route::NotFound);
    }

    #[test]
    fn hosts() {
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "localhost:1",
            "LOCALHOST",
            "[::1]:8080",
            "[::1]",
            "10.0.0.2:80",
        ] {
            assert!(host_allowed(Some(ok)), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io:80",
            "127.0.0.1:",
            "127.0.0.1:80:80",
            "[::1",
            "[evil]:80",
            "",
        ] {
            assert!(!host_allowed(Some(bad)), "{bad}");
        }
        assert!(!host_allowed(None));
    }

    #[test]
    fn origins_and_types() {
        assert!(origin_allowed(None, "127.0.0.1:8080"));
        assert!(origin_allowed(
            Some("http://127.0.0.1:8080"),
            "127.0.0.1:8080"
        ));
        assert!(!origin_allowed(
            Some("http://evil.example"),
            "127.0.0.1:8080"
        ));
        assert!(!origin_allowed(
            Some("http://127.0.0.1:9999"),
            "127.0.0.1:8080"
        ));
        assert!(!origin_allowed(
            Some("https://127.0.0.1:8080"),
            "127.0.0.1:8080"
        ));
        assert!(!origin_allowed(Some("null"), "127.0.0.1:8080"));
        assert!(is_json(Some("application/json")));
        assert!(is_json(Some("Application/JSON; charset=utf-8")));
        assert!(!is_json(Some("text/plain")));
        assert!(!is_json(Some("application/x-www-form-urlencoded")));
        assert!(!is_json(None));
    }

    #[test]
    fn queries() {
        let q = Some("x=1&link=h1%3Aeth1--r1%3Aeth1");
        assert_eq!(query_param(q, "link").as_deref(), Some("h1:eth1--r1:eth1"));
        assert_eq!(
            query_param(Some("link=a+b"), "link").as_deref(),
            Some("a b")
        );
        assert_eq!(query_param(Some("link=%zz"), "link"), None);
        assert_eq!(query_param(None, "link"), None);
        assert_eq!(query_param(Some("other=1"), "link"), None);
    }

    #[test]
    fn tokens() {
        let t = Token::new().unwrap();
        assert_eq!(t.hex().len(), 32);
        assert!(t.hex().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(t.hex(), Token::new().unwrap().hex());
        assert!(t.matches(Some(t.hex().as_bytes())));
        assert!(!t.matches(Some(&t.hex().as_bytes()[..31])));
        let mut wrong = t.hex().as_bytes().to_vec();
        wrong[31] = if wrong[31] == b'0' { b'1' } else { b'0' };
        assert!(!t.matches(Some(&wrong)));
        assert!(!t.matches(Some(b"")));
        assert!(!t.matches(None));
    }
}
