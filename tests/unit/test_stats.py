"""analysis/stats.py against hand-computed values and independent formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from orchestrator.analysis import stats


def _welch_reference(x: np.ndarray, y: np.ndarray) -> float:
    """Welch's t-test written out (t statistic, Welch-Satterthwaite df, Student t tail)."""
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    t = (y.mean() - x.mean()) / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    # two-sided p = I_{df/(df+t^2)}(df/2, 1/2)
    return float(special.betainc(df / 2.0, 0.5, df / (df + t * t)))


def test_cliffs_delta_hand_computed() -> None:
    # pairs (scenario > baseline) = 6, (scenario < baseline) = 1, of 9 -> 5/9
    assert stats.cliffs_delta([1, 2, 3], [2, 3, 4]) == pytest.approx(5 / 9)
    # reversed roles flip the sign
    assert stats.cliffs_delta([2, 3, 4], [1, 2, 3]) == pytest.approx(-5 / 9)
    # complete separation
    assert stats.cliffs_delta([1, 2], [5, 6, 7]) == 1.0
    # ties count as neither
    assert stats.cliffs_delta([1, 1], [1, 1]) == 0.0


def test_cliffs_delta_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(0, 6, size=23).astype(float)
    y = rng.integers(0, 6, size=17).astype(float)
    brute = sum(np.sign(b - a) for a in x for b in y) / (x.size * y.size)
    assert stats.cliffs_delta(x, y) == pytest.approx(brute)


@pytest.mark.parametrize(("delta", "label"), [
    (0.0, "negligible"), (0.146, "negligible"), (-0.2, "small"), (0.33, "medium"),
    (0.47, "medium"), (-0.474, "large"), (1.0, "large"), (None, None),
])
def test_cliffs_magnitude_romano_thresholds(delta: float | None, label: str | None) -> None:
    assert stats.cliffs_magnitude(delta) == label


def test_welch_p_matches_written_out_formula() -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(10.0, 1.0, 40)
    y = rng.normal(10.6, 2.5, 25)
    assert stats.welch_p(x, y) == pytest.approx(_welch_reference(x, y), rel=1e-9)


def test_mannwhitney_exact_small_case() -> None:
    # complete separation of 3 vs 3 without ties: exact two-sided p = 2 / C(6,3) = 0.1
    assert stats.mannwhitney_p(np.array([1.0, 2, 3]), np.array([4.0, 5, 6])) == pytest.approx(0.1)


def test_identical_samples_give_zero_delta_and_p_one() -> None:
    x = np.arange(1.0, 31.0)
    result = stats.compare_samples(x, x.copy(), resamples=2000, seed=3)
    assert result.delta_mean == 0.0
    assert result.delta_median == 0.0
    assert result.delta_mean_pct == 0.0
    assert result.welch_p == pytest.approx(1.0)
    assert result.mannwhitney_p == pytest.approx(1.0)
    assert result.cliffs_delta == 0.0
    assert result.cliffs_magnitude == "negligible"
    assert result.ci_mean_low is not None and result.ci_mean_high is not None
    assert result.ci_mean_low <= 0.0 <= result.ci_mean_high


def test_bootstrap_ci_covers_true_delta_on_normal_data() -> None:
    rng = np.random.default_rng(2026)
    base = rng.normal(0.60, 0.05, 200)
    scen = rng.normal(0.75, 0.05, 200)  # true delta of means and medians: +0.15
    result = stats.compare_samples(base, scen, resamples=4000, seed=1)
    assert result.ci_mean_low < 0.15 < result.ci_mean_high
    assert result.ci_median_low < 0.15 < result.ci_median_high
    assert result.ci_mean_low < result.delta_mean < result.ci_mean_high
    # CI width close to the normal-theory width 2 * 1.96 * sqrt(2 * 0.05^2 / 200)
    assert (result.ci_mean_high - result.ci_mean_low) == pytest.approx(2 * 1.96 * 0.005, rel=0.15)
    assert result.welch_p < 1e-10
    assert result.cliffs_magnitude == "large"
    assert result.delta_mean_pct == pytest.approx(100 * result.delta_mean / result.mean_baseline)


def test_bootstrap_is_seeded_and_records_seed() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=50), rng.normal(0.3, size=50)
    a = stats.compare_samples(x, y, resamples=1000, seed=42)
    b = stats.compare_samples(x, y, resamples=1000, seed=42)
    c = stats.compare_samples(x, y, resamples=1000, seed=43)
    assert a == b
    assert a.seed == 42 and a.resamples == 1000
    assert (a.ci_mean_low, a.ci_mean_high) != (c.ci_mean_low, c.ci_mean_high)


def test_too_few_values_give_none_not_numbers() -> None:
    result = stats.compare_samples([5.0], [7.0], resamples=100)
    assert result.delta_mean == 2.0
    assert result.delta_mean_pct == pytest.approx(40.0)
    assert result.ci_mean_low is None and result.welch_p is None and result.cliffs_delta is None
    empty = stats.compare_samples([], [1.0, 2.0], resamples=100)
    assert empty.mean_baseline is None and empty.delta_mean is None and empty.delta_mean_pct is None


def test_constant_samples_have_delta_but_no_t_test() -> None:
    # per-message frame sizes are constant: 142 B plain vs 163 B TLS 1.2 ChaCha20
    result = stats.compare_samples([142.0] * 10, [163.0] * 10, resamples=200)
    assert result.delta_mean == 21.0 and result.delta_median == 21.0
    assert result.ci_mean_low == 21.0 and result.ci_mean_high == 21.0
    assert result.welch_p is None
    assert result.cliffs_delta == 1.0


def test_nan_values_are_dropped() -> None:
    result = stats.compare_samples([1.0, np.nan, 3.0], [2.0, 4.0, np.inf], resamples=100)
    assert result.n_baseline == 2 and result.n_scenario == 2
    assert result.delta_mean == 1.0


def test_repeat_spread_hand_computed() -> None:
    spread = stats.repeat_spread([1.0, 2.0, 3.0, None])
    assert spread is not None
    assert spread.repeats == 3
    assert spread.mean == 2.0 and spread.sd == 1.0 and spread.min == 1.0 and spread.max == 3.0
    assert spread.cv_pct == pytest.approx(50.0)
    assert stats.repeat_spread([4.0]) is None


def test_bad_resamples_rejected() -> None:
    with pytest.raises(ValueError, match="resamples"):
        stats.compare_samples([1.0, 2.0], [1.0, 2.0], resamples=0)
