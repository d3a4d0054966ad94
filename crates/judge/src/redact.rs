//! Credentials out of every message, and the request URL built properly:
//! a `--judge-url` may carry `user:pass@` or `?api-key=…`, and a base URL
//! may carry a query (`?api-version=…`) that must stay after the path.

use url::Url;

/// Query parameter names (lowercased, `-`/`_` removed) that look like they
/// hold a credential.
const SECRET_PARAMS: [&str; 10] = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "sig",
    "auth",
    "credential",
    "code",
];

/// True when a query parameter's value must not be shown.
fn is_secret_param(name: &str) -> bool {
    let name: String = name
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_PARAMS.iter().any(|s| name.contains(s))
}

/// The URL as it may be shown: userinfo → `***@`, values of key-, token-,
/// secret-, password- and signature-like query parameters → `***`, the
/// fragment dropped.
pub(crate) fn redact_url(url: &Url) -> String {
    redacted(url, "***")
}

/// The URL as part of a cache key: like [`redact_url`] but with no userinfo
/// at all, so that the same server with other credentials has the same key.
pub(crate) fn key_url(url: &Url) -> String {
    redacted(url, "")
}

fn redacted(url: &Url, userinfo: &str) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    if !u.username().is_empty() || u.password().is_some() {
        let _ = u.set_password(None);
        let _ = u.set_username(userinfo);
    }
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_param(&k) {
                    "***".to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// [`redact_url`] for text that may not even parse as a URL: what cannot be
/// parsed loses everything before an `@` and everything after a `?`.
pub(crate) fn redact_text_url(raw: &str) -> String {
    if let Ok(u) = Url::parse(raw) {
        return redact_url(&u);
    }
    let mut s = raw.to_string();
    if let Some(q) = s.find(['?', '#']) {
        s.truncate(q);
        s.push_str("?***");
    }
    if let Some(at) = s.rfind('@') {
        let start = s.find("://").map_or(0, |p| p + 3);
        if start <= at {
            s.replace_range(start..at, "***");
        }
    }
    s
}

/// An endpoint under the base URL: `segments` appended to its path, before
/// its query (`/files`, `/batches/ID` of the Batch API).
pub(crate) fn api_url(base: &Url, segments: &[&str]) -> Result<Url, String> {
    let mut u = base.clone();
    u.set_fragment(None);
    u.path_segments_mut()
        .map_err(|()| format!("{}: not a base URL", redact_url(base)))?
        .pop_if_empty()
        .extend(segments);
    Ok(u)
}

/// The credentials a URL and an API key carry, to scrub from any text (a
/// server's error body or a transport error may echo them).
pub(crate) fn secrets(url: &Url, api_key: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: &str| {
        // Very short values would mangle ordinary words; the structural
        // redaction of the URL itself does not depend on this list.
        if s.len() >= 4 && !out.iter().any(|o| o == s) {
            out.push(s.to_string());
        }
    };
    add(url.username());
    if let Some(p) = url.password() {
        add(p);
        if let Ok(d) = percent_decode(p) {
            add(&d);
        }
    }
    for (k, v) in url.query_pairs() {
        if is_secret_param(&k) {
            add(&v);
        }
    }
    if let Some(q) = url.query() {
        for part in q.split('&') {
            if let Some((k, v)) = part.split_once('=') {
                if is_secret_param(k) {
                    add(v);
                }
            }
        }
    }
    if let Some(k) = api_key {
        add(k);
    }
    // Longest first, so a secret containing another is replaced whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

fn percent_decode(s: &str) -> Result<String, ()> {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .ok_or(())
}

/// `text` with every secret replaced by `***`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn userinfo_and_secret_params_are_redacted() {
        assert_eq!(
            redact_url(&url("http://user:pa55word@judge.example:8080/v1")),
            "http://***@judge.example:8080/v1"
        );
        assert_eq!(
            redact_url(&url("https://TOKEN1234@judge.example/v1")),
            "https://***@judge.example/v1"
        );
        let shown = redact_url(&url(
            "http://h/v1?api-version=2024-01&api-key=s3cr3t&access_token=t0k3n&sig=abcd",
        ));
        assert_eq!(
            shown,
            "http://h/v1?api-version=2024-01&api-key=***&access_token=***&sig=***"
        );
        assert!(!shown.contains("s3cr3t") && !shown.contains("t0k3n"));
        assert_eq!(redact_url(&url("http://h/v1")), "http://h/v1");
        let odd = redact_text_url("not a url user:pw@x?key=zzz");
        assert!(!odd.contains("pw") && !odd.contains("zzz"), "{odd}");
    }

    #[test]
    fn the_chat_path_goes_before_the_query() {
        let u = api_url(
            &url("http://h/v1?api-version=2024-01"),
            &["chat", "completions"],
        )
        .unwrap();
        assert_eq!(
            u.as_str(),
            "http://h/v1/chat/completions?api-version=2024-01"
        );
        let u = api_url(&url("http://h:8080/v1/"), &["chat", "completions"]).unwrap();
        assert_eq!(u.as_str(), "http://h:8080/v1/chat/completions");
        let u = api_url(&url("http://h"), &["chat", "completions"]).unwrap();
        assert_eq!(u.as_str(), "http://h/chat/completions");
    }

    #[test]
    fn scrub_removes_every_credential() {
        let u = url("http://al1ce:p%40ss-word@h/v1?api-key=s3cr3t");
        let s = secrets(&u, Some("sk-live-123"));
        let text = "echo: al1ce p@ss-word p%40ss-word s3cr3t Bearer sk-live-123";
        let clean = scrub(text, &s);
        for secret in ["al1ce", "p@ss-word", "p%40ss-word", "s3cr3t", "sk-live-123"] {
            assert!(!clean.contains(secret), "{secret} left in {clean}");
        }
    }
}
