//! `calibrate-band --confidence`'s promise, checked by simulation: over many
//! labelled samples from one planted distribution, a side fitted at
//! confidence C has a true error above the asked E in at most δ = 1 − C of
//! them, while today's point-estimate fit is above E far more often.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use refscore_stats::band::{fit_band, fit_band_at, BandFit};

/// The planted distribution: a score uniform on [0, 1] whose label is true
/// with probability 3x² − 2x³ (a smooth step: near 0 about 3x², near 1
/// about 1 − 3(1 − x)²). A side below LO is then wrong (a true label)
/// LO² − LO³/2 of the time, a side above HI (1 − HI)² − (1 − HI)³/2: the
/// error E = 5% is reached at LO ≈ 0.23 and HI ≈ 0.77, about 230 of 1,000
/// labelled rows on each side, nearly error-free at the extremes.
fn draw(rng: &mut ChaCha8Rng, n: usize) -> Vec<(f64, bool)> {
    (0..n)
        .map(|_| {
            let x: f64 = rng.random();
            (x, rng.random::<f64>() < x * x * (3.0 - 2.0 * x))
        })
        .collect()
}

/// A large fresh sample from the same distribution, sorted, with prefix
/// counts of true labels: the true error of any cut, measured.
struct Fresh {
    values: Vec<f32>,
    trues_before: Vec<u64>,
}

impl Fresh {
    fn new(n: usize) -> Fresh {
        let mut rows = draw(&mut ChaCha8Rng::seed_from_u64(u64::MAX), n);
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut trues_before = vec![0];
        for r in &rows {
            trues_before.push(trues_before.last().unwrap() + r.1 as u64);
        }
        // Compared as the run compares: f32 scores with an f32 band.
        let values = rows.iter().map(|r| r.0 as f32).collect();
        Fresh {
            values,
            trues_before,
        }
    }

    /// The error of the rows above `hi` (labelled false) and of those below
    /// `lo` (labelled true); None for a side that decides nothing.
    fn errors(&self, b: &BandFit) -> (Option<f64>, Option<f64>) {
        let n = self.values.len();
        let below = self.values.partition_point(|v| *v < b.lo as f32);
        let above = self.values.partition_point(|v| *v <= b.hi as f32);
        let t = &self.trues_before;
        let below_error = (below > 0).then(|| t[below] as f64 / below as f64);
        let above_error = (above < n)
            .then(|| ((n - above) as f64 - (t[n] - t[above]) as f64) / (n - above) as f64);
        (below_error, above_error)
    }
}

const SEEDS: u64 = 200;
const LABELS: usize = 1000;
const MAX_ERROR: f64 = 0.05;
const CONFIDENCE: f64 = 0.9;
/// Binomial slack for 200 seeds: were each seed's chance of a true error
/// above E exactly δ = 0.1, the count of such seeds would be Binomial(200,
/// 0.1), at most 34 with probability 0.999 (scipy.stats.binom.ppf(0.999,
/// 200, 0.1) = 34.0). A count above that says the chance exceeds δ.
const MOST_SEEDS_ABOVE: usize = 34;

/// Per side (below, above): seeds whose side's true error exceeds E, and
/// seeds where the side decides something.
fn over_seeds(fit: impl Fn(&[(f64, bool)]) -> BandFit, fresh: &Fresh) -> ([usize; 2], [usize; 2]) {
    let (mut over, mut deciding) = ([0; 2], [0; 2]);
    for seed in 0..SEEDS {
        let band = fit(&draw(&mut ChaCha8Rng::seed_from_u64(seed), LABELS));
        let (below, above) = fresh.errors(&band);
        for (k, e) in [below, above].into_iter().enumerate() {
            if let Some(e) = e {
                deciding[k] += 1;
                over[k] += (e > MAX_ERROR) as usize;
            }
        }
    }
    (over, deciding)
}

#[test]
fn a_confident_band_exceeds_the_error_in_at_most_delta_of_the_seeds() {
    let fresh = Fresh::new(2_000_000);
    // The fresh sample measures the planted error: below 0.2 (and above
    // 0.8), 0.2² − 0.2³/2 = 3.6%.
    let probe = BandFit {
        lo: 0.2,
        hi: 0.8,
        ..fit_band(&[(0.0, false), (1.0, true)], MAX_ERROR).unwrap()
    };
    let (below, above) = fresh.errors(&probe);
    assert!((below.unwrap() - 0.036).abs() < 0.001, "{below:?}");
    assert!((above.unwrap() - 0.036).abs() < 0.001, "{above:?}");

    let (over, deciding) = over_seeds(
        |pairs| fit_band_at(pairs, MAX_ERROR, Some(CONFIDENCE)).unwrap(),
        &fresh,
    );
    // A band that never decides would pass trivially: each side must decide
    // rows in most seeds (about 230 labelled rows lie beyond each of the
    // planted E-cuts, well over the 45 a side needs at zero errors). About
    // one seed in ten has an error among the first 45 rows of a side, whose
    // bound (8.4% at 1 in 45) then stops the scan at once and leaves the
    // side open: the fixed sequence's price.
    eprintln!("confident: seeds over E (below, above) {over:?}, deciding {deciding:?}");
    assert!(
        deciding.iter().all(|&d| d >= 160),
        "sides deciding: {deciding:?}"
    );
    for (side, n) in ["below", "above"].iter().zip(over) {
        assert!(
            n <= MOST_SEEDS_ABOVE,
            "{side}: {n} of {SEEDS} seeds' confident bands exceed {MAX_ERROR} (at most {MOST_SEEDS_ABOVE} allowed)"
        );
    }

    // Today's fit at the point estimate breaks the same promise: it takes
    // the widest cut whose observed error is within E, so noise in its
    // favour lands it past the true E-cut about half of the time.
    let (over, _) = over_seeds(|pairs| fit_band(pairs, MAX_ERROR).unwrap(), &fresh);
    eprintln!("point estimate: seeds over E (below, above) {over:?}");
    for (side, n) in ["below", "above"].iter().zip(over) {
        assert!(
            n > 2 * MOST_SEEDS_ABOVE,
            "{side}: only {n} of {SEEDS} seeds' point-estimate bands exceed {MAX_ERROR}"
        );
    }
}
