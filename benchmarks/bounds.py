"""Regression bounds that a cost benchmark checks at the end of its run (not a test: nothing in
the test suite times anything).

A benchmark registers its bounds next to its code, a tuple of :class:`Bound` (a metric, the
cases it applies to, the largest value allowed and where that limit comes from), turns its
results into :class:`Measurement` records and calls :func:`check`, which prints one line per
bounded measurement::

    PASS gsnr_passes [jit_compile=True]: 18.20 <= 24 (issue 19: ...)

and returns the verdicts for the results JSON (``doc["bounds"]``); the benchmark ends with
:func:`exit_status`: 1 if a bound failed, else 0. The limits are for the full configuration
of the benchmark; a ``--quick`` run (other sizes, fewer repetitions) prints its checks as
informative and exits 0. A measurement no bound applies to is not printed; a non-finite value
fails its bound.
"""

import math
from typing import Iterable, List, Mapping, NamedTuple, Sequence


class Bound(NamedTuple):
    """The largest value a measured metric may take.

    Attributes:
      metric: name of the measured quantity (a :class:`Measurement`'s ``metric``).
      limit: float, the measurement must be <= it.
      why: where the limit comes from (an issue's target, a recorded run plus a margin).
      where: case labels the bound applies to (``{"model": "bert_tiny"}``); every label must
        equal the measurement's. Empty: every case of the metric.
    """

    metric: str
    limit: float
    why: str
    where: Mapping[str, object] = {}


class Measurement(NamedTuple):
    """One measured value: its metric, the case it was measured in (labels such as model,
    batch, mode) and the value (a ratio or a count, never a time in seconds)."""

    metric: str
    case: Mapping[str, object]
    value: float


class Verdict(NamedTuple):
    """A measurement checked against one bound."""

    metric: str
    case: Mapping[str, object]
    value: float
    limit: float
    why: str
    passed: bool


def applies(bound: Bound, measurement: Measurement) -> bool:
    """Whether ``bound`` bounds ``measurement`` (same metric, every ``where`` label equal)."""
    return bound.metric == measurement.metric and all(
        measurement.case.get(key) == value for key, value in bound.where.items()
    )


def evaluate(bounds: Sequence[Bound], measurements: Iterable[Measurement]) -> List[Verdict]:
    """One :class:`Verdict` per (measurement, bound that applies to it), in measurement
    order; passed = the value is finite and <= the limit."""
    out = []
    for m in measurements:
        for b in bounds:
            if applies(b, m):
                ok = math.isfinite(m.value) and m.value <= b.limit
                out.append(Verdict(m.metric, dict(m.case), float(m.value), b.limit, b.why, ok))
    return out


def format_verdict(v: Verdict) -> str:
    """``PASS metric [k=v, ...]: value <= limit (why)`` (``FAIL ... > limit``)."""
    case = ", ".join(f"{k}={val}" for k, val in v.case.items())
    sign = "<=" if v.passed else ">"
    return (
        f"{'PASS' if v.passed else 'FAIL'} {v.metric} [{case}]: {v.value:.3f} {sign} "
        f"{v.limit:g} ({v.why})"
    )


def check(bounds: Sequence[Bound], measurements: Iterable[Measurement], enforce: bool, log=print):
    """Checks the bounds and prints one line per verdict.

    Args:
      bounds: the benchmark's registered bounds.
      measurements: its results as :class:`Measurement` records.
      enforce: False for a ``--quick`` run: the lines are printed as informative and
        :func:`exit_status` is 0 whatever they say.
      log: where the lines go.

    Returns:
      ``{"enforced", "passed", "verdicts": [...]}``, for the results JSON.
    """
    verdicts = evaluate(bounds, measurements)
    mode = "enforced" if enforce else "informative only (--quick: not the bounds' configuration)"
    log(f"Regression bounds (benchmarks/bounds.py), {len(verdicts)} checked, {mode}:")
    for v in verdicts:
        log("  " + format_verdict(v))
    if not verdicts:
        log("  no bounded measurement in this configuration")
    return {
        "enforced": enforce,
        "passed": all(v.passed for v in verdicts),
        "verdicts": [v._asdict() for v in verdicts],
    }


def exit_status(record: dict) -> int:
    """The exit status of a benchmark whose bounds gave ``record``: 1 if they were enforced
    and one failed, else 0."""
    return int(record["enforced"] and not record["passed"])


def above_recorded(metric: str, recorded: float, run: str, where=None, rel: float = 0.1) -> Bound:
    """A bound ``rel`` above the largest value a recorded full run measured: the limit is
    ``round(recorded * (1 + rel), 2)`` (10 % by default, for load on the shared cores), and
    ``run`` says which run (its section of docs/results.md)."""
    return Bound(
        metric,
        round(recorded * (1 + rel), 2),
        f"largest recorded {recorded:g} ({run}) + {100 * rel:g} %",
        dict(where or {}),
    )
