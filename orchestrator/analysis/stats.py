"""Comparing two samples (e.g. TLS vs plaintext delays at the same payload).

Pure numpy/scipy. Direction is always ``scenario - baseline``: a positive delta means the
scenario is larger (slower, heavier). Values that cannot be computed are ``None``, never NaN,
so callers render them as "n/a".

Definitions (MEASUREMENT.md, "Comparing two scenarios"):
- delta of mean and of median, in the sample's unit and in % of the baseline value;
- 95 % percentile-bootstrap CI of each delta: both samples resampled independently with
  replacement, ``resamples`` times, from ``numpy.random.default_rng(seed)``;
- Welch's t-test (unequal variances) and Mann-Whitney U (two-sided) p-values;
- Cliff's delta = P(scenario > baseline) - P(scenario < baseline), with the magnitude labels
  of Romano et al. (2006): |d| < 0.147 negligible, < 0.33 small, < 0.474 medium, else large.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TypeAlias

import numpy as np

Sample: TypeAlias = Sequence[float] | np.ndarray

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
CI_LEVEL = 0.95
# Romano, Kromrey, Coraggio, Skowronek (2006): thresholds for |Cliff's delta|.
CLIFF_THRESHOLDS: tuple[tuple[float, str], ...] = ((0.147, "negligible"), (0.33, "small"), (0.474, "medium"))
# Bootstrap works on blocks of at most this many drawn values (memory bound, not a result knob).
_BLOCK_VALUES = 2_000_000


@dataclass(frozen=True)
class Comparison:
    """Scenario vs baseline on one metric. ``None`` = not computable (too few values, no spread)."""

    n_baseline: int
    n_scenario: int
    mean_baseline: float | None
    mean_scenario: float | None
    delta_mean: float | None
    delta_mean_pct: float | None
    ci_mean_low: float | None
    ci_mean_high: float | None
    median_baseline: float | None
    median_scenario: float | None
    delta_median: float | None
    delta_median_pct: float | None
    ci_median_low: float | None
    ci_median_high: float | None
    welch_p: float | None
    mannwhitney_p: float | None
    cliffs_delta: float | None
    cliffs_magnitude: str | None
    ci_level: float
    resamples: int
    seed: int

    def as_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)


@dataclass(frozen=True)
class RepeatSpread:
    """Spread of one per-repeat value (e.g. each repeat's mean delay) across R repeats."""

    repeats: int
    mean: float
    sd: float
    min: float
    max: float
    cv_pct: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def _clean(values: Sample) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _delta(base: float | None, other: float | None) -> float | None:
    """other - base, with float round-off (|d| <= 1e-12 of the values) snapped to 0."""
    if base is None or other is None:
        return None
    diff = other - base
    return 0.0 if abs(diff) <= 1e-12 * max(abs(base), abs(other)) else diff


def _pct(delta: float | None, base: float | None) -> float | None:
    if delta is None or base is None or base == 0:
        return None
    return 100.0 * delta / abs(base)


def cliffs_delta(baseline: Sample, scenario: Sample) -> float | None:
    """P(scenario > baseline) - P(scenario < baseline) over all pairs; None if a sample is empty."""
    x = np.sort(_clean(baseline))
    y = _clean(scenario)
    if x.size == 0 or y.size == 0:
        return None
    below = np.searchsorted(x, y, side="left")             # baseline values < each y
    above = x.size - np.searchsorted(x, y, side="right")   # baseline values > each y
    return float((below.sum() - above.sum()) / (x.size * y.size))


def cliffs_magnitude(delta: float | None) -> str | None:
    """Romano et al. (2006) label for |delta|."""
    if delta is None:
        return None
    size = abs(delta)
    for limit, label in CLIFF_THRESHOLDS:
        if size < limit:
            return label
    return "large"


def welch_p(baseline: np.ndarray, scenario: np.ndarray) -> float | None:
    """Two-sided Welch t-test p-value; None with fewer than 2 values or no spread in either sample."""
    x, y = _clean(baseline), _clean(scenario)
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        from scipy import stats as sps  # here, not at import: 1-2 s that a cell's analysis never needs

        result = sps.ttest_ind(y, x, equal_var=False)
    return _finite_or_none(result.pvalue)


def mannwhitney_p(baseline: np.ndarray, scenario: np.ndarray) -> float | None:
    """Two-sided Mann-Whitney U p-value; None with fewer than 2 values or when every value is tied."""
    x, y = _clean(baseline), _clean(scenario)
    if x.size < 2 or y.size < 2 or np.ptp(np.concatenate([x, y])) == 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        from scipy import stats as sps

        result = sps.mannwhitneyu(y, x, alternative="two-sided")
    return _finite_or_none(result.pvalue)


def bootstrap_deltas(baseline: np.ndarray, scenario: np.ndarray, *, resamples: int,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap distributions of (delta of means, delta of medians), scenario - baseline."""
    x, y = _clean(baseline), _clean(scenario)
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_VALUES // max(x.size + y.size, 1))
    d_mean = np.empty(resamples)
    d_median = np.empty(resamples)
    for start in range(0, resamples, block):
        count = min(block, resamples - start)
        xs = x[rng.integers(0, x.size, size=(count, x.size))]
        ys = y[rng.integers(0, y.size, size=(count, y.size))]
        d_mean[start:start + count] = ys.mean(axis=1) - xs.mean(axis=1)
        d_median[start:start + count] = np.median(ys, axis=1) - np.median(xs, axis=1)
    return d_mean, d_median


def _interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(draws, [tail, 100.0 - tail])
    return float(low), float(high)


def compare_samples(baseline: Sample, scenario: Sample, *,
            resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Comparison:
    """Compare ``scenario`` against ``baseline`` (NaN/inf values are dropped first).

    Deltas need one value on each side; CIs, p-values and Cliff's delta need two.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    x, y = _clean(baseline), _clean(scenario)
    mean_x = float(x.mean()) if x.size else None
    mean_y = float(y.mean()) if y.size else None
    med_x = float(np.median(x)) if x.size else None
    med_y = float(np.median(y)) if y.size else None
    d_mean = _delta(mean_x, mean_y)
    d_med = _delta(med_x, med_y)

    ci_mean: tuple[float | None, float | None] = (None, None)
    ci_med: tuple[float | None, float | None] = (None, None)
    cliff = None
    if x.size >= 2 and y.size >= 2:
        boot_mean, boot_med = bootstrap_deltas(x, y, resamples=resamples, seed=seed)
        ci_mean = _interval(boot_mean, CI_LEVEL)
        ci_med = _interval(boot_med, CI_LEVEL)
        cliff = cliffs_delta(x, y)

    return Comparison(
        n_baseline=int(x.size), n_scenario=int(y.size),
        mean_baseline=mean_x, mean_scenario=mean_y, delta_mean=d_mean, delta_mean_pct=_pct(d_mean, mean_x),
        ci_mean_low=ci_mean[0], ci_mean_high=ci_mean[1],
        median_baseline=med_x, median_scenario=med_y, delta_median=d_med, delta_median_pct=_pct(d_med, med_x),
        ci_median_low=ci_med[0], ci_median_high=ci_med[1],
        welch_p=welch_p(x, y), mannwhitney_p=mannwhitney_p(x, y),
        cliffs_delta=cliff, cliffs_magnitude=cliffs_magnitude(cliff),
        ci_level=CI_LEVEL, resamples=resamples, seed=seed,
    )


def repeat_spread(per_repeat: Sequence[float | None]) -> RepeatSpread | None:
    """Between-repeat spread of one value per repeat; None unless at least 2 repeats have a value."""
    values = _clean([v for v in per_repeat if v is not None])
    if values.size < 2:
        return None
    mean = float(values.mean())
    sd = float(values.std(ddof=1))
    return RepeatSpread(repeats=int(values.size), mean=mean, sd=sd, min=float(values.min()),
                        max=float(values.max()), cv_pct=100.0 * sd / abs(mean) if mean != 0 else None)
