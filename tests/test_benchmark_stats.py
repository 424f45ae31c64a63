"""The benchmarks' shared statistics (benchmarks/stats.py) and report writing (benchmarks/report_io.py):
intervals against their textbook values, the bootstraps' determinism and bounds, refused inputs, and the
writes that leave no half-written file."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from benchmarks import report_io
from benchmarks.stats import (auroc, bootstrap_auroc, bootstrap_mean, clopper_pearson, resample_indices, sign_test_p,
                              wilson)


def test_clopper_pearson_matches_the_beta_quantiles():
    stats = pytest.importorskip("scipy.stats")
    for k, n in ((0, 10), (3, 10), (10, 10), (17, 48), (1, 1)):
        lo, hi = clopper_pearson(k, n)
        want_lo = 0.0 if k == 0 else stats.beta.ppf(0.025, k, n - k + 1)
        want_hi = 1.0 if k == n else stats.beta.ppf(0.975, k + 1, n - k)
        assert (lo, hi) == pytest.approx((want_lo, want_hi), abs=1e-9), (k, n)


def test_wilson_has_no_rate_without_trials_and_refuses_impossible_counts():
    assert all(np.isnan(wilson(0, 0)))
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson(-1, 4)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        sign_test_p(5, 4)


def test_resample_indices_draw_the_same_rows_as_one_draw_per_resample():
    """A loop drawing one resample at a time from the same seed gets the same rows (callers rely on it)."""
    rng = np.random.default_rng(7)
    one_by_one = np.stack([rng.integers(0, 9, 9) for _ in range(50)])
    assert np.array_equal(resample_indices(9, n=50, seed=7), one_by_one)


def test_bootstrap_auroc_is_deterministic_and_brackets_the_estimate():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1.0, 1.0, 30), rng.normal(0.0, 1.0, 40)
    lo, hi = bootstrap_auroc(pos, neg, n=500, seed=3)
    assert (lo, hi) == bootstrap_auroc(pos, neg, n=500, seed=3)
    assert 0.0 <= lo < auroc(pos, neg) < hi <= 1.0
    assert all(np.isnan(bootstrap_auroc([], neg))) and np.isnan(auroc(pos, []))


def test_bootstrap_mean_of_constant_values_is_the_value():
    assert bootstrap_mean([0.3] * 5) == pytest.approx((0.3, 0.3))
    lo, hi = bootstrap_mean(list(np.linspace(0, 1, 20)), seed=1)
    assert 0.0 < lo < 0.5 < hi < 1.0


def test_doc_written_from_raw_data_and_render_only(tmp_path, capsys):
    ap = argparse.ArgumentParser()
    report_io.add_doc_arguments(ap, tmp_path / "raw.json", tmp_path / "doc.md", doc_flag="--out")
    render = lambda raw: f"# {raw['x']}\n"
    args = ap.parse_args([])
    assert not report_io.render_only(args, render) and args.doc == tmp_path / "doc.md"
    out = report_io.write_measurement(render, {"x": 1}, args.raw, args.doc)
    assert out.read_text() == "# 1\n" and json.loads(args.raw.read_text()) == {"x": 1}
    args.raw.write_text(json.dumps({"x": 2}))
    assert report_io.render_only(ap.parse_args(["--render"]), render)
    assert (tmp_path / "doc.md").read_text() == "# 2\n" and "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.md", "raw.json"]  # no temp files left behind


def test_save_figure_writes_the_png_and_closes_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = report_io.save_figure(fig, tmp_path / "sub" / "plot.png", dpi=50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not plt.fignum_exists(fig.number)
    assert report_io.measured_on("x86_64, 2 CPU cores") == "Measured on: x86_64, 2 CPU cores."
