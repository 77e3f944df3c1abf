"""The statistics of round 4's registered endpoints (studies/evidence/PROTOCOL4.md, section 5),
on lists of numbers: pure NumPy/SciPy, unit-tested on hand-made cases
(studies/tests/test_stats4.py). The summaries, Holm and the exact collapse test are round 3's
(``evidence_stats``), reused; what round 4 changes is here:

- E1: the margin is ±0.5 pp and "better" needs no "mean at least the margin" clause
  (:func:`e1_words`, :func:`e1_family`); the Wilcoxon signed-rank p and the Hodges-Lehmann
  estimate with its 95 % CI as sensitivity analyses (:func:`hodges_lehmann`);
- the readout in a user's words (:func:`readout`);
- E2: epochs to a target, censored at the budget (:func:`epochs_to_target`), compared as
  ``log2`` ratios with a 1.25x smallest effect (:func:`e2_words`, :func:`e2_family`).
"""

import math
from typing import Dict, Optional, Sequence

import evidence_stats as es
import numpy as np
from scipy import stats

#: E1's equivalence margin, pp.
MARGIN_PP = 0.5
#: E2's smallest speed-up of interest.
SPEEDUP = 1.25
#: The words of an E1 contrast and of an E2 contrast, in the order the rules apply.
E1_WORDS = ("better", "equivalent", "worse", "inconclusive")
E2_WORDS = ("faster", "no speed-up", "slower", "inconclusive")
#: The registered readouts (from E1's two contrasts), in a user's words.
READOUTS = (
    "helps",
    "helps only through its step size",
    "no benefit",
    "costs accuracy",
    "inconclusive",
)


def e1_words(mean: float, p_t_holm: float, p_tost_holm: float) -> str:
    """An E1 contrast's words, first match: "better" (Holm t-test p < 0.05 and mean > 0),
    "equivalent" (Holm TOST p < 0.025, ±0.5 pp), "worse" (Holm t-test p < 0.05 and
    mean < 0), else "inconclusive" (also for a NaN)."""
    # Round 3's rules (evidence_stats.contrast_words) with "mean >= margin" for "better"
    # replaced by "mean > 0": the least positive float as that margin.
    return es.contrast_words(mean, p_t_holm, p_tost_holm, margin=math.nextafter(0.0, 1.0))


def hodges_lehmann(deltas: Sequence[float], confidence: float = 0.95) -> Dict[str, float]:
    """The Hodges-Lehmann estimate of paired deltas (the median of the Walsh averages
    ``(d_i + d_j) / 2``, ``i <= j``) and its distribution-free CI from the exact null
    distribution of the signed-rank statistic: ``[W_(c), W_(M + 1 - c)]`` of the ``M = n(n+1)/2``
    sorted Walsh averages, ``c - 1`` the largest ``t`` with ``P(T+ <= t) <= (1 - confidence)
    / 2`` (the attained level is at least ``confidence``); the Wilcoxon signed-rank p
    (``scipy.stats.wilcoxon``, two-sided, its defaults: zero deltas are dropped from the
    test, not from the interval; 1.0 when every delta is 0). The deltas are rounded to 9
    decimals first, so that differences of accuracies recorded to 0.01 pp tie as they
    should instead of by their float rounding error.

    Returns:
      dict ``estimate``, ``ci`` ``[low, high]``, ``p_wilcoxon``.

    Raises:
      ValueError: fewer than 6 deltas (no 95 % interval exists) or a non-finite one.
    """
    d = np.round(np.asarray(list(deltas), np.float64), 9)
    n = d.size
    if n < 6 or not np.all(np.isfinite(d)):
        raise ValueError(f"`deltas` must hold >= 6 finite values; got {d.tolist()}.")
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2.0)
    counts = np.zeros(n * (n + 1) // 2 + 1)  # subsets of {1..n} by the sum of their ranks
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    cdf = np.cumsum(counts) / 2.0**n
    c = int(np.sum(cdf <= (1.0 - confidence) / 2.0))  # t = 0 .. c - 1 have P(T+ <= t) <= alpha / 2
    p = 1.0 if not np.any(d) else float(stats.wilcoxon(d).pvalue)
    return {
        "estimate": float(np.median(walsh)),
        "ci": [float(walsh[c - 1]), float(walsh[walsh.size - c])],
        "p_wilcoxon": p,
    }


def e1_family(deltas_by_contrast: Dict[str, Sequence[float]]) -> Dict[str, Dict]:
    """E1: each contrast's ``evidence_stats.paired_summary`` at the ±0.5 pp margin, the
    t-test and TOST p-values Holm-adjusted over the family (separately), the words
    (:func:`e1_words`) and the sensitivity analyses (:func:`hodges_lehmann`, keys ``hl``,
    ``hl_ci``, ``p_wilcoxon``). ``{name: paired deltas (pp)}`` -> ``{name: summary}``."""
    names = list(deltas_by_contrast)
    out = {n: es.paired_summary(deltas_by_contrast[n], margin=MARGIN_PP) for n in names}
    p_t = es.holm([out[n]["p_t"] for n in names])
    p_tost = es.holm([out[n]["p_tost"] for n in names])
    for n, a, b in zip(names, p_t, p_tost):
        hl = hodges_lehmann(deltas_by_contrast[n])
        out[n].update(
            p_t_holm=a,
            p_tost_holm=b,
            words=e1_words(out[n]["mean"], a, b),
            hl=hl["estimate"],
            hl_ci=hl["ci"],
            p_wilcoxon=hl["p_wilcoxon"],
        )
    return out


def readout(vr_vs_base: str, vr_vs_scalar: str) -> str:
    """The registered readout from E1's words (first match): both "better": helps; VR − base
    "better", VR − scalar-VR not: helps only through its step size; VR − base "equivalent":
    no benefit; VR − base "worse": costs accuracy; else inconclusive."""
    if vr_vs_base == "better":
        return READOUTS[0] if vr_vs_scalar == "better" else READOUTS[1]
    return {"equivalent": READOUTS[2], "worse": READOUTS[3]}.get(vr_vs_base, READOUTS[4])


def epochs_to_target(val_accs: Sequence[Optional[float]], target: float, epochs: int) -> int:
    """E2 per run: the first epoch (1-based) whose validation accuracy reaches ``target``
    (%), or ``epochs + 1`` (censored at the budget) when none of the ``epochs`` does."""
    for e, a in enumerate(list(val_accs)[:epochs], start=1):
        if a is not None and math.isfinite(a) and a >= target:
            return e
    return epochs + 1


def e2_words(mean_log2: float, ci: Sequence[float], p_holm: float) -> str:
    """An E2 contrast's words from the mean ``log2(E_other / E_VR)`` (> 0: VR reaches the
    target sooner), its 95 % t CI and the Holm-adjusted t-test p, in the registered order:
    "faster" (p < 0.05 and the geometric mean ratio ``2**mean >= 1.25``), "no speed-up"
    (the CI inside ±log2(1.25)), "slower" (p < 0.05 and the ratio < 1), else
    "inconclusive" (also for a NaN)."""
    lo, hi = ci
    if not all(math.isfinite(v) for v in (mean_log2, lo, hi, p_holm)):
        return "inconclusive"
    if p_holm < 0.05 and 2.0**mean_log2 >= SPEEDUP:
        return "faster"
    bound = math.log2(SPEEDUP)
    if -bound < lo and hi < bound:
        return "no speed-up"
    if p_holm < 0.05 and mean_log2 < 0.0:
        return "slower"
    return "inconclusive"


def e2_family(epochs_by_arm: Dict[str, Sequence[int]], contrasts) -> Dict[str, Dict]:
    """E2: for each ``(a, b)`` of ``contrasts`` the paired ``log2(E_b / E_a)`` (> 0: ``a``
    sooner), ``evidence_stats.paired_summary``'s mean, t CI and t-test p, Holm over the
    family, the geometric mean ratio ``ratio`` and the words (:func:`e2_words`).

    Args:
      epochs_by_arm: ``{arm: [epochs to target per seed, the same seed order]}``.
      contrasts: ``[(a, b)]``, e.g. ``[("vr", "base"), ("vr", "scalar_vr")]``.

    Returns:
      ``{"a-b": summary}``.
    """
    out = {}
    for a, b in contrasts:
        x = np.log2(np.asarray(epochs_by_arm[b], np.float64) / np.asarray(epochs_by_arm[a]))
        out[f"{a}-{b}"] = es.paired_summary(x.tolist(), margin=math.log2(SPEEDUP))
    names = list(out)
    for n, p in zip(names, es.holm([out[n]["p_t"] for n in names])):
        s = out[n]
        s.update(p_t_holm=p, ratio=2.0 ** s["mean"], words=e2_words(s["mean"], s["t_ci"], p))
    return out
