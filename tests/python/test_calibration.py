"""`refscore report --gold`: every calibration figure and corrected estimate
checked against libraries no one here wrote, on a generated result with a
known judge error: scikit-learn (confusion matrix, kappa, AUC, Brier,
reliability bins, weighted kappa, MAE), SciPy (Spearman, Kendall),
statsmodels (kappa's interval) and ppi-python, the PPI++ authors' own
implementation (the corrected mean and its 95% interval).

Figures agree within 1e-6 and intervals within 1e-3, as the issue asks;
in practice they agree to rounding.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate
from scipy.stats import kendalltau, spearmanr
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    brier_score_loss,
    cohen_kappa_score,
    confusion_matrix,
    mean_absolute_error,
    roc_auc_score,
)
from statsmodels.stats.inter_rater import cohens_kappa
from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
ROWS = 20_000
LABELLED = 600
TOL = 1e-6
TOL_INTERVAL = 1e-3


def make_result(path, seed=7, truth_rate=0.6, false_p=(2, 3)):
    """A result whose judge has sensitivity 0.9 and specificity 0.7 against
    a true pass rate of 0.6, P(true) that is informative but miscalibrated,
    a similarity score with noise around the true score, and a cosine that
    separates the classes partly. Some labelled rows lack a verdict (the
    judge failed there)."""
    rng = np.random.default_rng(seed)
    truth = rng.random(ROWS) < truth_rate
    verdict_p = np.where(truth, rng.beta(5, 2, ROWS), rng.beta(*false_p, ROWS)).astype(np.float32)
    verdict = verdict_p >= 0.5
    failed = rng.random(ROWS) < 0.01
    cosine = np.clip(np.where(truth, 0.75, 0.55) + rng.normal(0, 0.12, ROWS), -1, 1).astype(np.float32)
    true_score = rng.integers(0, 11, ROWS) / 10
    similarity = np.clip(true_score + rng.normal(0.05, 0.12, ROWS), 0, 1).astype(np.float32)
    labelled = np.zeros(ROWS, bool)
    labelled[rng.choice(ROWS, LABELLED, replace=False)] = True
    mm = pa.array(verdict, mask=failed)
    mm_p = pa.array(verdict_p, mask=failed)
    source = pa.array(np.where(failed, None, "judge").tolist(), pa.string())
    table = pa.table(
        {
            "id": pa.array(np.arange(ROWS), pa.uint64()),
            "cosine": pa.array(cosine),
            "meaning_match": mm,
            "meaning_match_p": mm_p,
            "meaning_match_source": source,
            "similarity": pa.array(similarity),
            "similarity_source": pa.array(["judge"] * ROWS, pa.string()),
            "status": pa.array(["ok"] * ROWS, pa.string()),
            "error": pa.array([None] * ROWS, pa.string()),
            "human_verdict": pa.array(truth, mask=~labelled),
            "human_score": pa.array(true_score, mask=~labelled),
        }
    )
    pq.write_table(table, path)
    return table


def report(*args, expect=0):
    p = subprocess.run([BIN, "report", *map(str, args)], capture_output=True, text=True)
    assert p.returncode == expect, f"exit {p.returncode}: {p.stderr}"
    return p


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    d = tmp_path_factory.mktemp("calibration")
    table = make_result(d / "result.parquet")
    out = d / "r.json"
    report(d / "result.parquet", "--json", out,
           "--gold", "meaning_match=human_verdict",
           "--gold", "similarity=human_score",
           "--gold", "cosine=human_verdict")
    by_metric = {c["metric"]: c for c in json.loads(out.read_text())["calibration"]}
    # Nulls as None, whatever the type (to_numpy turns a float null into NaN).
    cols = {c: np.array(table.column(c).to_pylist(), object) for c in table.column_names}
    return by_metric, cols


def close(a, b, tol=TOL):
    assert a is not None and abs(a - b) <= tol, f"{a} vs {b}"


def test_verdict_agreement_matches_scikit_learn_and_statsmodels(figures):
    c, cols = figures
    mm = c["meaning_match"]
    gold = cols["human_verdict"]
    value = cols["meaning_match"]
    has = np.array([g is not None for g in gold]) & np.array([v is not None for v in value])
    y = np.array([g for g in gold[has]], bool)
    v = np.array([x for x in value[has]], bool)
    assert mm["labels"] == has.sum()
    labelled = np.array([g is not None for g in gold])
    assert mm["labels_without_value"] == (labelled & ~has).sum() > 0
    tn, fp, fn, tp = confusion_matrix(y, v, labels=[False, True]).ravel()
    k = mm["verdict"]
    assert k["confusion"] == {"true_negative": tn, "false_positive": fp,
                              "false_negative": fn, "true_positive": tp}
    close(k["agreement"], (tp + tn) / len(y))
    close(k["kappa"], cohen_kappa_score(y, v))
    sm = cohens_kappa(np.array([[tn, fp], [fn, tp]]))
    close(k["kappa_low"], sm.kappa_low, TOL_INTERVAL)
    close(k["kappa_high"], sm.kappa_upp, TOL_INTERVAL)
    close(k["sensitivity"], tp / (tp + fn))
    close(k["specificity"], tn / (tn + fp))
    # The rates' one-sided 90% lower Clopper-Pearson bounds (--gold's TPR and TNR).
    close(k["sensitivity_low"], proportion_confint(tp, tp + fn, alpha=0.2, method="beta")[0], 1e-9)
    close(k["specificity_low"], proportion_confint(tn, tn + fp, alpha=0.2, method="beta")[0], 1e-9)


def test_probability_calibration_matches_scikit_learn(figures):
    c, cols = figures
    mm = c["meaning_match"]
    gold, p = cols["human_verdict"], cols["meaning_match_p"]
    has = np.array([g is not None for g in gold]) & np.array([x is not None for x in p])
    y = np.array(list(gold[has]), bool)
    p = p[has].astype(np.float32).astype(np.float64)
    close(mm["probability"]["auc"], roc_auc_score(y, p))
    close(mm["probability_calibration"]["brier"], brier_score_loss(y, p))
    prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    bins = mm["probability_calibration"]["reliability"]
    assert len(bins) == len(prob_true)
    for b, t, q in zip(bins, prob_true, prob_pred):
        close(b["share_true"], t)
        close(b["mean_probability"], q)
    counts = np.array([b["count"] for b in bins])
    ece = np.sum(counts / counts.sum() * np.abs(prob_true - prob_pred))
    close(mm["probability_calibration"]["ece"], ece)
    # The suggested threshold agrees best: no cut-off over every value does better.
    best = mm["probability"]["best_threshold"]
    tries = [np.mean((p >= t) == y) for t in np.concatenate([np.unique(p), [np.inf]])]
    close(best["agreement"], max(tries))
    close(np.mean((p >= best["value"]) == y), best["agreement"])


def test_stand_ins_match_scikit_learn(figures):
    c, cols = figures
    gold, cosine, value = cols["human_verdict"], cols["cosine"], cols["meaning_match"]
    # As its own labelled metric: every labelled row.
    has = np.array([g is not None for g in gold])
    y = np.array(list(gold[has]), bool)
    close(c["cosine"]["separation"]["auc"], roc_auc_score(y, cosine[has].astype(np.float32).astype(np.float64)))
    # Beside the verdict: the labelled rows the verdict has.
    has &= np.array([v is not None for v in value])
    y = np.array(list(gold[has]), bool)
    stand_in = {s["metric"]: s for s in c["meaning_match"]["stand_ins"]}["cosine"]
    close(stand_in["separation"]["auc"], roc_auc_score(y, cosine[has].astype(np.float32).astype(np.float64)))


def test_score_agreement_matches_scipy_and_scikit_learn(figures):
    c, cols = figures
    s = c["similarity"]["score"]
    gold, score = cols["human_score"], cols["similarity"]
    has = np.array([g is not None for g in gold])
    g = np.array(list(gold[has]), float)
    f = score[has].astype(np.float32).astype(np.float64)
    close(s["spearman"], spearmanr(f, g).statistic)
    close(s["kendall"], kendalltau(f, g).statistic)
    close(s["mae"], mean_absolute_error(g, f))
    steps = lambda x: np.floor(x * 10 + 0.5).astype(int)  # half up, as refscore rounds
    close(s["qwk"], cohen_kappa_score(steps(g), steps(f), labels=list(range(11)), weights="quadratic"))


@pytest.mark.parametrize("metric,gold_col,value_of", [
    ("meaning_match", "human_verdict", lambda v: np.array(list(v), float)),
    ("similarity", "human_score", lambda v: v.astype(np.float32).astype(np.float64)),
])
def test_corrected_estimate_matches_ppi_python(figures, metric, gold_col, value_of):
    c, cols = figures
    k = c[metric]["corrected"]
    gold, value = cols[gold_col], cols[metric]
    has_value = np.array([v is not None for v in value])
    has_gold = np.array([g is not None for g in gold])
    lab = has_value & has_gold
    unl = has_value & ~has_gold
    y = np.array(list(gold[lab]), float)
    f = value_of(value[lab])
    fu = value_of(value[unl])
    lo, hi = ppi_mean_ci(y, f, fu, alpha=0.05)
    close(k["estimate"], float(ppi_mean_pointestimate(y, f, fu)))
    close(k["low"], float(np.ravel(lo)[0]), TOL_INTERVAL)
    close(k["high"], float(np.ravel(hi)[0]), TOL_INTERVAL)
    close(k["raw"], np.concatenate([f, fu]).mean())
    assert k["rows"] == has_value.sum()


def test_the_corrected_rate_covers_the_truth_where_the_judge_does_not(figures):
    c, cols = figures
    k = c["meaning_match"]["corrected"]
    truth = 0.6
    assert not (abs(k["raw"] - truth) < 0.02), k
    assert k["low"] <= truth <= k["high"], k


def test_labels_off_the_scale_and_labels_missing(tmp_path):
    table = make_result(tmp_path / "r.parquet")
    bad = table.set_column(table.column_names.index("human_score"), "human_score",
                           pa.array([1.5] + [None] * (ROWS - 1), pa.float64()))
    pq.write_table(bad, tmp_path / "bad.parquet")
    p = report(tmp_path / "bad.parquet", "--json", tmp_path / "x.json",
               "--gold", "similarity=human_score", expect=65)
    assert "column 'human_score', row 0" in p.stderr and "0-1 scale" in p.stderr
    p = report(tmp_path / "r.parquet", "--json", tmp_path / "x.json",
               "--gold", "meaning_match=human_score", expect=65)
    assert "must be boolean" in p.stderr
    empty = table.set_column(table.column_names.index("human_verdict"), "human_verdict",
                             pa.array([None] * ROWS, pa.bool_()))
    pq.write_table(empty, tmp_path / "empty.parquet")
    p = report(tmp_path / "empty.parquet", "--json", tmp_path / "x.json",
               "--gold", "meaning_match=human_verdict", expect=78)
    assert "holds no labels" in p.stderr
    report(tmp_path / "r.parquet", "--json", tmp_path / "x.json",
           "--gold", "meaning_match=no_such_column", expect=65)


def test_calibrate_band_fits_the_narrowest_band_within_the_error(tmp_path):
    table = make_result(tmp_path / "r.parquet")
    out = tmp_path / "band.json"
    p = subprocess.run([BIN, "calibrate-band", str(tmp_path / "r.parquet"), "--metric", "meaning_match",
                        "--by", "cosine", "--max-error", "0.05", "--gold", "human_verdict",
                        "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    b = json.loads(out.read_text())
    assert p.stdout.startswith(f"--judge-band {b['judge_band']}\n")
    cols = {c: np.array(table.column(c).to_pylist(), object) for c in table.column_names}
    lab = np.array([g is not None for g in cols["human_verdict"]]) & \
        np.array([v is not None for v in cols["meaning_match"]])
    s = cols["cosine"][lab].astype(np.float32).astype(np.float64)
    y = np.array(list(cols["human_verdict"][lab]), bool)
    lo, hi = float(np.float32(b["lo"])), float(np.float32(b["hi"]))
    below, above = s < lo, s > hi
    # Each side's error as measured here, within the error asked for.
    assert b["below"]["labels"] == below.sum() and b["below"]["errors"] == (y & below).sum()
    assert b["above"]["labels"] == above.sum() and b["above"]["errors"] == (~y & above).sum()
    assert b["below"]["error"] <= 0.05 and b["above"]["error"] <= 0.05
    for side in ("below", "above"):
        low, high = proportion_confint(b[side]["errors"], b[side]["labels"], method="wilson")
        close(b[side]["error_low"], low)
        close(b[side]["error_high"], high)
    # HI is the lowest feasible cut-off: the next labelled value below it is not.
    values = np.unique(s)
    lower = values[values < hi]
    for cut in lower[-5:]:
        take = s >= cut
        assert (~y & take).sum() > 0.05 * take.sum(), cut
    # The whole result: rows inside the band, and the judge calls it saves.
    allc = cols["cosine"].astype(np.float32).astype(np.float64)
    inside = (allc >= lo) & (allc <= hi)
    assert b["rows"] == len(allc) and b["rows_inside"] == inside.sum()
    judged = np.array([x == "judge" for x in cols["meaning_match_source"]])
    assert b["calls_saved"] == (~inside & judged).sum()


def test_calibrate_band_needs_labels_of_both_kinds(tmp_path):
    table = make_result(tmp_path / "r.parquet")
    all_true = pa.array([True if i % 30 == 0 else None for i in range(ROWS)], pa.bool_())
    pq.write_table(table.set_column(table.column_names.index("human_verdict"), "human_verdict", all_true),
                   tmp_path / "t.parquet")
    p = subprocess.run([BIN, "calibrate-band", str(tmp_path / "t.parquet"), "--gold", "human_verdict"],
                       capture_output=True, text=True)
    assert p.returncode == 65, p.stderr
    assert "labels are all true" in p.stderr and "lower" in p.stderr


def test_night_over_night_compares_the_corrected_figures(tmp_path):
    """Tonight the true rate fell from 0.6 to 0.5, but the judge grew lenient
    (it passes two thirds of wrong answers instead of a third): its own pass
    rate rose. With labels on both nights the verdict follows the corrected
    figures: worse, and the gate fails."""
    make_result(tmp_path / "a.parquet", seed=1)
    make_result(tmp_path / "b.parquet", seed=2, truth_rate=0.5, false_p=(3, 2))
    out = tmp_path / "r.json"
    gold = ["--gold", "meaning_match=human_verdict"]
    p = report(tmp_path / "b.parquet", "--baseline", tmp_path / "a.parquet", "--json", out, *gold,
               "--fail-on-regression", "meaning_match", expect=1)
    r = json.loads(out.read_text())
    m = {x["name"]: x for x in r["metrics"]}["meaning_match"]
    c = m["change"]
    assert c["diff"] > 0.05, "the judge's own rate rose"
    assert c["verdict"] == "worse" and "corrected" in c["line"], c["line"]
    k = c["corrected"]
    now = {x["metric"]: x for x in r["calibration"]}["meaning_match"]["corrected"]
    close(k["result"], now["estimate"])
    se_now = (now["high"] - now["low"]) / (2 * 1.959963984540054)
    assert k["ci_high"] < 0 and abs(k["diff"] + 0.1) < 3 * se_now * 1.5
    assert "meaning_match" in p.stdout and "worse" in p.stdout


TIER_BAND = "cosine:0.45..0.8"
TIER_GUARANTEE = {"max_error": 0.05, "confidence": 0.9, "sides": "both"}


def make_tiered_result(path, seed=11):
    """A result whose meaning_match a guaranteed cosine tier decided where
    cosine lies outside 0.45..0.8 (below: false, above: true), the judge
    elsewhere, with the chain recorded in the footer as `score` writes it
    (`refscore.tiers`). The labels make the side above right about 98% of
    the time and the side below about 90%, so one side can hold its 5%
    guarantee and the other cannot."""
    rng = np.random.default_rng(seed)
    n, labelled_n = 4000, 1200
    cosine = rng.random(n).astype(np.float32)
    above, below = cosine > 0.8, cosine < 0.45
    truth = np.where(above, rng.random(n) < 0.985, np.where(below, rng.random(n) < 0.1, rng.random(n) < 0.5))
    judged = rng.random(n) < np.where(truth, 0.9, 0.2)
    verdict = np.where(above, True, np.where(below, False, judged))
    source = np.where(above | below, "band:cosine", "judge")
    labelled = np.zeros(n, bool)
    labelled[rng.choice(n, labelled_n, replace=False)] = True
    table = pa.table(
        {
            "id": pa.array(np.arange(n), pa.uint64()),
            "cosine": pa.array(cosine),
            "meaning_match": pa.array(verdict),
            "meaning_match_source": pa.array(source.tolist(), pa.string()),
            "status": pa.array(["ok"] * n, pa.string()),
            "error": pa.array([None] * n, pa.string()),
            "human_verdict": pa.array(truth, mask=~labelled),
        }
    )
    tiers = [{"tier": TIER_BAND, "source": "band:cosine", "guarantee": TIER_GUARANTEE}]
    table = table.replace_schema_metadata({"refscore.tiers": json.dumps(tiers)})
    pq.write_table(table, path)
    return table, labelled, truth, above, below


def test_each_guaranteed_side_is_checked_with_clopper_pearson(tmp_path):
    """A tier's sides against its band's guarantee: the error on the
    labelled rows each side decided, its one-sided Clopper-Pearson bounds at
    the band's confidence (statsmodels' proportion_confint(alpha=2(1-C),
    method="beta"), each end equal to scipy's beta.ppf), and whether the
    upper one is within the guarantee's error."""
    from scipy.stats import beta

    table, labelled, truth, above, below = make_tiered_result(tmp_path / "result.parquet")
    out = tmp_path / "r.json"
    report(tmp_path / "result.parquet", "--json", out, "--gold", "meaning_match=human_verdict")
    r = json.loads(out.read_text())
    c = next(c for c in r["calibration"] if c["metric"] == "meaning_match")
    (t,) = c["tiers"]
    assert t["source"] == "band:cosine"
    assert t["guarantee"] == TIER_GUARANTEE
    e, conf = TIER_GUARANTEE["max_error"], TIER_GUARANTEE["confidence"]
    statuses = {}
    for name, side, decided in (("decided_true", above, True), ("decided_false", below, False)):
        rows = labelled & side
        labels = int(rows.sum())
        errors = int((truth[rows] != decided).sum())
        s = t[name]
        assert (s["labels"], s["errors"]) == (labels, errors), name
        g = s["guarantee"]
        low, high = proportion_confint(errors, labels, alpha=2 * (1 - conf), method="beta")
        close(g["error_low"], low)
        close(g["error_high"], high)
        close(g["error_high"], beta.ppf(conf, errors + 1, labels - errors))
        assert g["held"] == (high <= e), name
        assert (g["max_error"], g["confidence"]) == (e, conf)
        statuses[name] = g["status"]
    # The generator plants one side that holds and one that does not.
    assert statuses == {"decided_true": "held", "decided_false": "not_held"}, statuses
    # The tier's decided share over the whole result.
    decided = int((above | below).sum())
    assert c["tier_volume"]["band:cosine"]["decided"] == decided
    close(c["tier_volume"]["band:cosine"]["share"], decided / len(truth))
