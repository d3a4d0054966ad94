"""`refscore report --json`: every figure checked against an independent
computation with DuckDB and numpy, on a generated result pair with a known
regression injected into one slice (report_data.py).

Intervals: refscore's paired bootstrap resamples the paired rows through a
multinomial draw over a 1e-4-wide histogram of their differences
(crates/report/src/bootstrap.rs). Here numpy resamples the raw rows
(indices drawn with replacement, 4,000 replicates). Two percentile
bootstraps of the same data differ only by Monte Carlo error: the 2.5%
or 97.5% percentile of B replicates has a standard deviation of about
sqrt(q(1-q)/B) / phi(1.96) standard errors of the mean, 0.060 SE at
B = 2000 and 0.042 SE at B = 4000, so the two endpoints differ with a
standard deviation of about 0.073 SE; binning moves each difference by at
most 5e-5. The tolerance 0.35 SE + 1e-4 is therefore about 4.8 standard
deviations wide, and a wrong method (a missing pairing, a wrong width by a
factor of sqrt(2), an interval off-centre) is caught.
"""

import json
import os
import subprocess
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from report_data import DROP, REGRESSED, SLICES, make_pair

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
THRESHOLDS = {"exact_match": 1.0, "token_f1": 0.5}
METRICS = ["exact_match", "token_f1"]
FLIPS = 20
LOWEST = 10


def report(*args, expect=0):
    p = subprocess.run([BIN, "report", *map(str, args)], capture_output=True, text=True)
    assert p.returncode == expect, f"exit {p.returncode}: {p.stderr}"
    return p


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    base, cur = make_pair(d)
    out = d / "r.json"
    report(cur, "--baseline", base, "--by", "category", "--json", out, "-o", d / "r.html",
           "--flips", FLIPS, "--lowest", LOWEST)
    return d, base, cur, json.loads(out.read_text())


def load(path):
    t = pq.read_table(path)
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def floats(col):
    return np.array([np.nan if v is None else v for v in col], dtype=np.float32)


def tolerance(d):
    return 0.35 * d.std(ddof=1) / np.sqrt(len(d)) + 1e-4


def np_bootstrap(d, b=4000, seed=123):
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(b // 500):
        idx = rng.integers(0, len(d), (500, len(d)))
        means.append(d[idx].mean(axis=1))
    means = np.concatenate(means)
    return np.quantile(means, 0.025), np.quantile(means, 0.975)


def paired(base, cur, metric, mask=None):
    """Rows valued in both runs, joined by id: (ids, base, cur, result rows)."""
    bpos = {int(i): k for k, i in enumerate(base["id"])}
    rows = np.array([bpos[int(i)] for i in cur["id"]])
    b = floats(base[metric])[rows]
    c = floats(cur[metric])
    ok = ~np.isnan(b) & ~np.isnan(c)
    if mask is not None:
        ok &= mask
    return cur["id"][ok], b[ok], c[ok], np.nonzero(ok)[0]


def test_means_medians_and_pass_rates_of_each_run(pair):
    d, base, cur, r = pair
    for run, path in (("result", cur), ("baseline", base)):
        data = load(path)
        for m in r["metrics"]:
            v = floats(data[m["name"]])
            v = v[~np.isnan(v)].astype(np.float64)
            got = m[run]
            assert got["count"] == len(v)
            assert got["mean"] == pytest.approx(v.mean(), abs=1e-9)
            assert abs(got["median"] - np.median(v)) <= 5e-5 + 1e-9
            assert got["pass_rate"] == pytest.approx((v >= THRESHOLDS[m["name"]]).mean(), abs=1e-12)
            assert sum(got["histogram"]["counts"]) == len(v)


def test_paired_differences_and_intervals(pair):
    d, base, cur, r = pair
    b, c = load(base), load(cur)
    for m in r["metrics"]:
        _, vb, vc, _ = paired(b, c, m["name"])
        diff = vc.astype(np.float64) - vb.astype(np.float64)
        ch = m["change"]
        assert ch["pairs"] == len(diff)
        assert ch["mean_baseline"] == pytest.approx(vb.astype(np.float64).mean(), abs=1e-9)
        assert ch["mean_result"] == pytest.approx(vc.astype(np.float64).mean(), abs=1e-9)
        assert ch["diff"] == pytest.approx(diff.mean(), abs=1e-9)
        lo, hi = np_bootstrap(diff)
        tol = tolerance(diff)
        assert abs(ch["ci_low"] - lo) < tol, (m["name"], ch["ci_low"], lo, tol)
        assert abs(ch["ci_high"] - hi) < tol, (m["name"], ch["ci_high"], hi, tol)
        # A sanity check against the normal interval too.
        se = diff.std(ddof=1) / np.sqrt(len(diff))
        assert abs(ch["ci_low"] - (diff.mean() - 1.96 * se)) < tol
        assert abs(ch["ci_high"] - (diff.mean() + 1.96 * se)) < tol
    f1 = next(m for m in r["metrics"] if m["name"] == "token_f1")["change"]
    assert f1["verdict"] == "worse" and f1["ci_high"] < 0
    assert f1["line"].startswith("token_f1 \u2212") and f1["line"].endswith(": worse")


def test_flips_counts_lists_and_texts(pair):
    d, base, cur, r = pair
    b, c = load(base), load(cur)
    con = duckdb.connect()
    for m in r["metrics"]:
        name, t = m["name"], THRESHOLDS[m["name"]]
        down, up = con.execute(
            f"""SELECT count(*) FILTER (WHERE b.{name} >= {t} AND c.{name} < {t}),
                       count(*) FILTER (WHERE b.{name} < {t} AND c.{name} >= {t})
                FROM read_parquet('{cur}') c JOIN read_parquet('{base}') b USING (id)
                WHERE b.{name} IS NOT NULL AND c.{name} IS NOT NULL"""
        ).fetchone()
        ch = m["change"]
        assert (ch["pass_to_fail"], ch["fail_to_pass"]) == (down, up)
        ids, vb, vc, rows = paired(b, c, name)
        delta = (vc - vb).astype(np.float32)  # refscore orders by the f32 difference
        for key, sign, listed in (("down", 1, ch["pass_to_fail_rows"]), ("up", -1, ch["fail_to_pass_rows"])):
            sel = (vb >= t) & (vc < t) if key == "down" else (vb < t) & (vc >= t)
            order = np.lexsort((rows[sel], sign * delta[sel]))[:FLIPS]
            assert [x["id"] for x in listed] == [str(i) for i in ids[sel][order]], (name, key)
            for x in listed:
                i = int(x["id"])
                assert x["input"] == f"question {i}?"
                assert x["reference"] == f"reference answer {i}"
                assert x["output"].startswith(f"output {i}")
                assert x["baseline_output"].startswith(f"output {i}")
                assert (x["baseline_value"] >= t) == (key == "down")


def test_lowest_rows(pair):
    d, base, cur, r = pair
    c = load(cur)
    for m in r["metrics"]:
        v = floats(c[m["name"]])
        rows = np.nonzero(~np.isnan(v))[0]
        # Worst first: the highest values where lower is better.
        worst = -v if m["lower_is_better"] else v
        order = np.lexsort((rows, worst[rows]))[:LOWEST]
        assert [x["row"] for x in m["lowest"]] == rows[order].tolist()
        assert [x["id"] for x in m["lowest"]] == [str(c["id"][k]) for k in rows[order]]
        assert m["lowest"][0]["reference"].startswith("reference answer")


def test_status_errors_and_join(pair):
    d, base, cur, r = pair
    con = duckdb.connect()
    for run, path in (("result", cur), ("baseline", base)):
        statuses = dict(con.execute(f"SELECT status, count(*) FROM read_parquet('{path}') GROUP BY 1").fetchall())
        assert r[run]["statuses"] == statuses
        errors = dict(con.execute(
            f"SELECT error, count(*) FROM read_parquet('{path}') WHERE error IS NOT NULL GROUP BY 1").fetchall())
        assert {e["reason"]: e["rows"] for e in r[run]["errors"]} == errors
    j = r["join"]
    assert j["method"] == "aligned"
    assert (j["rows_matched"], j["only_in_result"], j["only_in_baseline"]) == (20_000, 0, 0)
    changes = {(x["from"], x["to"]): x["rows"] for x in j["status_changes"]}
    expected = dict(((a, b_), n) for a, b_, n in con.execute(
        f"""SELECT b.status, c.status, count(*) FROM read_parquet('{cur}') c
            JOIN read_parquet('{base}') b USING (id) GROUP BY 1, 2""").fetchall())
    assert changes == expected


def test_slices_find_the_injected_regression(pair):
    d, base, cur, r = pair
    b, c = load(base), load(cur)
    s = r["slices"]
    assert (s["column"], s["source"], s["count"]) == ("category", "result", len(SLICES))
    for sm in s["metrics"]:
        name = sm["name"]
        diffs = [abs(x["change"]["diff"]) for x in sm["slices"]]
        assert diffs == sorted(diffs, reverse=True), "sorted by the largest change"
        for x in sm["slices"]:
            mask = c["category"] == x["slice"]
            assert x["rows"] == int(mask.sum())
            v = floats(c[name])[mask]
            v = v[~np.isnan(v)].astype(np.float64)
            assert x["count"] == len(v) and x["mean"] == pytest.approx(v.mean(), abs=1e-9)
            _, vb, vc, _ = paired(b, c, name, mask)
            diff = vc.astype(np.float64) - vb.astype(np.float64)
            ch = x["change"]
            assert ch["pairs"] == len(diff)
            assert ch["diff"] == pytest.approx(diff.mean(), abs=1e-9)
            lo, hi = np_bootstrap(diff, seed=7)
            tol = tolerance(diff)
            assert abs(ch["ci_low"] - lo) < tol and abs(ch["ci_high"] - hi) < tol, (name, x["slice"])
            t = THRESHOLDS[name]
            assert ch["pass_to_fail"] == int(((vb >= t) & (vc < t)).sum())
            assert ch["fail_to_pass"] == int(((vb < t) & (vc >= t)).sum())
    f1 = next(sm for sm in s["metrics"] if sm["name"] == "token_f1")["slices"]
    assert f1[0]["slice"] == REGRESSED and f1[0]["change"]["verdict"] == "worse"
    assert f1[0]["change"]["diff"] < -0.8 * DROP
    for x in f1[1:]:
        assert abs(x["change"]["diff"]) < 0.01, x


def test_rows_in_another_order_give_the_same_figures(tmp_path, pair):
    _, _, _, aligned = pair
    base, cur = make_pair(tmp_path, shuffle_baseline=True)
    out = tmp_path / "r.json"
    report(cur, "--baseline", base, "--by", "category", "--json", out, "--flips", FLIPS, "--lowest", LOWEST)
    hashed = json.loads(out.read_text())
    assert hashed["join"]["method"] == "hashed"
    assert hashed["join"]["rows_matched"] == 20_000
    for a, h in zip(aligned["metrics"], hashed["metrics"]):
        assert a["change"] == h["change"]
        assert a["result"] == h["result"]
        assert a["baseline"]["mean"] == pytest.approx(h["baseline"]["mean"], abs=1e-12)
    assert aligned["slices"] == hashed["slices"]


def test_gate_exit_codes(pair):
    d, base, cur, r = pair
    p = report(cur, "--baseline", base, "--fail-on-regression", "token_f1=0.01", "--json", d / "g.json", expect=1)
    assert "token_f1" in p.stderr and "regression" in p.stderr
    assert json.loads((d / "g.json").read_text())["gates"][0]["failed"] is True
    report(cur, "--baseline", base, "--fail-on-regression", "token_f1=0.5", "--json", d / "g.json")
    # The same run against itself regresses nowhere.
    report(cur, "--baseline", cur, "--fail-on-regression", "all", "--json", d / "g.json")


def test_by_and_texts_from_the_input(tmp_path, pair):
    _, base, cur, with_keep = pair
    t = pq.read_table(cur)
    pq.write_table(t.select(["id", "question", "reference", "output", "category"]), tmp_path / "input.parquet")
    pq.write_table(t.select(["id", "exact_match", "token_f1", "status", "error"]), tmp_path / "bare.parquet")
    out = tmp_path / "r.json"
    report(tmp_path / "bare.parquet", "--baseline", base, "--input", tmp_path / "input.parquet",
           "--by", "category", "--json", out, "--flips", FLIPS, "--lowest", LOWEST)
    r = json.loads(out.read_text())
    assert r["slices"]["source"] == "input" and r["texts_from"] == "input"
    for a, b in zip(with_keep["slices"]["metrics"], r["slices"]["metrics"]):
        assert a == b
    for a, b in zip(with_keep["metrics"], r["metrics"]):
        assert [x["input"] for x in a["lowest"]] == [x["input"] for x in b["lowest"]]
        assert [x["output"] for x in a["change"]["pass_to_fail_rows"]] == \
            [x["output"] for x in b["change"]["pass_to_fail_rows"]]
