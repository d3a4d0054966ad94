//! The judge's lines of the printed summary, read from the summary's judge
//! section (the table is printed from the summary, after the run or from
//! merged shards): what was judged and what it cost, what the tiers
//! decided, the fact ratio's local work, and each judge mode's line.

use serde_json::Value;

/// The judge's lines of the summary table, each ending in a newline.
pub fn summary_lines(j: &Value) -> String {
    let mut out = String::new();
    // A wholly local fact ratio asked no judge: no judge line.
    if j["judge_asked"] != false {
        out.push_str(&judge_line(j));
    }
    for line in crate::protocol::mode_lines(j) {
        out.push_str(&line);
    }
    out.push_str(&tiers_line(j));
    out.push_str(&local_facts_line(j));
    out
}
/// What each tier of the chain decided (nothing without `--judge-band`):
/// values decided, their share of the rows that asked for a judge metric,
/// true and false, and the judge calls they saved.
fn tiers_line(j: &serde_json::Value) -> String {
    let Some(tiers) = j["tiers"].as_array().filter(|t| !t.is_empty()) else {
        return String::new();
    };
    let asked = j["rows_requested"].as_u64().unwrap_or(0);
    let mut saved = 0;
    let parts: Vec<String> = tiers
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let decided = t["decided"].as_u64().unwrap_or(0);
            let yes = t["decided_true"].as_u64().unwrap_or(0);
            saved += decided;
            let share = if asked > 0 {
                format!(
                    "{:.1}% of {asked} rows asked",
                    decided as f64 * 100.0 / asked as f64
                )
            } else {
                "no rows asked".into()
            };
            // A band fitted at a confidence says what it promises.
            let g = &t["guarantee"];
            let promise = match (g["max_error"].as_f64(), g["confidence"].as_f64()) {
                (Some(e), Some(c)) => format!(
                    " [guaranteed error at most {:.1}% at {}% confidence, {} {}]",
                    e * 100.0,
                    (c * 1000.0).round() / 10.0,
                    g["sides"].as_str().unwrap_or("?"),
                    if g["sides"] == "both" {
                        "sides"
                    } else {
                        "side"
                    }
                ),
                _ => String::new(),
            };
            format!(
                "{}. {}{promise} decided {decided} ({share}; {yes} true, {} false)",
                k + 1,
                t["tier"].as_str().unwrap_or("?"),
                decided - yes
            )
        })
        .collect();
    format!("tiers: {}; {saved} judge calls saved\n", parts.join(", "))
}

/// What the fact ratio did on this machine (nothing without `--facts
/// sentences` or `--fact-check nli`): the extractions and checks the judge
/// was not asked.
fn local_facts_line(j: &serde_json::Value) -> String {
    let n = |k: &str| j[k].as_u64().unwrap_or(0);
    let (split, checked) = (n("facts_from_sentences"), n("fact_checks_nli"));
    if split + checked == 0 {
        return String::new();
    }
    let model = match (
        j["fact_check"]["model"].as_str(),
        j["fact_check"]["recipe"].as_str(),
    ) {
        (Some(m), Some(r)) => format!(" ({m}, recipe {r})"),
        (Some(m), None) => format!(" ({m})"),
        _ => String::new(),
    };
    let cut = match n("fact_checks_nli_truncated") {
        0 => String::new(),
        c => format!(", {c} of them cut at its token limit"),
    };
    format!(
        "fact ratio on this machine: {split} answers split into sentences, {checked} facts checked by the NLI model{model}{cut}; {} judge calls saved\n",
        split + checked
    )
}

/// One line of judge accounting: what was judged, what it cost, how much of
/// the prompt the server's cache covered, and when reasons were asked.
fn judge_line(j: &serde_json::Value) -> String {
    let n = |k: &str| j[k].as_u64().unwrap_or(0);
    let prompt = n("prompt_tokens");
    let cached = n("prompt_tokens_cached");
    let cache = if cached > 0 && prompt > 0 {
        format!(
            " ({:.0}% from the prompt cache)",
            cached as f64 * 100.0 / prompt as f64
        )
    } else {
        String::new()
    };
    format!(
        "judge: {} rows judged, {} calls, {} prompt tokens{cache}, {} completion tokens, {:.2} s per judged row; reasons: {} ({} asked)\n",
        n("rows_judged"),
        n("calls"),
        prompt,
        n("completion_tokens"),
        j["seconds_per_judged_row"].as_f64().unwrap_or(0.0),
        j["reasons"].as_str().unwrap_or("-"),
        n("reasons_asked"),
    )
}
