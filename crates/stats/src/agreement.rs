//! How well a metric agrees with human labels on the labelled rows: for a
//! verdict, agreement, Cohen's kappa and the confusion matrix; for a
//! probability or a stand-in score, ROC AUC, the Brier score, the expected
//! calibration error and the threshold that would have agreed best; for a
//! score, rank correlations, mean absolute error and quadratic-weighted
//! kappa. Each matches the textbook definition the named library uses
//! (scikit-learn, SciPy, statsmodels), which the tests check it against.

use serde::{Deserialize, Serialize};

use crate::ppi::{Z95, ZERO_SPREAD};

/// A verdict against the human label, rows = label, columns = verdict, as
/// scikit-learn's `confusion_matrix(gold, verdict)` lays it out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confusion {
    /// Label false, verdict false.
    pub true_negative: u64,
    /// Label false, verdict true.
    pub false_positive: u64,
    /// Label true, verdict false.
    pub false_negative: u64,
    /// Label true, verdict true.
    pub true_positive: u64,
}

impl Confusion {
    /// Counts (label, verdict) pairs.
    pub fn of(pairs: impl IntoIterator<Item = (bool, bool)>) -> Confusion {
        let mut c = Confusion::default();
        for (gold, verdict) in pairs {
            match (gold, verdict) {
                (false, false) => c.true_negative += 1,
                (false, true) => c.false_positive += 1,
                (true, false) => c.false_negative += 1,
                (true, true) => c.true_positive += 1,
            }
        }
        c
    }

    /// Rows counted.
    pub fn n(&self) -> u64 {
        self.true_negative + self.false_positive + self.false_negative + self.true_positive
    }
}

/// Agreement of a verdict with the labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictAgreement {
    /// Labelled rows with a verdict.
    pub n: u64,
    /// Share of rows where verdict and label agree.
    pub agreement: f64,
    /// Cohen's kappa: agreement beyond chance (null where chance explains
    /// everything, e.g. one class only).
    pub kappa: Option<f64>,
    /// 95% interval of kappa (asymptotic variance of Fleiss, Cohen and
    /// Everitt 1969, as statsmodels' `cohens_kappa` gives it), clipped to
    /// kappa's range [-1, 1]; null where [`kappa_no_interval`] says why.
    ///
    /// [`kappa_no_interval`]: VerdictAgreement::kappa_no_interval
    pub kappa_low: Option<f64>,
    /// Upper end of kappa's 95% interval.
    pub kappa_high: Option<f64>,
    /// Why kappa has no interval: the labels or the verdicts have one class,
    /// or the variance estimate is zero (perfect agreement). There the
    /// asymptotic interval collapses to a point, which would read as
    /// certainty that a few labels cannot give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kappa_no_interval: Option<String>,
    /// The confusion matrix.
    pub confusion: Confusion,
    /// Share of label-true rows the verdict calls true (recall).
    pub sensitivity: Option<f64>,
    /// Share of label-false rows the verdict calls false.
    pub specificity: Option<f64>,
    /// The one-sided lower Clopper-Pearson bound of `sensitivity` (the
    /// judge's TPR) at [`RATE_CONFIDENCE`]: what a team can count on, where
    /// the raw share flatters a judge measured on few labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitivity_low: Option<f64>,
    /// The same bound of `specificity` (the judge's TNR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specificity_low: Option<f64>,
    /// The confidence of those two bounds (`score --gold-confidence`,
    /// [`RATE_CONFIDENCE`] unless given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rates_confidence: Option<f64>,
}

/// The default confidence of the TPR and TNR lower bounds
/// (`score --gold-confidence` sets another): 1 − δ = 0.9, as
/// calibrated-judge toolkits report them.
pub const RATE_CONFIDENCE: f64 = 0.9;

/// Labels per rate below which its bound is too loose to gate a judge on
/// (calibrated-judge toolkits ask for at least 150 label-true and 150
/// label-false rows).
pub const MIN_RATE_LABELS: u64 = 150;

/// Agreement, kappa and the confusion matrix of verdicts against labels;
/// `None` without rows. TPR and TNR are bounded at [`RATE_CONFIDENCE`].
pub fn verdict_agreement(confusion: Confusion) -> Option<VerdictAgreement> {
    verdict_agreement_at(confusion, RATE_CONFIDENCE)
}

/// [`verdict_agreement`] with the TPR and TNR lower bounds at
/// `rates_confidence`.
pub fn verdict_agreement_at(
    confusion: Confusion,
    rates_confidence: f64,
) -> Option<VerdictAgreement> {
    let n = confusion.n();
    if n == 0 {
        return None;
    }
    let c = confusion;
    let t = [
        [c.true_negative as f64, c.false_positive as f64],
        [c.false_negative as f64, c.true_positive as f64],
    ];
    let nf = n as f64;
    let p = t.map(|r| r.map(|v| v / nf));
    let row = [p[0][0] + p[0][1], p[1][0] + p[1][1]];
    let col = [p[0][0] + p[1][0], p[0][1] + p[1][1]];
    let observed = p[0][0] + p[1][1];
    let chance = row[0] * col[0] + row[1] * col[1];
    let (mut kappa, mut low, mut high, mut no_interval) = (None, None, None, None);
    let one_class_of = |what: &str, falses: u64, trues: u64| {
        (falses == 0 || trues == 0).then(|| {
            let class = if trues == 0 { "false" } else { "true" };
            format!("the {what} have one class (all {class})")
        })
    };
    let one_class = one_class_of(
        "labels",
        c.true_negative + c.false_positive,
        c.false_negative + c.true_positive,
    )
    .or_else(|| {
        one_class_of(
            "verdicts",
            c.true_negative + c.false_negative,
            c.false_positive + c.true_positive,
        )
    });
    if chance < 1.0 {
        let k = (observed - chance) / (1.0 - chance);
        let mut a = 0.0;
        let mut b = 0.0;
        for i in 0..2 {
            a += p[i][i] * (1.0 - (row[i] + col[i]) * (1.0 - k)).powi(2);
            for j in 0..2 {
                if i != j {
                    b += p[i][j] * (col[i] + row[j]).powi(2);
                }
            }
        }
        let c_term = (k - chance * (1.0 - k)).powi(2);
        // A difference of terms of order one: below ZERO_SPREAD it is
        // rounding, and the variance is zero.
        let spread = a + (1.0 - k).powi(2) * b - c_term;
        kappa = Some(k);
        if let Some(why) = &one_class {
            no_interval = Some(why.clone());
        } else if spread < ZERO_SPREAD {
            no_interval = Some(if c.false_positive + c.false_negative == 0 {
                "verdicts and labels agree on every row, so the variance estimate is zero".into()
            } else {
                "the variance estimate is zero".into()
            });
        } else {
            let se = (spread / (1.0 - chance).powi(2) / nf).sqrt();
            low = Some((k - Z95 * se).max(-1.0));
            high = Some((k + Z95 * se).min(1.0));
        }
    } else {
        no_interval = one_class;
    }
    let ratio = |a: u64, b: u64| (a + b > 0).then(|| a as f64 / (a + b) as f64);
    let lower_bound = |a: u64, b: u64| {
        crate::band::clopper_pearson(a as f64, (a + b) as f64, rates_confidence).map(|i| i.0)
    };
    Some(VerdictAgreement {
        n,
        agreement: observed,
        kappa,
        kappa_low: low,
        kappa_high: high,
        kappa_no_interval: no_interval,
        confusion: c,
        sensitivity: ratio(c.true_positive, c.false_negative),
        specificity: ratio(c.true_negative, c.false_positive),
        sensitivity_low: lower_bound(c.true_positive, c.false_negative),
        specificity_low: lower_bound(c.true_negative, c.false_positive),
        rates_confidence: Some(rates_confidence),
    })
}

/// A cut-off on a score, read as "verdict true where score ≥ value".
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// The cut-off: half-way between the two neighbouring scores it separates.
    pub value: f64,
    /// Share of labelled rows the cut-off agrees with.
    pub agreement: f64,
}

/// One bin of a reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    /// Lower edge of the bin (its width is a tenth).
    pub from: f64,
    /// Rows whose probability falls in the bin.
    pub count: u64,
    /// Their mean probability.
    pub mean_probability: f64,
    /// The share of them the label calls true.
    pub share_true: f64,
}

/// How well a probability (or any score read as one) tells label-true rows
/// from label-false ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreSeparation {
    /// Labelled rows with a score.
    pub n: u64,
    /// ROC AUC: the chance a random label-true row scores above a random
    /// label-false one (ties count a half). Null with one class only.
    pub auc: Option<f64>,
    /// The cut-off that would have agreed with the labels best (lowest of
    /// equals).
    pub best_threshold: Option<Threshold>,
}

/// Calibration of a probability: is P(true) = 0.8 right 80% of the time?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbabilityCalibration {
    /// Mean squared difference between probability and label.
    pub brier: f64,
    /// Expected calibration error over ten equal-width bins: the rows'
    /// share-weighted gap between mean probability and share true.
    pub ece: f64,
    /// The bins the ECE is computed over (empty bins left out).
    pub reliability: Vec<ReliabilityBin>,
}

/// Average ranks (ties share the mean of their positions), 1-based.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

/// ROC AUC, the threshold agreeing best, from scores and labels.
pub fn score_separation(scores: &[f64], gold: &[bool]) -> Option<ScoreSeparation> {
    let n = scores.len();
    if n == 0 {
        return None;
    }
    let positives = gold.iter().filter(|g| **g).count();
    let negatives = n - positives;
    let auc = (positives > 0 && negatives > 0).then(|| {
        let r = ranks(scores);
        let rank_sum: f64 = r
            .iter()
            .zip(gold)
            .filter(|(_, g)| **g)
            .map(|(r, _)| r)
            .sum();
        let p = positives as f64;
        (rank_sum - p * (p + 1.0) / 2.0) / (p * negatives as f64)
    });
    Some(ScoreSeparation {
        n: n as u64,
        auc,
        best_threshold: best_threshold(scores, gold),
    })
}

/// The cut-off `t` maximising agreement of `score ≥ t` with the labels.
fn best_threshold(scores: &[f64], gold: &[bool]) -> Option<Threshold> {
    let n = scores.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Everything true at first; each group of equal scores, passed, turns false.
    let mut correct = gold.iter().filter(|g| **g).count() as i64;
    let lowest = *scores.get(order.first().copied()?)?;
    let (mut best, mut best_at) = (correct, lowest);
    let mut i = 0;
    while i < n {
        let v = scores[order[i]];
        let mut j = i;
        while j < n && scores[order[j]] == v {
            correct += if gold[order[j]] { -1 } else { 1 };
            j += 1;
        }
        if correct > best {
            best = correct;
            best_at = match order.get(j) {
                Some(&next) => (v + scores[next]) / 2.0,
                None => v.next_up(),
            };
        }
        i = j;
    }
    Some(Threshold {
        value: best_at,
        agreement: best as f64 / n as f64,
    })
}

/// Brier score, ECE and the reliability bins of probabilities against
/// labels. Bins are scikit-learn's `calibration_curve(strategy="uniform")`
/// bins: edges at k/10, a probability on an edge in the lower bin.
pub fn probability_calibration(probs: &[f64], gold: &[bool]) -> Option<ProbabilityCalibration> {
    let n = probs.len();
    if n == 0 {
        return None;
    }
    let y = |g: bool| if g { 1.0 } else { 0.0 };
    let brier = probs
        .iter()
        .zip(gold)
        .map(|(p, g)| (p - y(*g)).powi(2))
        .sum::<f64>()
        / n as f64;
    let mut bins = [(0u64, 0.0f64, 0.0f64); 10];
    for (p, g) in probs.iter().zip(gold) {
        let bin = (1..10).filter(|k| (*k as f64) * 0.1 < *p).count();
        bins[bin].0 += 1;
        bins[bin].1 += p;
        bins[bin].2 += y(*g);
    }
    let mut ece = 0.0;
    let mut reliability = Vec::new();
    for (k, (count, sum_p, sum_y)) in bins.into_iter().enumerate() {
        if count == 0 {
            continue;
        }
        let (mp, my) = (sum_p / count as f64, sum_y / count as f64);
        ece += count as f64 / n as f64 * (mp - my).abs();
        reliability.push(ReliabilityBin {
            from: k as f64 * 0.1,
            count,
            mean_probability: mp,
            share_true: my,
        });
    }
    Some(ProbabilityCalibration {
        brier,
        ece,
        reliability,
    })
}

/// Agreement of a score with labelled scores on the same scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreAgreement {
    /// Labelled rows with a score.
    pub n: u64,
    /// Spearman's rank correlation (SciPy's `spearmanr`); null where either
    /// side is constant.
    pub spearman: Option<f64>,
    /// Kendall's tau-b (SciPy's `kendalltau`); null where either side is
    /// constant.
    pub kendall: Option<f64>,
    /// Mean absolute difference.
    pub mae: f64,
    /// Quadratic-weighted kappa over the eleven steps 0, 0.1, …, 1 of the
    /// scale (both sides rounded to the nearest step): scikit-learn's
    /// `cohen_kappa_score(..., labels=0..=10, weights="quadratic")`.
    pub qwk: Option<f64>,
}

fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt())
}

/// Kendall's tau-b by counting every pair: labelled slices are small
/// (hundreds to a few thousand rows), where this takes milliseconds.
fn kendall_tau_b(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len();
    let (mut concordant_minus_discordant, mut ties_a, mut ties_b) = (0i64, 0u64, 0u64);
    for i in 0..n {
        for j in i + 1..n {
            let da = a[i].total_cmp(&a[j]) as i64;
            let db = b[i].total_cmp(&b[j]) as i64;
            concordant_minus_discordant += da * db;
            ties_a += (da == 0) as u64;
            ties_b += (db == 0) as u64;
        }
    }
    let pairs = (n * n.saturating_sub(1) / 2) as u64;
    let denominator = ((pairs - ties_a) as f64 * (pairs - ties_b) as f64).sqrt();
    (denominator > 0.0).then(|| concordant_minus_discordant as f64 / denominator)
}

fn quadratic_weighted_kappa(a: &[f64], b: &[f64]) -> Option<f64> {
    const STEPS: usize = 11;
    let step = |v: f64| ((v * 10.0).round().clamp(0.0, 10.0)) as usize;
    let mut observed = [[0.0f64; STEPS]; STEPS];
    for (x, y) in a.iter().zip(b) {
        observed[step(*x)][step(*y)] += 1.0;
    }
    let n = a.len() as f64;
    let rows: Vec<f64> = observed.iter().map(|r| r.iter().sum()).collect();
    let cols: Vec<f64> = (0..STEPS)
        .map(|j| observed.iter().map(|r| r[j]).sum())
        .collect();
    let (mut seen, mut expected) = (0.0, 0.0);
    for i in 0..STEPS {
        for j in 0..STEPS {
            let w = ((i as f64) - (j as f64)).powi(2);
            seen += w * observed[i][j];
            expected += w * rows[i] * cols[j] / n;
        }
    }
    (expected > 0.0).then(|| 1.0 - seen / expected)
}

/// Rank correlations, error and weighted kappa of `scores` against `gold`.
pub fn score_agreement(scores: &[f64], gold: &[f64]) -> Option<ScoreAgreement> {
    let n = scores.len();
    if n == 0 {
        return None;
    }
    Some(ScoreAgreement {
        n: n as u64,
        spearman: pearson(&ranks(scores), &ranks(gold)),
        kendall: kendall_tau_b(scores, gold),
        mae: scores
            .iter()
            .zip(gold)
            .map(|(s, g)| (s - g).abs())
            .sum::<f64>()
            / n as f64,
        qwk: quadratic_weighted_kappa(scores, gold),
    })
}

/// Fleiss' kappa of a fixed number of raters giving binary verdicts,
/// gathered row by row: agreement among several judges beyond chance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FleissTally {
    raters: u64,
    rows: u64,
    /// Σ over rows of n_true² + n_false².
    squares: u64,
    /// Σ over rows of n_true.
    trues: u64,
}

impl FleissTally {
    /// An empty tally for `raters` raters per row.
    pub fn new(raters: u64) -> FleissTally {
        FleissTally {
            raters,
            rows: 0,
            squares: 0,
            trues: 0,
        }
    }

    /// Counts one row where `trues` of the raters said true.
    pub fn add(&mut self, trues: u64) {
        let falses = self.raters - trues;
        self.rows += 1;
        self.squares += trues * trues + falses * falses;
        self.trues += trues;
    }

    /// Rows counted.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Fleiss' kappa (statsmodels' `fleiss_kappa(table, method="fleiss")`);
    /// null without rows, with fewer than two raters, or where chance
    /// explains everything.
    pub fn kappa(&self) -> Option<f64> {
        let (k, n) = (self.raters as f64, self.rows as f64);
        if self.rows == 0 || self.raters < 2 {
            return None;
        }
        let observed = (self.squares as f64 - n * k) / (n * k * (k - 1.0));
        let p = self.trues as f64 / (n * k);
        let chance = p * p + (1.0 - p) * (1.0 - p);
        (chance < 1.0).then(|| (observed - chance) / (1.0 - chance))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kappa_of_a_textbook_table() {
        // 20/5/10/15 (rows label, columns verdict): po = 0.7, pe = 0.5.
        let c = Confusion {
            true_negative: 20,
            false_positive: 5,
            false_negative: 10,
            true_positive: 15,
        };
        let a = verdict_agreement(c).unwrap();
        assert!((a.agreement - 0.7).abs() < 1e-12);
        assert!((a.kappa.unwrap() - 0.4).abs() < 1e-12);
        assert!((a.sensitivity.unwrap() - 0.6).abs() < 1e-12);
        assert!((a.specificity.unwrap() - 0.8).abs() < 1e-12);
        // statsmodels' cohens_kappa([[20, 5], [10, 15]]).kappa_low / kappa_upp.
        assert!((a.kappa_low.unwrap() - 0.151092290476661).abs() < 1e-9);
        assert!((a.kappa_high.unwrap() - 0.6489077095233389).abs() < 1e-9);
        // The rates' one-sided 90% lower bounds: statsmodels 0.15.0
        // proportion_confint(15, 25, alpha=0.2, method='beta')[0] and the
        // same of 20 in 25.
        assert!((a.sensitivity_low.unwrap() - 0.45228266814263246).abs() < 1e-9);
        assert!((a.specificity_low.unwrap() - 0.6603411322747451).abs() < 1e-9);
    }

    #[test]
    fn one_class_only_has_no_kappa_or_auc() {
        let c = Confusion::of([(true, true), (true, true)]);
        assert_eq!(verdict_agreement(c).unwrap().kappa, None);
        let s = score_separation(&[0.2, 0.9], &[true, true]).unwrap();
        assert_eq!(s.auc, None);
    }

    /// The counts of a 2×2 table laid out as statsmodels' `cohens_kappa`
    /// takes it: `[[tn, fp], [fn, tp]]` (rows label, columns verdict).
    fn table(t: [[u64; 2]; 2]) -> VerdictAgreement {
        verdict_agreement(Confusion {
            true_negative: t[0][0],
            false_positive: t[0][1],
            false_negative: t[1][0],
            true_positive: t[1][1],
        })
        .unwrap()
    }

    #[test]
    fn one_class_labels_give_kappa_without_an_interval() {
        // 60 labels all true, the judge saying true on 33:
        // scikit-learn 1.9.1 cohen_kappa_score = 0.0; statsmodels 0.15.0
        // cohens_kappa([[0, 0], [27, 33]]) has var_kappa 4.6e-18 (rounding
        // of zero) and the collapsed interval [-4.2e-09, 4.2e-09].
        let a = table([[0, 0], [27, 33]]);
        assert_eq!(a.kappa, Some(0.0));
        assert_eq!((a.kappa_low, a.kappa_high), (None, None));
        assert_eq!(
            a.kappa_no_interval.as_deref(),
            Some("the labels have one class (all true)")
        );
        let json = serde_json::to_value(&a).unwrap();
        assert!(json["kappa_low"].is_null() && json["kappa_high"].is_null());
        // Labels and verdicts all true: no kappa at all (scikit-learn: nan).
        let a = table([[0, 0], [0, 60]]);
        assert_eq!((a.kappa, a.kappa_low), (None, None));
        assert_eq!(
            a.kappa_no_interval.as_deref(),
            Some("the labels have one class (all true)")
        );
    }

    #[test]
    fn one_class_verdicts_give_kappa_without_an_interval() {
        // scikit-learn 1.9.1 cohen_kappa_score = 0.0; statsmodels 0.15.0
        // cohens_kappa([[0, 20], [0, 40]]) has var_kappa -1.7e-17 and a NaN
        // interval.
        let a = table([[0, 20], [0, 40]]);
        assert_eq!(a.kappa, Some(0.0));
        assert_eq!((a.kappa_low, a.kappa_high), (None, None));
        assert_eq!(
            a.kappa_no_interval.as_deref(),
            Some("the verdicts have one class (all true)")
        );
    }

    #[test]
    fn perfect_agreement_gives_kappa_without_an_interval() {
        // statsmodels 0.15.0 cohens_kappa([[15, 0], [0, 15]]): kappa 1.0,
        // var_kappa 0.0, interval [1.0, 1.0]; scikit-learn 1.9.1: 1.0.
        let a = table([[15, 0], [0, 15]]);
        assert_eq!(a.kappa, Some(1.0));
        assert_eq!((a.kappa_low, a.kappa_high), (None, None));
        assert!(
            a.kappa_no_interval
                .as_deref()
                .is_some_and(|why| why.contains("agree on every row")),
            "{a:?}"
        );
    }

    #[test]
    fn kappas_interval_is_clipped_to_its_range() {
        // statsmodels 0.15.0 cohens_kappa([[14, 1], [0, 15]]): kappa
        // 0.9333333333333333, kappa_low 0.8051510647028324, kappa_upp
        // 1.0615156019638343 (past kappa's maximum of 1).
        let a = table([[14, 1], [0, 15]]);
        assert!((a.kappa.unwrap() - 0.9333333333333333).abs() < 1e-12);
        assert!((a.kappa_low.unwrap() - 0.8051510647028324).abs() < 1e-9);
        assert_eq!(a.kappa_high, Some(1.0));
        assert_eq!(a.kappa_no_interval, None);
        // statsmodels 0.15.0 cohens_kappa([[0, 10], [12, 1]]): kappa
        // -0.9022556390977443, kappa_low -1.1010246265233812, kappa_upp
        // -0.7034866516721074 (scikit-learn 1.9.1: -0.9022556390977443).
        let a = table([[0, 10], [12, 1]]);
        assert!((a.kappa.unwrap() + 0.9022556390977443).abs() < 1e-12);
        assert_eq!(a.kappa_low, Some(-1.0));
        assert!((a.kappa_high.unwrap() + 0.7034866516721074).abs() < 1e-9);
    }

    #[test]
    fn best_threshold_separates_perfectly_when_it_can() {
        let s = score_separation(&[0.1, 0.4, 0.5, 0.9], &[false, false, true, true]).unwrap();
        assert_eq!(s.auc, Some(1.0));
        let t = s.best_threshold.unwrap();
        assert!((t.value - 0.45).abs() < 1e-12 && t.agreement == 1.0);
    }

    #[test]
    fn fleiss_kappa_of_three_raters() {
        // statsmodels.stats.inter_rater.fleiss_kappa([[3,0],[2,1],[0,3],[1,2],[3,0]])
        // = 0.4444444444444443 (rows: true count, false count).
        let mut f = FleissTally::new(3);
        for t in [3, 2, 0, 1, 3] {
            f.add(t);
        }
        assert!(
            (f.kappa().unwrap() - 0.4444444444444443).abs() < 1e-12,
            "{:?}",
            f.kappa()
        );
    }

    #[test]
    fn tau_b_with_ties() {
        // scipy.stats.kendalltau([1,2,2,3],[1,3,2,3]).statistic = 0.8 (tau-b).
        let t = kendall_tau_b(&[1.0, 2.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 3.0]).unwrap();
        assert!((t - 0.8).abs() < 1e-12, "{t}");
    }
}
