//! The result file's layout, in one place: its fixed column names, the
//! values of `status`, and the keys refscore writes into the Parquet footer.
//! The writer, the job, the report and the Python package read these names
//! from here, so a rename cannot leave one of them behind.

/// The row id column: always the first column of a result.
pub const ID: &str = "id";
/// The row status column ([`status`]): after the metric columns.
pub const STATUS: &str = "status";
/// Why a row is not `ok`, null where it is: right after [`STATUS`].
pub const ERROR: &str = "error";

/// Per-row judge accounting, after the judge metrics' columns: prompt
/// tokens, completion tokens, milliseconds of calls (null where the row
/// asked the judge nothing). The report sums them per run.
pub const JUDGE_USAGE: [&str; 3] = [
    "judge_prompt_tokens",
    "judge_completion_tokens",
    "judge_latency_ms",
];
/// The prompt versions behind a row's judge answers, comma-separated.
pub const JUDGE_TEMPLATES: &str = "judge_templates";

/// The values of the [`STATUS`] column.
pub mod status {
    /// Every requested metric was computed.
    pub const OK: &str = "ok";
    /// Some metrics were computed, some failed (`error` says which and why).
    pub const PARTIAL: &str = "partial";
    /// The row could not be scored at all (e.g. null reference).
    pub const ERROR: &str = "error";
}

/// The values of a judge metric's `<metric>_source` column: what decided
/// the value. Readers of results (the report, `calibrate-band`) tell a
/// value a judge paid for from one decided without a call by these names.
pub mod source {
    /// A rule decided it (an empty output fails, the reference's own answer
    /// passes).
    pub const RULE: &str = "rule";
    /// A `--judge-band` decided it from a score, in results written before
    /// the chain of tiers (now `band:SCORE`).
    pub const BAND: &str = "band";
    /// The judge cache answered it.
    pub const CACHE: &str = "cache";
    /// The judge answered it.
    pub const JUDGE: &str = "judge";
    /// A local NLI model checked the fact ratio's facts (`--fact-check
    /// nli`); no judge was paid for the checks.
    pub const NLI: &str = "nli";
    /// A panel's jury answered it (every juror was asked).
    pub const JURY: &str = "jury";
    /// A panel's judge answered it: `judge:NAME`.
    pub const PANEL_JUDGE_PREFIX: &str = "judge:";

    /// The source a tier of the chain writes: `KIND:SCORE`, its kind's
    /// name and the score it reads (`band:cosine` for `--judge-band
    /// cosine:LO..HI`). Every tier kind writes this shape, so that readers
    /// of results know a tier's value without knowing its kind.
    pub fn tier(kind: &str, score: &str) -> String {
        format!("{kind}:{score}")
    }

    /// Whether a local tier decided the value: `KIND:SCORE` (see [`tier`];
    /// `judge:NAME` is a panel's judge, not a tier), or `band` as results
    /// written before the chain say.
    pub fn is_tier(source: &str) -> bool {
        source == BAND || tier_score(source).is_some()
    }

    /// The score a tier's source names (`cosine` of `band:cosine`); `None`
    /// for a source no tier writes in that shape.
    pub fn tier_score(source: &str) -> Option<&str> {
        match source.split_once(':') {
            Some((kind, score))
                if !kind.is_empty()
                    && !score.is_empty()
                    && !source.starts_with(PANEL_JUDGE_PREFIX) =>
            {
                Some(score)
            }
            _ => None,
        }
    }

    /// Whether a source names a judge that was paid for the value: the
    /// judge, a panel's judge, or a jury.
    pub fn is_judge(source: &str) -> bool {
        source == JUDGE || source == JURY || source.starts_with(PANEL_JUDGE_PREFIX)
    }
}

/// Keys of the result file's footer metadata.
pub mod footer {
    /// The run's fingerprint hash: present when the run finished complete,
    /// so that an unchanged rerun has nothing to do.
    pub const RUN: &str = "refscore.run";
    /// `K/N` of a sharded run's output.
    pub const SHARD: &str = "refscore.shard";
    /// The precision of the embedding products (`fp32`, `bf16`, `int8`).
    pub const PRECISION: &str = "refscore.precision";
    /// `--truncate-dim`: the sentence embedding's width the cosine used,
    /// where it was cut.
    pub const TRUNCATE_DIM: &str = "refscore.truncate_dim";
    /// The pass thresholds the summary used (a JSON object), read back by
    /// `report`.
    pub const THRESHOLDS: &str = "refscore.thresholds";
    /// The defined judge metrics of the run (a JSON object: per name its
    /// version, answer, scale, threshold and columns), read back by `report`.
    pub const JUDGE_METRICS: &str = "refscore.judge_metrics";
    /// The judge's chain of tiers, where a tier carries a guarantee (a JSON
    /// list: per tier its band, source and guarantee), read back by
    /// `report` and `score --gold` to check each guarantee against the
    /// labelled rows.
    pub const TIERS: &str = "refscore.tiers";
    /// A part file's description (part files of a run folder only).
    pub const PART: &str = "refscore.part";
}

#[cfg(test)]
mod tests {
    use super::source;

    /// A tier's source is told from the others by its shape alone, so a
    /// new tier kind needs nothing here; a panel's judge is no tier.
    #[test]
    fn a_tier_source_is_kind_colon_score() {
        assert_eq!(source::tier("band", "cosine"), "band:cosine");
        for (s, tier, score) in [
            ("band:cosine", true, Some("cosine")),
            ("quantile:token_f1", true, Some("token_f1")),
            ("band", true, None),
            ("judge:gpt", false, None),
            ("judge", false, None),
            ("jury", false, None),
            ("rule", false, None),
            ("cache", false, None),
            ("nli", false, None),
            (":cosine", false, None),
            ("band:", false, None),
        ] {
            assert_eq!(source::is_tier(s), tier, "{s}");
            assert_eq!(source::tier_score(s), score, "{s}");
        }
    }
}
