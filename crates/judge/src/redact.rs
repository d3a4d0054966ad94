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

/// A reader that passes `inner` on line by line with every secret
/// replaced: a provider's result file is kept in the run folder, and a
/// refusal inside it may echo the key.
pub(crate) struct ScrubbedLines<'a, R> {
    inner: R,
    secrets: &'a [String],
    line: Vec<u8>,
    at: usize,
}

impl<'a, R: std::io::BufRead> ScrubbedLines<'a, R> {
    /// Lines of `inner`, scrubbed of `secrets`.
    pub(crate) fn new(inner: R, secrets: &'a [String]) -> Self {
        ScrubbedLines {
            inner,
            secrets,
            line: Vec::new(),
            at: 0,
        }
    }
}

impl<R: std::io::BufRead> std::io::Read for ScrubbedLines<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.line.len() {
            self.line.clear();
            self.at = 0;
            if self.inner.read_until(b'\n', &mut self.line)? == 0 {
                return Ok(0);
            }
            // A line that is not UTF-8 is no JSON anyway: read lossily, so
            // a key in it is still found.
            let text = String::from_utf8_lossy(&self.line);
            if self.secrets.iter().any(|s| text.contains(s.as_str())) {
                self.line = scrub(&text, self.secrets).into_bytes();
            }
        }
        let n = (self.line.len() - self.at).min(buf.len());
        buf[..n].copy_from_slice(&self.line[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The mark [`crate::parse::snippet`] ends a cut text with.
const CUT: char = '…';

/// The shortest start of a secret that is still hidden where a cut ends
/// a text: shorter starts are too common to tell from ordinary words.
const MIN_CUT_PREFIX: usize = 8;

/// `text` with every secret replaced by `***`, and with any start of a
/// secret ([`MIN_CUT_PREFIX`] characters or more) that a cut (`…`) left at
/// the end of a shortened text: a message built from an already shortened
/// body must not show the part of a key that fell before the cut.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    for s in secrets {
        out = scrub_cut_start(&out, s);
    }
    out
}

/// A server's answer body as a message may show it: every secret replaced
/// in the whole body first, then cut to a one-line excerpt, then any start
/// of a secret left at the cut replaced too (a key that straddles the cut
/// would otherwise keep its first part).
pub(crate) fn excerpt(body: &str, secrets: &[String]) -> String {
    scrub(&crate::parse::snippet(&scrub(body, secrets)), secrets)
}

/// `text` with the longest start of `secret` of at least
/// [`MIN_CUT_PREFIX`] characters that ends right before a cut mark
/// replaced by `***`, at every cut mark.
fn scrub_cut_start(text: &str, secret: &str) -> String {
    let secret: Vec<char> = secret.chars().collect();
    if secret.len() < MIN_CUT_PREFIX || !text.contains(CUT) {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut kept = 0;
    for (at, c) in chars.iter().enumerate() {
        if *c != CUT {
            continue;
        }
        let longest = (MIN_CUT_PREFIX..=secret.len().min(at - kept))
            .rev()
            .find(|&k| chars[at - k..at] == secret[..k]);
        if let Some(k) = longest {
            out.extend(&chars[kept..at - k]);
            out.push_str("***");
            kept = at;
        }
    }
    out.extend(&chars[kept..]);
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
    fn a_key_cut_by_the_excerpt_keeps_none_of_its_start() {
        let key = "sk-proj-".to_string() + &"a1B2c3D4e5".repeat(9);
        assert_eq!(key.len(), 98);
        let s = secrets(&url("http://h/v1"), Some(&key));
        // The key straddles the 120-character cut, wherever it starts.
        // The key starts `lead` + 28 characters in: 84 leaves 8 of it
        // before the cut, 88 leaves 4 (too few to tell from words).
        for lead in [0, 20, 40, 60, 80, 83, 84, 85, 88, 91] {
            let body = format!(
                "{}Incorrect API key provided: {key}. Find your key at the dashboard.",
                "x".repeat(lead)
            );
            // Cut first, then scrubbed: the order messages are built in.
            let late = scrub(&crate::parse::snippet(&body), &s);
            let early = excerpt(&body, &s);
            for shown in [&late, &early] {
                for k in MIN_CUT_PREFIX..=key.len() {
                    assert!(
                        !shown.contains(&key[..k]),
                        "{k} chars of the key in {shown}"
                    );
                }
            }
            if lead <= 84 {
                assert!(early.contains("***"), "{lead}: {early}");
            }
        }
        // Scrubbed before the cut, the text after the key is still shown.
        let body = format!("Incorrect API key provided: {key}. Find it.");
        assert_eq!(
            excerpt(&body, &s),
            "Incorrect API key provided: ***. Find it."
        );
        // Ordinary text ending at a cut is left alone.
        let plain = format!("{}…", "sk-".repeat(10));
        assert_eq!(scrub(&plain, &s), plain);
    }

    #[test]
    fn result_lines_are_scrubbed_even_when_not_utf8() {
        use std::io::Read;
        let s = secrets(&url("http://h/v1"), Some("sk-live-0123456789"));
        let mut raw = b"{\"ok\": 1}\n".to_vec();
        raw.extend_from_slice(b"\xff bad key sk-live-0123456789 \xfe\n");
        let mut out = String::new();
        let mut lossy = Vec::new();
        ScrubbedLines::new(&raw[..], &s)
            .read_to_end(&mut lossy)
            .unwrap();
        out.push_str(&String::from_utf8_lossy(&lossy));
        assert!(!out.contains("sk-live"), "{out}");
        assert!(
            out.starts_with("{\"ok\": 1}\n") && out.contains("bad key ***"),
            "{out}"
        );
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
