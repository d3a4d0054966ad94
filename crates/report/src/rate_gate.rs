//! `report --gate tpr>=0.9,tnr>=0.9`: a labelled verdict judge held to the
//! TPR and TNR a team can count on. The gate reads the one-sided lower
//! Clopper-Pearson bound of each rate at `--gate-confidence`, not the raw
//! share: a judge right on 19 of 20 label-true rows has a TPR of 95% but a
//! lower 90% bound of 80.9%, and only the bound says what the labels prove.

use refscore_core::Error;
use refscore_stats::band::clopper_pearson;
use refscore_stats::gold::Calibration;
use serde::Serialize;

/// Which rate of a verdict a gate checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rate {
    /// Of the rows labelled true, the share the verdict calls true.
    Tpr,
    /// Of the rows labelled false, the share the verdict calls false.
    Tnr,
}

impl Rate {
    /// The name the flag and the output use.
    pub fn name(self) -> &'static str {
        match self {
            Rate::Tpr => "tpr",
            Rate::Tnr => "tnr",
        }
    }

    /// Rows this rate counts: (rightly called, all of its class).
    fn counts(self, c: &refscore_stats::agreement::Confusion) -> (u64, u64) {
        match self {
            Rate::Tpr => (c.true_positive, c.true_positive + c.false_negative),
            Rate::Tnr => (c.true_negative, c.true_negative + c.false_positive),
        }
    }

    /// The rows of its class, in words.
    fn class(self) -> &'static str {
        match self {
            Rate::Tpr => "label-true",
            Rate::Tnr => "label-false",
        }
    }
}

/// One `--gate` term: `[METRIC.]tpr>=MIN` or `[METRIC.]tnr>=MIN`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateGate {
    /// The labelled verdict it checks; `None`: every labelled verdict.
    pub metric: Option<String>,
    /// The rate it checks.
    pub rate: Rate,
    /// The lowest lower bound that passes, in (0, 1].
    pub min: f64,
    /// The term as given, for messages.
    pub given: String,
}

impl RateGate {
    /// Parses one term; a bad one is a usage error naming it.
    pub fn parse(text: &str) -> Result<RateGate, Error> {
        let given = text.trim().to_string();
        let bad = |why: &str| Error::usage(format!("--gate {given}: {why}"));
        let (left, min) = given.split_once(">=").ok_or_else(|| {
            bad(
                "expected [METRIC.]tpr>=MIN or [METRIC.]tnr>=MIN (quote the term in a shell: '>' \
                     redirects, e.g. --gate 'tpr>=0.9,tnr>=0.9')",
            )
        })?;
        let min: f64 = min
            .trim()
            .parse()
            .map_err(|_| bad("MIN must be a number"))?;
        if !(min > 0.0 && min <= 1.0) {
            return Err(bad("MIN must be a rate in (0, 1]"));
        }
        let (metric, rate) = match left.trim().rsplit_once('.') {
            Some((m, r)) => (Some(m.trim().to_string()), r.trim()),
            None => (None, left.trim()),
        };
        let rate = match rate.to_ascii_lowercase().as_str() {
            "tpr" => Rate::Tpr,
            "tnr" => Rate::Tnr,
            other => {
                return Err(bad(&format!(
                    "'{other}' is not a rate: the gate checks tpr or tnr"
                )))
            }
        };
        if metric.as_deref() == Some("") {
            return Err(bad("empty METRIC before '.'"));
        }
        Ok(RateGate {
            metric,
            rate,
            min,
            given,
        })
    }
}

/// Checks a `--gate-confidence` value: a confidence level in [0.5, 1).
pub fn check_confidence(confidence: f64) -> Result<(), Error> {
    if !(0.5..1.0).contains(&confidence) {
        return Err(Error::usage(format!(
            "--gate-confidence {confidence}: expected a level in [0.5, 1), e.g. 0.9"
        )));
    }
    Ok(())
}

/// The outcome of one gate on one labelled verdict.
#[derive(Debug, Clone, Serialize)]
pub struct RateGateResult {
    /// The labelled verdict.
    pub metric: String,
    /// The rate checked.
    pub rate: Rate,
    /// The lowest lower bound that passes.
    pub min: f64,
    /// The confidence of the bound.
    pub confidence: f64,
    /// Rows of the rate's class (label-true for TPR, label-false for TNR).
    pub labels: u64,
    /// The raw rate; null without rows of its class.
    pub rate_value: Option<f64>,
    /// Its one-sided lower Clopper-Pearson bound; null without rows.
    pub lower_bound: Option<f64>,
    /// True when the bound is below `min` or there is no bound.
    pub failed: bool,
    /// One line saying why.
    pub line: String,
}

/// Applies every gate to the labelled verdicts of a run. A gate naming a
/// metric the run has no labelled verdict for, or a run with no labelled
/// verdict at all, is refused (exit 78, as `--fail-on-regression` naming
/// a metric the result lacks): a gate that checks nothing must not pass.
pub fn check(
    gates: &[RateGate],
    calibration: &[Calibration],
    confidence: f64,
) -> Result<Vec<RateGateResult>, Error> {
    let verdicts: Vec<&Calibration> = calibration.iter().filter(|c| c.verdict.is_some()).collect();
    let names = || {
        let n: Vec<&str> = verdicts.iter().map(|c| c.metric.as_str()).collect();
        if n.is_empty() {
            "none".to_string()
        } else {
            n.join(", ")
        }
    };
    let mut out = Vec::new();
    for g in gates {
        let chosen: Vec<&&Calibration> = verdicts
            .iter()
            .filter(|c| g.metric.as_deref().is_none_or(|m| m == c.metric))
            .collect();
        if chosen.is_empty() {
            let what = g
                .metric
                .as_ref()
                .map_or("any metric".to_string(), |m| format!("'{m}'"));
            return Err(Error::config(format!(
                "--gate {}: the result has no labelled verdict for {what} (labelled verdicts: {}; \
                 label them with score --gold METRIC=COLUMN or report --gold)",
                g.given,
                names()
            )));
        }
        for c in chosen {
            let v = c.verdict.as_ref().expect("filtered on verdicts");
            let (right, labels) = g.rate.counts(&v.confusion);
            let rate_value = (labels > 0).then(|| right as f64 / labels as f64);
            let lower_bound =
                clopper_pearson(right as f64, labels as f64, confidence).map(|(low, _)| low);
            let failed = lower_bound.is_none_or(|low| low < g.min);
            let pct = |x: f64| format!("{:.1}%", x * 100.0);
            let rate = g.rate.name().to_uppercase();
            let line = match (rate_value, lower_bound) {
                (Some(r), Some(low)) => format!(
                    "{}: {rate} {} on {labels} {} rows, lower {}% bound {} {} {}",
                    c.metric,
                    pct(r),
                    g.rate.class(),
                    confidence * 100.0,
                    pct(low),
                    if failed { "<" } else { ">=" },
                    pct(g.min)
                ),
                _ => format!(
                    "{}: {rate} has no {} rows, so no bound: the gate {rate} >= {} fails",
                    c.metric,
                    g.rate.class(),
                    pct(g.min)
                ),
            };
            out.push(RateGateResult {
                metric: c.metric.clone(),
                rate: g.rate,
                min: g.min,
                confidence,
                labels,
                rate_value,
                lower_bound,
                failed,
                line,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_parse_with_and_without_a_metric() {
        let g = RateGate::parse(" meaning_match.tpr >= 0.9 ").unwrap();
        assert_eq!(g.metric.as_deref(), Some("meaning_match"));
        assert_eq!(g.rate, Rate::Tpr);
        assert_eq!(g.min, 0.9);
        let g = RateGate::parse("TNR>=0.85").unwrap();
        assert_eq!((g.metric, g.rate, g.min), (None, Rate::Tnr, 0.85));
    }

    #[test]
    fn bad_terms_are_usage_errors_naming_the_term() {
        for (text, why) in [
            ("tpr>0.9", "expected"),
            ("tpr>=x", "number"),
            ("tpr>=1.5", "(0, 1]"),
            ("tpr>=0", "(0, 1]"),
            ("kappa>=0.5", "not a rate"),
            (".tpr>=0.9", "empty METRIC"),
        ] {
            let e = RateGate::parse(text).unwrap_err();
            assert_eq!(e.class, refscore_core::ErrorClass::Usage, "{text}");
            assert!(e.message.contains(text) && e.message.contains(why), "{e:?}");
        }
        assert!(check_confidence(0.9).is_ok());
        assert!(check_confidence(1.0).is_err() && check_confidence(0.2).is_err());
    }
}
