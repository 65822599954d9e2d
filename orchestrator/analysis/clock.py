"""A board's clock against the lab's: offset, drift and a bound on their error.

The board runs NTP-style exchanges with the lab's time-echo service over its own network path
(firmware/platformio/lib/testbed_core/src/time_sync.h, orchestrator/clients/time_echo.py) once
before a cell and once after it. One exchange gives t1 (board sends), t2 (lab receives), t3 (lab
answers), t4 (board receives): t1, t4 on the board's wall clock, t2, t3 on the lab's, microseconds.

Definitions (docs/measurement-notes.md, "Board clock: offset, drift and their bound"):
- offset = ((t2 - t1) + (t3 - t4)) / 2: lab clock minus board clock, so lab = board + offset;
  it is the offset at the exchange's board midpoint (t1 + t4) / 2.
- round trip = (t4 - t1) - (t3 - t2): the time on the wire both ways, the lab's hold time removed.
- In each phase the exchange with the smallest round trip is used. Its bound is
  round trip / 2 + MAX_DRIFT_PPM x (t4 - t1) / 2 + 2 x RESOLUTION_US: whatever the split of the
  round trip between the two directions, the estimate is off by at most half of it; the second term
  covers the two clocks running at different rates during the exchange (at most MAX_DRIFT_PPM, checked
  against the measured drift), the third the microsecond truncation of the four timestamps.
- drift = (offset_post - offset_pre) / (midpoint_post - midpoint_pre), in ppm (positive: the board's
  clock runs slow against the lab's); its bound = (bound_pre + bound_post) / the same span.
- a board time b maps to lab time b + offset(b), offset linearly interpolated between the two anchors
  (extrapolated outside them); the bound there is |1 - w| x bound_pre + |w| x bound_post, with
  w = (b - midpoint_pre) / (midpoint_post - midpoint_pre). This assumes the rate difference is
  constant over the cell (a crystal at steady temperature, the board's SNTP no longer adjusting).

One-way delay is reported only when this bound is small against it (``one_way_delay_available``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.errors import TestbedError

# The largest rate difference between the board's clock and the lab's we allow for (ESP32 crystals
# are specified at +-10..40 ppm). A measured drift beyond it refuses the estimate.
MAX_DRIFT_PPM = 500.0
# Timestamp resolution of both ends (microsecond integers, truncated).
RESOLUTION_US = 1.0
# Exchanges a phase needs: with fewer, the smallest round trip is unlikely to be a quiet one.
MIN_SAMPLES = 4
# One-way delay is "available" when the clock bound is at most this fraction of its median.
DELAY_PRECISION_RATIO = 0.25


class ClockSyncError(TestbedError):
    """The clock exchanges cannot give an offset with a bound."""


class TooFewSamplesError(ClockSyncError):
    """A phase has fewer valid exchanges than it needs."""


@dataclass(frozen=True)
class TimeSample:
    t1_us: int  # board: request sent
    t2_us: int  # lab: request received
    t3_us: int  # lab: reply sent
    t4_us: int  # board: reply received

    @property
    def offset_us(self) -> float:
        return ((self.t2_us - self.t1_us) + (self.t3_us - self.t4_us)) / 2

    @property
    def rtt_us(self) -> int:
        return (self.t4_us - self.t1_us) - (self.t3_us - self.t2_us)

    @property
    def midpoint_us(self) -> float:
        return (self.t1_us + self.t4_us) / 2

    @property
    def bound_us(self) -> float:
        """The largest possible error of ``offset_us`` (module docstring)."""
        return self.rtt_us / 2 + MAX_DRIFT_PPM * 1e-6 * (self.t4_us - self.t1_us) / 2 + 2 * RESOLUTION_US


@dataclass(frozen=True)
class PhaseEstimate:
    """The offset of one phase (before or after a cell), from its smallest-round-trip exchange."""

    phase: str
    offset_us: float
    bound_us: float
    rtt_min_us: int
    at_board_us: float  # board time the offset holds at (the exchange's midpoint)
    n_samples: int


@dataclass(frozen=True)
class MappedTime:
    lab_us: float
    bound_us: float


@dataclass(frozen=True)
class ClockEstimate:
    pre: PhaseEstimate
    post: PhaseEstimate
    drift_ppm: float
    drift_bound_ppm: float

    @property
    def bound_us(self) -> float:
        """The widest bound between the two anchors (the bound of the cell's messages)."""
        return max(self.pre.bound_us, self.post.bound_us)

    def _weight(self, board_us: float) -> float:
        return (board_us - self.pre.at_board_us) / (self.post.at_board_us - self.pre.at_board_us)

    def to_lab(self, board_us: float) -> MappedTime:
        """Lab time of a board timestamp and the bound of that mapping."""
        w = self._weight(board_us)
        offset = (1 - w) * self.pre.offset_us + w * self.post.offset_us
        bound = abs(1 - w) * self.pre.bound_us + abs(w) * self.post.bound_us
        return MappedTime(board_us + offset, bound)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(bound_us=self.bound_us, max_drift_ppm_assumed=MAX_DRIFT_PPM)
        return out


def _check(sample: TimeSample, phase: str, index: int) -> None:
    if sample.t4_us < sample.t1_us or sample.t3_us < sample.t2_us:
        raise ClockSyncError(f"clock exchange {index} of the {phase} phase is impossible "
                             f"(t1={sample.t1_us} t2={sample.t2_us} t3={sample.t3_us} t4={sample.t4_us}): "
                             "a reply must not arrive before its request left, nor leave before it arrived")


def estimate_phase(samples: Iterable[TimeSample], phase: str, *, min_samples: int = MIN_SAMPLES) -> PhaseEstimate:
    """The offset of one phase from the exchange with the smallest round trip."""
    items = list(samples)
    if len(items) < min_samples:
        raise TooFewSamplesError(
            f"the {phase} clock exchange has {len(items)} valid sample(s), at least {min_samples} are needed",
            hint="check that the time-echo service is reachable from the board (UDP) and not lossy")
    for i, s in enumerate(items):
        _check(s, phase, i)
    best = min(items, key=lambda s: (s.rtt_us, s.t1_us))
    return PhaseEstimate(phase=phase, offset_us=best.offset_us, bound_us=best.bound_us, rtt_min_us=best.rtt_us,
                         at_board_us=best.midpoint_us, n_samples=len(items))


def estimate_clock(pre: Iterable[TimeSample], post: Iterable[TimeSample], *,
                   min_samples: int = MIN_SAMPLES) -> ClockEstimate:
    """Offset, drift and their bounds from the exchanges before and after a cell."""
    a = estimate_phase(pre, "pre", min_samples=min_samples)
    b = estimate_phase(post, "post", min_samples=min_samples)
    span = b.at_board_us - a.at_board_us
    if span <= 0:
        raise ClockSyncError(f"the post clock exchange (board time {b.at_board_us:.0f} us) is not after the pre "
                             f"one ({a.at_board_us:.0f} us): were the phases swapped or the board's clock stepped?")
    drift = (b.offset_us - a.offset_us) / span * 1e6
    drift_bound = (a.bound_us + b.bound_us) / span * 1e6
    if abs(drift) - drift_bound > MAX_DRIFT_PPM:
        raise ClockSyncError(f"the board's clock drifts {drift:+.1f} ppm (+-{drift_bound:.1f}) against the lab's, "
                             f"beyond the {MAX_DRIFT_PPM:.0f} ppm the bound allows for",
                             hint="a clock stepped between the phases (SNTP on the board?): stop SNTP before "
                                  "the pre exchange")
    return ClockEstimate(pre=a, post=b, drift_ppm=drift, drift_bound_ppm=drift_bound)


@dataclass(frozen=True)
class DelayVerdict:
    available: bool
    bound_us: float
    median_delay_us: float
    ratio_limit: float
    reason: str


def one_way_delay_available(bound_us: float, median_delay_us: float, *,
                            ratio: float = DELAY_PRECISION_RATIO) -> DelayVerdict:
    """Rule: one-way delay is available at the clock's precision when bound <= ratio x median delay
    (default: the clock can move the median by at most a quarter of itself). Otherwise the report says
    one-way delay is not available and gives the PUBACK round trip instead."""
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio}")
    limit = f"limit {ratio * 100:.0f} %"
    if not median_delay_us > 0:
        return DelayVerdict(False, bound_us, median_delay_us, ratio,
                            f"median one-way delay {median_delay_us / 1000:.3f} ms is not positive: the clocks "
                            f"disagree by more than the delay; one-way delay is not available")
    share = bound_us / median_delay_us
    verdict = f"clock bound +-{bound_us / 1000:.3f} ms is {share * 100:.0f} % of the median one-way delay " \
              f"{median_delay_us / 1000:.3f} ms ({limit})"
    if share <= ratio:
        return DelayVerdict(True, bound_us, median_delay_us, ratio, verdict)
    return DelayVerdict(False, bound_us, median_delay_us, ratio,
                        verdict + ": one-way delay is not available at that precision; see the PUBACK round trip")
