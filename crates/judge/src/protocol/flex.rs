//! OpenAI's flex processing as a judge mode (`--judge-service-tier flex`,
//! config `judge.service_tier`, Python `judge_service_tier`): every request
//! carries `"service_tier": "flex"` and is billed at Batch API prices while
//! the answer still comes back on the call, more slowly (so the requests'
//! timeout defaults to OpenAI's advised 15 minutes). When flex has no
//! capacity, OpenAI answers 429 "resource unavailable" and charges nothing:
//! such a refusal is retried with backoff, as any 429 is, and counted; with
//! `--judge-flex-fallback N` a request flex refused N times goes again at
//! the standard tier (at the standard price). Only OpenAI's API has the
//! tier, and it is for calls: batches are priced alike already.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use refscore_core::{Error, Given};
use serde_json::{json, Value};

use super::mode::{Mode, ModeContext, ModeKind, ModeOptions, RequestMode};

/// The flex mode's options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FlexOptions {
    /// The OpenAI processing tier of the judge's requests: `flex` sends each with
    /// "service_tier": "flex" (OpenAI's flex processing, on the models that offer it: Batch
    /// API prices, answers on the call but slower, so --judge-timeout defaults to 900); a 429
    /// "resource unavailable" is retried with backoff and counted in the summary. Not with
    /// --judge-api anthropic nor --judge-batch [default: standard]
    #[arg(long, value_name = "flex|standard")]
    judge_service_tier: Option<String>,

    /// With --judge-service-tier flex: send a request at the standard tier (and price) once
    /// flex has refused it N times (429 resource unavailable); N from 1 to --judge-retries
    /// [default: never, flex only]
    #[arg(long, value_name = "N")]
    judge_flex_fallback: Option<u32>,
}

/// The requests' timeout with flex where `--judge-timeout` is not given:
/// OpenAI advises 15 minutes, for answers that wait for capacity.
const FLEX_TIMEOUT_SECS: f64 = 900.0;

impl ModeOptions for FlexOptions {
    fn resolve(&self, run: &ModeContext) -> Result<Option<Mode>, Error> {
        // `&dyn Given` as a `Given` of its own, for the generic checks.
        let given = &run.given;
        let flex = given.parsed(
            self.judge_service_tier.clone(),
            "judge_service_tier",
            |t| match t.trim() {
                "flex" => Ok(true),
                "standard" => Ok(false),
                other => Err(format!("'{other}': expected flex or standard")),
            },
        )?;
        let fallback = given.ranged(
            self.judge_flex_fallback,
            "judge_flex_fallback",
            |n| n >= 1,
            "at least 1",
        )?;
        if flex != Some(true) {
            return match fallback {
                Some(n) => Err(given.bad(
                    "judge_flex_fallback",
                    &n.to_string(),
                    "falls back from flex: it needs --judge-service-tier flex",
                )),
                None => Ok(None),
            };
        }
        let refuse = |why: String| Err(given.bad("judge_service_tier", "flex", &why));
        if run.api.name() != "openai" {
            return refuse(format!(
                "the {} API has no flex tier (flex processing is OpenAI's: --judge-api openai)",
                run.api.name()
            ));
        }
        if let Some(batch) = run.batch {
            return refuse(format!(
                "flex is for calls, and --judge-batch {} runs at batch prices already: choose one",
                batch.name()
            ));
        }
        if let Some(n) = fallback.filter(|&n| n > run.retries) {
            return Err(given.bad(
                "judge_flex_fallback",
                &n.to_string(),
                &format!(
                    "expected at most --judge-retries ({}): the standard tier is tried after N \
                     flex tries, within a request's retries",
                    run.retries
                ),
            ));
        }
        Ok(Some(Mode(Arc::new(Flex { fallback }))))
    }

    fn line(judge: &Value) -> Option<String> {
        let flex = judge.get("flex")?;
        let n = |k: &str| flex[k].as_u64().unwrap_or(0);
        let standard = match n("sent_standard") {
            0 => String::new(),
            s => format!("; {s} sent at the standard tier instead (--judge-flex-fallback)"),
        };
        Some(format!(
            "judge flex processing: {} requests refused for want of capacity (429 resource unavailable), retried{standard}\n",
            n("resource_unavailable")
        ))
    }
}

/// Flex processing, as a run uses it.
struct Flex {
    /// `--judge-flex-fallback`.
    fallback: Option<u32>,
}

impl ModeKind for Flex {
    fn name(&self) -> &'static str {
        "flex"
    }

    fn timeout(&self) -> Option<f64> {
        Some(FLEX_TIMEOUT_SECS)
    }

    fn start(&self) -> Arc<dyn RequestMode> {
        Arc::new(FlexRequests {
            fallback: self.fallback,
            refused: AtomicU64::new(0),
            fell_back: AtomicU64::new(0),
        })
    }
}

/// One judge client's flex requests, and what flex refused.
struct FlexRequests {
    fallback: Option<u32>,
    /// 429 "resource unavailable" replies.
    refused: AtomicU64,
    /// Requests sent again at the standard tier.
    fell_back: AtomicU64,
}

impl RequestMode for FlexRequests {
    fn name(&self) -> &'static str {
        "flex"
    }

    fn shape(&self, body: &mut Value, refused: u32) {
        if self.fallback.is_none_or(|n| refused < n) {
            body["service_tier"] = json!("flex");
        }
    }

    fn refuses(&self, code: u16, text: &str) -> bool {
        // OpenAI's "429 Resource Unavailable"; a rate limit ("Rate limit
        // reached") or a spent quota is another 429.
        code == 429 && text.to_ascii_lowercase().contains("unavailable")
    }

    fn count_refusal(&self, refused: u32, retried: bool) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if retried && Some(refused) == self.fallback {
            self.fell_back.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn summary(&self) -> Value {
        json!({
            "service_tier": "flex",
            "resource_unavailable": self.refused.load(Ordering::Relaxed),
            "sent_standard": self.fell_back.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Api;
    use refscore_core::given::CommandLine;
    use refscore_core::ErrorClass;

    fn resolve(tier: Option<&str>, fallback: Option<u32>, api: &str) -> Result<Option<Mode>, Error> {
        let options = FlexOptions {
            judge_service_tier: tier.map(String::from),
            judge_flex_fallback: fallback,
        };
        options.resolve(&ModeContext {
            api: Api::parse(api).unwrap(),
            batch: None,
            retries: 4,
            given: &CommandLine,
        })
    }

    #[test]
    fn flex_is_openai_s_and_its_fallback_needs_it() {
        let mode = resolve(Some("flex"), Some(2), "openai").unwrap().unwrap();
        assert_eq!((mode.name(), mode.timeout()), ("flex", Some(900.0)));
        assert!(resolve(Some("standard"), None, "openai").unwrap().is_none());
        assert!(resolve(None, None, "anthropic").unwrap().is_none());
        for (tier, fallback, api, says) in [
            (Some("flex"), None, "anthropic", "--judge-service-tier flex: the anthropic API has no flex tier"),
            (Some("priority"), None, "openai", "--judge-service-tier 'priority': expected flex or standard"),
            (None, Some(1), "openai", "--judge-flex-fallback 1: falls back from flex"),
            (Some("flex"), Some(5), "openai", "--judge-flex-fallback 5: expected at most --judge-retries (4)"),
            (Some("flex"), Some(0), "openai", "--judge-flex-fallback 0: expected at least 1"),
        ] {
            let e = resolve(tier, fallback, api).unwrap_err();
            assert_eq!(e.class, ErrorClass::Usage, "{}", e.message);
            assert!(e.message.starts_with(says), "{}", e.message);
            assert!(!e.message.contains('\n'));
        }
    }

    #[test]
    fn the_standard_tier_follows_n_refusals_and_each_is_counted() {
        let run = Flex { fallback: Some(2) }.start();
        let body = |refused| {
            let mut b = json!({"model": "m"});
            run.shape(&mut b, refused);
            b
        };
        assert_eq!(body(0)["service_tier"], "flex");
        assert_eq!(body(1)["service_tier"], "flex");
        assert!(body(2).get("service_tier").is_none());
        let unavailable = r#"{"error": {"message": "Resource unavailable", "type": "resource_unavailable"}}"#;
        assert!(run.refuses(429, unavailable));
        assert!(!run.refuses(429, r#"{"error": {"message": "Rate limit reached"}}"#));
        assert!(!run.refuses(503, unavailable));
        run.count_refusal(1, true);
        run.count_refusal(2, true);
        run.count_refusal(1, true);
        run.count_refusal(2, false);
        assert_eq!(
            run.summary(),
            json!({"service_tier": "flex", "resource_unavailable": 4, "sent_standard": 1})
        );
        let never = Flex { fallback: None }.start();
        let mut b = json!({});
        never.shape(&mut b, 50);
        assert_eq!(b["service_tier"], "flex");
    }
}
