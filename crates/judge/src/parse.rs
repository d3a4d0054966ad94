//! Defensive parsing of judge replies: models wrap JSON in code fences or
//! prose, send booleans and numbers as strings, give reasons as lists. What
//! cannot be read as the expected object is an error (and is retried).

use serde_json::Value;

/// Finds the JSON object in a reply: the whole text, the inside of a code
/// fence, or the first balanced `{...}` in surrounding prose.
pub(crate) fn extract_object(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(trimmed) {
        return Ok(v);
    }
    let unfenced = strip_fence(trimmed);
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(unfenced) {
        return Ok(v);
    }
    for (start, end) in balanced_objects(unfenced).into_iter().take(MAX_CANDIDATES) {
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&unfenced[start..end]) {
            return Ok(v);
        }
    }
    // A reply cut off by max_tokens: close the open string and brackets. This
    // only helps when the fields we need were complete before the cut.
    // A cut inside a key or before a value ("{\"a\": true, \"rea") is closed
    // after the last complete member instead.
    if let Some(start) = unfenced.find('{') {
        let mut cut = &unfenced[start..];
        for _ in 0..MAX_CANDIDATES {
            if let Some(repaired) = close_truncated(cut) {
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&repaired) {
                    return Ok(v);
                }
            }
            match cut.rfind(',') {
                Some(comma) => cut = &cut[..comma],
                None => break,
            }
        }
    }
    Err(format!("no JSON object in the reply: {}", snippet(text)))
}

/// Closes what a truncated JSON text left open (a string, arrays, objects).
/// Returns `None` when nothing was open (the text is not a truncation).
fn close_truncated(s: &str) -> Option<String> {
    let scan = scan(s);
    if scan.balanced_end.is_some() || (scan.open.is_empty() && !scan.in_string) {
        return None;
    }
    let mut out = s.trim_end().to_string();
    if scan.escaped {
        out.pop();
    }
    if scan.in_string {
        out.push('"');
    }
    out.extend(scan.open.iter().rev());
    Some(out)
}

fn strip_fence(text: &str) -> &str {
    let Some(start) = text.find("```") else {
        return text;
    };
    let after = &text[start + 3..];
    let body_start = after.find('\n').map(|n| n + 1).unwrap_or(0);
    let body = &after[body_start..];
    match body.find("```") {
        Some(end) => body[..end].trim(),
        None => body.trim(),
    }
}

/// What a left-to-right scan of JSON-ish text found: where the first
/// bracket opened at depth 0 closed again (if it did), and what is still
/// open at the end (closing brackets to add, an unterminated string, a
/// trailing backslash inside it).
struct Scan {
    balanced_end: Option<usize>,
    open: Vec<char>,
    in_string: bool,
    escaped: bool,
}

/// Scans `s`, minding strings and escapes; stops at a closing bracket
/// with nothing open (malformed text).
fn scan(s: &str) -> Scan {
    let mut scan = Scan {
        balanced_end: None,
        open: Vec::new(),
        in_string: false,
        escaped: false,
    };
    for (i, c) in s.char_indices() {
        if scan.in_string {
            match c {
                _ if scan.escaped => scan.escaped = false,
                '\\' => scan.escaped = true,
                '"' => scan.in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => scan.in_string = true,
            '{' => scan.open.push('}'),
            '[' => scan.open.push(']'),
            '}' | ']' => {
                if scan.open.pop().is_none() {
                    return scan;
                }
                if scan.open.is_empty() && scan.balanced_end.is_none() {
                    scan.balanced_end = Some(i + 1);
                    return scan;
                }
            }
            _ => {}
        }
    }
    scan
}

/// How many balanced `{...}` spans of a reply are tried as JSON before
/// giving up: a real reply has its object among the first few, and each try
/// costs a parse, so a hostile reply cannot make extraction slow.
const MAX_CANDIDATES: usize = 64;

/// The balanced `{...}` spans of `s` as byte ranges, outermost first and in
/// order of their opening brace, found in ONE left-to-right pass (minding
/// strings and escapes). Trying each `{` as a start and scanning on from it
/// was quadratic: a 400 KB reply of `{` took minutes per attempt.
fn balanced_objects(s: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut open: Vec<(usize, u8)> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for (i, b) in s.bytes().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            // A quote only opens a string inside a bracket: prose before the
            // object ("He said "yes" {…}") must not hide it.
            b'"' if !open.is_empty() => in_string = true,
            b'{' | b'[' => open.push((i, b)),
            b'}' | b']' => match open.pop() {
                Some((start, o)) if (o == b'{') == (b == b'}') => {
                    if o == b'{' {
                        spans.push((start, i + 1));
                    }
                }
                // A closing bracket that does not match: malformed so far,
                // start afresh.
                _ => open.clear(),
            },
            _ => {}
        }
    }
    // Outermost first: by opening position.
    spans.sort_unstable_by_key(|&(start, _)| start);
    spans
}

/// The start of a reply, for error messages.
pub(crate) fn snippet(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(120)
        .collect();
    if text.chars().count() > 120 {
        format!("{one_line}…")
    } else {
        one_line
    }
}

fn field<'a>(v: &'a Value, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| v.get(*n))
}

fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" => Some(true),
            "false" | "no" => Some(false),
            _ => None,
        },
        Value::Number(n) => match n.as_f64() {
            Some(1.0) => Some(true),
            Some(0.0) => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn as_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.trim().to_string(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn as_integer(v: &Value) -> Option<i64> {
    let x = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    (x.fract() == 0.0 && x.is_finite()).then_some(x as i64)
}

/// A reason as written: `None` where none was asked for (absent or null).
fn reason(v: &Value, names: &[&str]) -> Option<String> {
    field(v, names)
        .filter(|r| !r.is_null())
        .map(|r| as_text(Some(r)))
}

/// A probability a judge answer carries (0..=1), when it carries one.
fn probability(v: &Value, name: &str) -> Option<f32> {
    v.get(name)
        .and_then(Value::as_f64)
        .filter(|p| p.is_finite())
        .map(|p| p.clamp(0.0, 1.0) as f32)
}

/// A rubric's reply reduced to what refscore reads from it: its value
/// under the key the prompt asks for (found under any accepted spelling)
/// and its reason likewise (null when none). Everything else the judge
/// wrote is dropped, so no field of a reply, or of an injection inside the
/// judged output, can pose as a probability or an expectation: those are
/// added by refscore from the token probabilities alone.
pub(crate) fn rubric_answer(
    v: &Value,
    keys: &[&str],
    reason_keys: &[&str],
) -> Result<Value, String> {
    let key = keys[0];
    let value = field(v, keys).ok_or_else(|| format!("reply has no \"{key}\" field"))?;
    let mut out = serde_json::Map::new();
    out.insert(key.to_string(), value.clone());
    out.insert(
        reason_keys[0].to_string(),
        field(v, reason_keys).cloned().unwrap_or(Value::Null),
    );
    Ok(Value::Object(out))
}

/// A verdict answer: the sampled verdict, P(true) where the server gave
/// probabilities, and the reason where one was asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VerdictAnswer {
    pub sampled: bool,
    pub p_true: Option<f32>,
    pub reason: Option<String>,
}

/// `{"<key>": bool, "<reason>": str, "p_true": number}` (the last added by
/// refscore from the token probabilities); `keys` and `reason_keys` list
/// the accepted spellings, the first being the one the prompt asks for.
pub(crate) fn verdict(
    v: &Value,
    keys: &[&str],
    reason_keys: &[&str],
) -> Result<VerdictAnswer, String> {
    let key = keys[0];
    let verdict = field(v, keys).ok_or_else(|| format!("reply has no \"{key}\" field"))?;
    let sampled =
        as_bool(verdict).ok_or_else(|| format!("\"{key}\" is not a boolean: {verdict}"))?;
    Ok(VerdictAnswer {
        sampled,
        p_true: probability(v, "p_true"),
        reason: reason(v, reason_keys),
    })
}

/// A score answer: the sampled score, the expected score where the server
/// gave probabilities, and the reason where one was asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScoreAnswer {
    pub score: u8,
    pub expected: Option<f32>,
    pub reason: Option<String>,
}

/// `{"<key>": min..=max, "<reason>": str, "expected": number}` (the last
/// added by refscore from the token probabilities).
pub(crate) fn score(
    v: &Value,
    keys: &[&str],
    reason_keys: &[&str],
    (min, max): (u8, u8),
) -> Result<ScoreAnswer, String> {
    let key = keys[0];
    let score = field(v, keys).ok_or_else(|| format!("reply has no \"{key}\" field"))?;
    let n = as_integer(score).ok_or_else(|| format!("\"{key}\" is not an integer: {score}"))?;
    if !(i64::from(min)..=i64::from(max)).contains(&n) {
        return Err(format!("\"{key}\" {n} is outside {min}..{max}"));
    }
    let expected = v
        .get("expected")
        .and_then(Value::as_f64)
        .filter(|e| e.is_finite())
        .map(|e| e.clamp(f64::from(min), f64::from(max)) as f32);
    Ok(ScoreAnswer {
        score: n as u8,
        expected,
        reason: reason(v, reason_keys),
    })
}

/// `{"facts": [str]}`.
pub(crate) fn facts(v: &Value) -> Result<Vec<String>, String> {
    let list = field(v, &["facts"])
        .and_then(Value::as_array)
        .ok_or("reply has no \"facts\" list")?;
    Ok(list
        .iter()
        .map(|f| as_text(Some(f)))
        .filter(|f| !f.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_objects_in_fences_and_prose() {
        let plain = r#"{"meaning_match": true, "reason": "same"}"#;
        assert_eq!(extract_object(plain).unwrap()["reason"], "same");
        let fenced = "```json\n{\"meaning_match\": false, \"reason\": \"x\"}\n```";
        assert_eq!(extract_object(fenced).unwrap()["meaning_match"], false);
        let prose = "Sure! Here is my verdict: {\"score\": 7, \"rationale\": \"has a } brace\"} Hope it helps.";
        assert_eq!(extract_object(prose).unwrap()["score"], 7);
        assert!(extract_object("no json here").is_err());
        // Cut off by max_tokens after the verdict: repaired.
        let cut = extract_object("{\"score\": 7, \"rationale\": \"The answer omits the dose and")
            .unwrap();
        assert_eq!(cut["score"], 7);
        let cut = extract_object("{\"output_facts\": [\"a\", \"b").unwrap();
        assert_eq!(cut["output_facts"].as_array().unwrap().len(), 2);
        // Cut off inside the verdict: still an error.
        assert!(verdict_of(&extract_object("{\"meaning_match\": tr").unwrap_or_default()).is_err());
        assert!(extract_object("[1, 2]").is_err());
    }

    #[test]
    fn tries_each_balanced_object_in_order() {
        let v = extract_object("Draft {not json} then {\"score\": 4} and {\"score\": 5}").unwrap();
        assert_eq!(v["score"], 4);
        let v = extract_object("Wrapper { noise {\"score\": 6} }").unwrap();
        assert_eq!(
            v["score"], 6,
            "a nested object is found when the outer is not JSON"
        );
        let v = extract_object("x] {\"score\": 2}").unwrap();
        assert_eq!(
            v["score"], 2,
            "a stray closing bracket does not hide the object"
        );
    }

    #[test]
    fn a_huge_run_of_braces_is_rejected_in_linear_time() {
        // 2 MB of `{`: trying each brace as a start and scanning on from it
        // does ~2·10^12 steps (hours); one pass does 2·10^6.
        let reply = "{".repeat(2 << 20);
        assert!(extract_object(&reply).is_err());
        let reply = format!("{}{}", "{\"a\": [".repeat(100_000), "1");
        assert!(extract_object(&reply).is_err());
        let reply = "{}".repeat(1 << 20);
        assert_eq!(extract_object(&reply).unwrap(), serde_json::json!({}));
    }

    /// Meaning Match's and similarity's spellings.
    fn verdict_of(v: &Value) -> Result<VerdictAnswer, String> {
        verdict(v, &["meaning_match", "match"], &["reason"])
    }

    fn score_of(v: &Value) -> Result<ScoreAnswer, String> {
        score(v, &["score"], &["rationale", "reason"], (0, 10))
    }

    #[test]
    fn a_rubric_answer_keeps_only_its_value_and_reason() {
        let v = json!({"ok": false, "p_true": 0.99, "expected": 10, "why": "x"});
        let a = rubric_answer(&v, &["verdict", "ok"], &["reason", "why"]).unwrap();
        assert_eq!(a, json!({"verdict": false, "reason": "x"}));
        assert!(verdict(&a, &["verdict"], &["reason"])
            .unwrap()
            .p_true
            .is_none());
        let a = rubric_answer(&json!({"score": 5}), &["score"], &["rationale", "reason"]).unwrap();
        assert_eq!(a, json!({"score": 5, "rationale": null}));
        assert!(rubric_answer(&json!({"p_true": 1}), &["verdict"], &["reason"]).is_err());
    }

    #[test]
    fn coerces_loose_types() {
        let mm = verdict_of(&json!({"meaning_match": "true", "reason": ["a", "b"]})).unwrap();
        assert_eq!(
            (mm.sampled, mm.reason, mm.p_true),
            (true, Some("a b".into()), None)
        );
        let mm = verdict_of(&json!({"meaning_match": "False", "p_true": 0.25})).unwrap();
        assert_eq!(
            (mm.sampled, mm.reason, mm.p_true),
            (false, None, Some(0.25))
        );
        assert!(verdict_of(&json!({"meaning_match": "maybe"})).is_err());
        let s = score_of(&json!({"score": "8", "rationale": "ok"})).unwrap();
        assert_eq!(
            (s.score, s.reason, s.expected),
            (8, Some("ok".into()), None)
        );
        let s = score_of(&json!({"score": 10.0, "rationale": null, "expected": 9.5})).unwrap();
        assert_eq!((s.score, s.reason, s.expected), (10, None, Some(9.5)));
        assert!(score_of(&json!({"score": 11})).is_err());
        assert!(score_of(&json!({"score": -1})).is_err());
        assert!(score_of(&json!({"score": 7.5})).is_err());
        assert!(score_of(&json!({"score": "high"})).is_err());
    }
}
