"""Statistics of the Fashion-MNIST evidence protocols (studies/evidence/ROUND2_PROTOCOL.md and,
for round 3's primary family and readout, studies/evidence/PROTOCOL.md), with scipy.stats.

Everything here is pure NumPy/SciPy on lists of numbers, so the verdict rules are unit-tested
on hand-made deltas (studies/tests/test_evidence_stats.py). Accuracies are in percentage points (pp)
wherever a margin is involved.

Primary endpoint: the paired deltas ``d_i = VR_i - base_i`` (same seed: same initial weights
and data order) of the test accuracy at batch 4096, each side at its tuned rate.
:func:`paired_summary` gives the mean, the 95 % t interval (``scipy.stats.t``), the 95 %
percentile bootstrap interval over the pairs (``scipy.stats.bootstrap``, 10,000 resamples,
fixed seed) and the two one-sided tests (TOST) against the +-1 pp equivalence margin;
:func:`verdict` applies the pre-registered words to the t interval.
"""

import math
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy import stats

__all__ = [
    "run_key",
    "tune_grid",
    "MARGIN_PP",
    "VERDICTS",
    "paired_summary",
    "verdict",
    "holm",
    "collapse_test",
    "lr_window_width",
    "contiguous_lr_window",
    "steps_to_target",
    "gap_at_loss",
    "CONTRAST_WORDS",
    "READOUTS",
    "contrast_words",
    "primary_family",
    "readout",
    "pairs_for_half_width",
]

#: Equivalence margin of the primary endpoint, in percentage points.
MARGIN_PP = 1.0
#: The verdict words of the protocol, in the order the rules are applied.
VERDICTS = ("VR better", "equivalent", "worse", "inconclusive")


def verdict(mean: float, ci_low: float, ci_high: float, margin: float = MARGIN_PP) -> str:
    """The protocol's verdict for a paired delta (pp), its rules applied in order:

    1. "VR better": the CI is above 0 (``ci_low > 0``) and ``mean >= +margin``;
    2. "equivalent": the CI lies inside the margin (``-margin < ci_low`` and
       ``ci_high < +margin``);
    3. "worse": the CI is below 0 (``ci_high < 0``);
    4. otherwise "inconclusive".

    A CI inside the margin but also below 0 is "equivalent" (rule 2 comes first): a loss
    smaller than the margin is, by the protocol, not a practical difference.

    Args:
      mean, ci_low, ci_high: floats in pp; NaN gives "inconclusive".
      margin: float > 0, pp.

    Returns:
      One of :data:`VERDICTS`.
    """
    if not all(math.isfinite(v) for v in (mean, ci_low, ci_high)):
        return "inconclusive"
    if ci_low > 0.0 and mean >= margin:
        return "VR better"
    if -margin < ci_low and ci_high < margin:
        return "equivalent"
    if ci_high < 0.0:
        return "worse"
    return "inconclusive"


def paired_summary(
    deltas: Sequence[float],
    *,
    confidence: float = 0.95,
    margin: float = MARGIN_PP,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> Dict[str, object]:
    """Mean, t and bootstrap CIs, TOST and verdict of paired deltas (pp).

    Args:
      deltas: the paired differences VR - base, pp; at least 2 finite values.
      confidence: two-sided level of the intervals.
      margin: equivalence margin (pp) of the TOST and the verdict.
      n_resamples: bootstrap resamples (percentile method over the pairs).
      seed: seed of the bootstrap's generator.

    Returns:
      dict with ``n``, ``mean``, ``sd``, ``t_ci`` ``[low, high]``, ``boot_ci``, ``p_t``
      (two-sided one-sample t-test against 0), ``p_tost`` (the larger of the two one-sided
      p-values against -margin and +margin; < 0.05 = equivalent at 5 %), ``verdict`` (from
      the t interval, :func:`verdict`) and ``verdict_boot`` (same rules, bootstrap interval).

    Raises:
      ValueError: fewer than 2 deltas or a non-finite one.
    """
    d = np.asarray(list(deltas), np.float64)
    if d.size < 2 or not np.all(np.isfinite(d)):
        raise ValueError(f"`deltas` must hold >= 2 finite values; got {d.tolist()}.")
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    if se > 0:
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
        p_t = float(stats.ttest_1samp(d, 0.0).pvalue)
        p_low = float(stats.ttest_1samp(d, -margin, alternative="greater").pvalue)
        p_high = float(stats.ttest_1samp(d, margin, alternative="less").pvalue)
        boot = stats.bootstrap(
            (d,),
            np.mean,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
        ).confidence_interval
        boot_ci = [float(boot.low), float(boot.high)]
    else:  # every delta equal: the interval is the point
        half = 0.0
        p_t = 1.0 if mean == 0 else 0.0
        p_low = 0.0 if mean > -margin else 1.0
        p_high = 0.0 if mean < margin else 1.0
        boot_ci = [mean, mean]
    t_ci = [mean - half, mean + half]
    return {
        "n": int(n),
        "mean": mean,
        "sd": sd,
        "t_ci": t_ci,
        "boot_ci": boot_ci,
        "p_t": p_t,
        "p_tost": max(p_low, p_high),
        "verdict": verdict(mean, *t_ci, margin=margin),
        "verdict_boot": verdict(mean, *boot_ci, margin=margin),
    }


def holm(pvalues: Sequence[Optional[float]]) -> List[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    A missing p-value (None or NaN: an endpoint without a test or without data) counts as 1,
    so the family size stays ``len(pvalues)`` (conservative).

    Args:
      pvalues: floats in [0, 1] or None.

    Returns:
      The adjusted p-values, monotone in the sorted order, capped at 1.
    """
    p = np.array([1.0 if v is None or not math.isfinite(v) else float(v) for v in pvalues])
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def collapse_test(base_acc: Sequence[float], vr_acc: Sequence[float], threshold: float = 20.0):
    """Collapse (final test accuracy < ``threshold`` %) on each side, paired by seed.

    Exact McNemar test: a two-sided binomial test (``scipy.stats.binomtest``, p = 1/2) on
    the discordant pairs (one side collapsed, the other not); p = 1 without any.

    Returns:
      dict ``base_rate``, ``vr_rate`` (fractions), ``n``, ``discordant`` ``[base only, VR
      only]``, ``p``.
    """
    b = np.asarray(base_acc, np.float64) < threshold
    v = np.asarray(vr_acc, np.float64) < threshold
    if b.size != v.size or b.size == 0:
        raise ValueError("collapse_test needs two equally long, non-empty lists.")
    base_only, vr_only = int(np.sum(b & ~v)), int(np.sum(v & ~b))
    n_disc = base_only + vr_only
    p = 1.0 if n_disc == 0 else float(stats.binomtest(vr_only, n_disc, 0.5).pvalue)
    return {
        "base_rate": float(b.mean()),
        "vr_rate": float(v.mean()),
        "n": int(b.size),
        "discordant": [base_only, vr_only],
        "p": p,
    }


def lr_window_width(rates: Sequence[float], accs: Sequence[float], within: float = MARGIN_PP):
    """Width of the learning-rate window within ``within`` pp of the best accuracy.

    Args:
      rates: the grid's learning rates (any order, > 0).
      accs: mean validation accuracy (%) at each rate.
      within: pp below the best that still counts.

    Returns:
      dict ``best_lr``, ``best_acc``, ``count`` (grid points in the window), ``log2_width``
      (``log2(max / min)`` of the rates in the window; 0 for one point).
    """
    r = np.asarray(rates, np.float64)
    a = np.asarray(accs, np.float64)
    ok = np.isfinite(a)
    if not ok.any():
        return {"best_lr": None, "best_acc": None, "count": 0, "log2_width": 0.0}
    best = int(np.nanargmax(np.where(ok, a, -np.inf)))
    inside = ok & (a >= a[best] - within)
    return {
        "best_lr": float(r[best]),
        "best_acc": float(a[best]),
        "count": int(inside.sum()),
        "log2_width": float(np.log2(r[inside].max() / r[inside].min())),
    }


def contiguous_lr_window(rates: Sequence[float], accs: Sequence[float], within: float = MARGIN_PP):
    """The learning-rate window on a contiguous definition: the best rate and its neighbours
    in the grid, outward on each side until a rate falls more than ``within`` pp below the
    best (the evidence review's definition; :func:`lr_window_width` counts every rate within
    ``within``, adjacent or not).

    Args:
      rates: the grid's learning rates (any order, > 0).
      accs: mean validation accuracy (%) at each rate; a NaN ends the window.
      within: pp below the best that still counts.

    Returns:
      dict ``best_lr``, ``best_acc``, ``low``, ``high`` (the window's lowest and highest
      rate), ``count`` (grid points in it) and ``log2_width`` (``log2(high / low)``); the
      rates are None and ``count`` 0 where no accuracy is finite.
    """
    order = np.argsort(np.asarray(rates, np.float64))
    r = np.asarray(rates, np.float64)[order]
    a = np.asarray(accs, np.float64)[order]
    ok = np.isfinite(a)
    if not ok.any():
        return {
            "best_lr": None,
            "best_acc": None,
            "low": None,
            "high": None,
            "count": 0,
            "log2_width": 0.0,
        }
    best = int(np.argmax(np.where(ok, a, -np.inf)))
    inside = ok & (a >= a[best] - within)
    lo = hi = best
    while lo > 0 and inside[lo - 1]:
        lo -= 1
    while hi < len(r) - 1 and inside[hi + 1]:
        hi += 1
    return {
        "best_lr": float(r[best]),
        "best_acc": float(a[best]),
        "low": float(r[lo]),
        "high": float(r[hi]),
        "count": hi - lo + 1,
        "log2_width": float(np.log2(r[hi] / r[lo])),
    }


def steps_to_target(steps: Sequence[int], accs: Sequence[float], target: float):
    """First step at which ``accs`` (the curve, same length as ``steps``) reaches
    ``target``; None if never."""
    for s, a in zip(steps, accs):
        if a is not None and math.isfinite(a) and a >= target:
            return int(s)
    return None


def gap_at_loss(train_loss: Sequence[float], gap: Sequence[float], loss: float):
    """The generalization gap at training loss ``loss``, linearly interpolated along a run's
    curve (points in training order); None if the run never got down to ``loss``.

    The first crossing is used: the first point with ``train_loss <= loss`` and its
    predecessor.
    """
    tl = [float(v) for v in train_loss]
    for i, v in enumerate(tl):
        if math.isfinite(v) and v <= loss:
            if i == 0 or not math.isfinite(tl[i - 1]) or tl[i - 1] == v:
                return float(gap[i])
            w = (tl[i - 1] - loss) / (tl[i - 1] - v)
            return float(gap[i - 1] + w * (gap[i] - gap[i - 1]))
    return None


# --------------------------------------------------------------------------------------------
# Round 3 (studies/evidence/PROTOCOL.md, section 5): Holm over the two primary contrasts
# --------------------------------------------------------------------------------------------

#: The words of a round-3 contrast, in the order the rules are applied.
CONTRAST_WORDS = ("better", "equivalent", "worse", "inconclusive")
#: The registered readouts of round 3.
READOUTS = (
    "the GSNR weighting helps",
    "VRGD helps only through its step size",
    "no benefit at a finely tuned base",
    "inconclusive",
)


def contrast_words(
    mean: float, p_t_holm: float, p_tost_holm: float, margin: float = MARGIN_PP
) -> str:
    """A round-3 primary contrast's words, the registered rules in order:

    1. "better": Holm-adjusted two-sided t-test p < 0.05 and ``mean >= +margin``;
    2. "equivalent": Holm-adjusted TOST p < 0.025 (round 2's 95 % CI inside the margin);
    3. "worse": Holm-adjusted t-test p < 0.05 and ``mean < 0``;
    4. otherwise "inconclusive".

    Args:
      mean: the mean paired delta, pp (NaN gives "inconclusive").
      p_t_holm, p_tost_holm: the Holm-adjusted p-values in [0, 1].
      margin: pp.

    Returns:
      One of :data:`CONTRAST_WORDS`.
    """
    if not all(math.isfinite(v) for v in (mean, p_t_holm, p_tost_holm)):
        return "inconclusive"
    if p_t_holm < 0.05 and mean >= margin:
        return "better"
    if p_tost_holm < 0.025:
        return "equivalent"
    if p_t_holm < 0.05 and mean < 0.0:
        return "worse"
    return "inconclusive"


def primary_family(deltas_by_contrast: Dict[str, Sequence[float]]) -> Dict[str, Dict]:
    """The round-3 primary family: :func:`paired_summary` of each contrast's deltas with
    Holm-adjusted t-test and TOST p-values (Holm over the family, separately for the two
    tests) and its words (:func:`contrast_words`).

    Args:
      deltas_by_contrast: ``{name: paired deltas (pp)}``, the family (two contrasts).

    Returns:
      ``{name: summary}``: :func:`paired_summary`'s dict plus ``p_t_holm``,
      ``p_tost_holm`` and ``words``.
    """
    names = list(deltas_by_contrast)
    out = {n: paired_summary(deltas_by_contrast[n]) for n in names}
    p_t = holm([out[n]["p_t"] for n in names])
    p_tost = holm([out[n]["p_tost"] for n in names])
    for n, a, b in zip(names, p_t, p_tost):
        out[n].update(p_t_holm=a, p_tost_holm=b, words=contrast_words(out[n]["mean"], a, b))
    return out


def readout(vr_vs_base: str, vr_vs_scalar: str) -> str:
    """The registered readout from the words of VR - base and VR - scalar-VR (first
    match): both "better": the GSNR weighting helps; VR - base "better" and VR - scalar-VR
    "equivalent": VRGD helps only through its step size; VR - base "equivalent": no benefit
    at a finely tuned base; otherwise inconclusive. Returns one of :data:`READOUTS`."""
    if vr_vs_base == "better" and vr_vs_scalar == "better":
        return READOUTS[0]
    if vr_vs_base == "better" and vr_vs_scalar == "equivalent":
        return READOUTS[1]
    if vr_vs_base == "equivalent":
        return READOUTS[2]
    return READOUTS[3]


def pairs_for_half_width(sd: float, half_width: float = MARGIN_PP, confidence: float = 0.95):
    """Smallest n whose t interval of a mean of paired deltas with standard deviation ``sd``
    has half width <= ``half_width``: ``t_{(1+c)/2, n-1} sd / sqrt(n)``; None if ``sd`` is
    not finite."""
    if not (math.isfinite(sd) and sd >= 0 and half_width > 0):
        return None
    n = 2
    while stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n) > half_width:
        n += 1
    return n


# --------------------------------------------------------------------------------------------
# Tuning grid (protocol: 6 rates spaced x2; a best rate at an edge extends both sides' grid)
# --------------------------------------------------------------------------------------------


def run_key(pair: str, side: str, batch: int, lr: float, seed: int) -> str:
    """The key of one run in a phase JSON's ``runs``, e.g. ``momentum/vr/b256/lr0.05/s1000``."""
    return f"{pair}/{side}/b{batch}/lr{lr:.6g}/s{seed}"


def _grid(center, exponents):
    return [float(f"{center * 2.0**e:.6g}") for e in exponents]


def _mean_val(runs, pair, side, batch, lr, seeds):
    """Mean final validation accuracy over ``seeds`` (a non-finite one counts 0), or None
    while a run is missing."""
    vals = []
    for s in seeds:
        r = runs.get(run_key(pair, side, batch, lr, s))
        if r is None:
            return None
        v = r["final"]["val_acc"]
        vals.append(v if math.isfinite(v) else 0.0)
    return sum(vals) / len(vals)


def tune_grid(runs, pair, batch, center, seeds, *, exponents=range(-2, 4), max_extensions=3):
    """The grid of (pair, batch) after the edge extensions the finished runs call for, and
    each side's best rate.

    Args:
      runs: ``{run_key: {"final": {"val_acc": float}}}`` of the finished tuning runs.
      pair, batch: which grid.
      center: float > 0; the grid is ``center * 2**e`` for ``e`` in ``exponents``.
      seeds: the tuning seeds; a rate's score is its mean validation accuracy over them.
      exponents: ints, increasing.
      max_extensions: int >= 0, how often a best rate at an edge may extend the grid (by
        one rate on that side, for both sides of the comparison).

    Returns:
      ``(rates, chosen)``: the grid's rates, and ``{"base": lr, "vr": lr}``, or None while a
      run of the grid is missing.
    """
    exps = [int(e) for e in exponents]
    for attempt in range(max_extensions + 1):
        rates = _grid(center, exps)
        best = {}
        for side in ("base", "vr"):
            means = [_mean_val(runs, pair, side, batch, lr, seeds) for lr in rates]
            if any(m is None for m in means):
                return rates, None
            best[side] = max(range(len(rates)), key=lambda i: means[i])
        chosen = {side: rates[i] for side, i in best.items()}
        if attempt == max_extensions:
            return rates, chosen
        low = any(b == 0 for b in best.values())
        high = any(b == len(rates) - 1 for b in best.values())
        if not (low or high):
            return rates, chosen
        exps = ([exps[0] - 1] if low else []) + exps + ([exps[-1] + 1] if high else [])
