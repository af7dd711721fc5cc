//! A gateway's routes: `"METHOD /a/:param/b"`, checked at config load and
//! matched against a checked target's raw segments.
//!
//! A literal segment matches exactly (bytes, case included); `:param`
//! matches one non-empty segment, whatever it holds (the target's checks
//! have run: it is no dot segment and holds no encoded `/`). Nothing else
//! matches: no prefixes, no wildcards.

/// One route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    /// As configured (`GET /repos/:owner/:repo/issues`), for messages and
    /// events.
    pub text: String,
    method: String,
    segments: Vec<Segment>,
    /// The request body cap of this route, in bytes.
    pub max_body: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
}

/// Methods a route may not name: the gateway refuses them whatever the
/// routes say.
const REFUSED_METHODS: [&str; 2] = ["CONNECT", "TRACE"];

impl Route {
    /// Parses `text`; `max_body` is its cap.
    ///
    /// # Errors
    ///
    /// A message saying what is wrong with the route.
    pub(crate) fn parse(text: &str, max_body: u64) -> Result<Route, String> {
        let shape = "write a route as `METHOD /path`, e.g. `GET /repos/:owner/:repo/issues`";
        let (method, path) = text
            .trim()
            .split_once(' ')
            .ok_or_else(|| format!("route `{text}`: {shape}"))?;
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "route `{text}`: the method `{method}` must be upper-case letters; {shape}"
            ));
        }
        if REFUSED_METHODS.contains(&method) {
            return Err(format!(
                "route `{text}`: {method} is never forwarded by a gateway"
            ));
        }
        let path = path.trim();
        if !path.starts_with('/') || path.contains(['?', '#']) {
            return Err(format!(
                "route `{text}`: the path must start with `/` and hold no query; {shape}"
            ));
        }
        let mut segments = Vec::new();
        if path != "/" {
            for seg in path[1..].split('/') {
                if seg.is_empty() {
                    return Err(format!(
                        "route `{text}`: the path has an empty segment (`//` or a trailing `/`)"
                    ));
                }
                if let Some(name) = seg.strip_prefix(':') {
                    let ok = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if !ok {
                        return Err(format!(
                            "route `{text}`: the parameter `{seg}` needs a name of letters, \
                             digits and `_`"
                        ));
                    }
                    segments.push(Segment::Param);
                } else {
                    // A literal must itself be a segment the target check passes.
                    let probe = format!("/{seg}");
                    if let Err(why) = super::path::check_target(probe.as_bytes()) {
                        return Err(format!("route `{text}`: segment `{seg}`: {why}"));
                    }
                    segments.push(Segment::Literal(seg.to_string()));
                }
            }
        }
        Ok(Route {
            text: format!("{method} {path}"),
            method: method.to_string(),
            segments,
            max_body,
        })
    }

    /// Whether the route's path matches `segments` (a checked target's).
    pub(crate) fn matches_path(&self, segments: &[&str]) -> bool {
        self.segments.len() == segments.len()
            && self
                .segments
                .iter()
                .zip(segments)
                .all(|(mine, theirs)| match mine {
                    Segment::Literal(l) => l == theirs,
                    Segment::Param => !theirs.is_empty(),
                })
    }

    /// Whether `method` and `segments` match.
    pub(crate) fn matches(&self, method: &str, segments: &[&str]) -> bool {
        self.method == method && self.matches_path(segments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_exact_and_params_take_one_segment() {
        let r = Route::parse("GET /repos/:owner/:repo/issues", 10).unwrap();
        assert!(r.matches("GET", &["repos", "o", "r", "issues"]));
        assert!(!r.matches("POST", &["repos", "o", "r", "issues"]));
        assert!(!r.matches("GET", &["repos", "o", "issues"]));
        assert!(!r.matches("GET", &["repos", "o", "r", "issues", "1"]));
        assert!(!r.matches("GET", &["Repos", "o", "r", "issues"]));
        assert!(!r.matches("get", &["repos", "o", "r", "issues"]));
        let root = Route::parse("GET /", 10).unwrap();
        assert!(root.matches("GET", &[]));
        assert!(!root.matches("GET", &["x"]));
    }

    #[test]
    fn bad_routes_are_refused_with_a_reason() {
        for bad in [
            "GET",
            "get /x",
            "GET x",
            "GET /x?y=1",
            "GET /:",
            "GET /:a-b",
            "GET /a//b",
            "GET /a/../b",
            "GET /a;b",
            "CONNECT /x",
            "GET /a/",
        ] {
            assert!(Route::parse(bad, 1).is_err(), "{bad}");
        }
    }
}
