"""Helpers shared by the sweeps' report sections: loading, formatting, statistics, run
selection.

Nothing here writes Markdown; the section modules do (see ``report/sweeps/__init__.py``).
"""

import dataclasses
import math
import os

import numpy as np
from shared import PAIR_LABEL, ReportContext, load_average  # noqa: F401  (PAIR_LABEL: the sections')
from shared import load_json as load  # noqa: F401  (the sections' name for it)

STUDIES = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO = os.path.dirname(STUDIES)
RESULTS = os.path.join(STUDIES, "sweeps", "results")

VR_LABEL = {"momentum": "VR-Momentum", "adam": "VR-Adam", "lamb": "VR-LAMB", "lars": "VR-LARS"}


@dataclasses.dataclass
class Context(ReportContext):
    """What one rendering of the sweeps' block shares between its sections: the fields of
    ``studies/shared.py``'s ``ReportContext`` (results from ``studies/sweeps/results``), and

    Attributes:
      headline, bert_headline: filled by the sweep and BERT sections for the block's
        summary.
    """

    RESULTS = RESULTS

    headline: list = dataclasses.field(default_factory=list)
    bert_headline: list = dataclasses.field(default_factory=list)


def pct(x, digits=2):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}"


def pm(values, digits=2):
    """'mean ± std' in percent."""
    if not values:
        return "—"
    v = np.asarray(values, np.float64)
    sd = v.std(ddof=1) if v.size > 1 else 0.0
    return f"{100 * v.mean():.{digits}f} ± {100 * sd:.{digits}f}"


def verdict(diffs, higher_is_better=True):
    """Paired differences -> 'better' / 'worse' / 'n.s.' / 'n/a'.

    Two-sided paired t-test at 5%: |mean| > t(0.975, n-1) * std / sqrt(n); needs n >= 3
    (with n = 2 a single lucky seed decides). Zero spread with a non-zero mean counts as a
    difference.
    """
    from scipy import stats

    d = np.asarray(diffs, np.float64)
    if d.size < 3:
        return f"n/a ({d.size} seeds)"
    se = d.std(ddof=1) / math.sqrt(d.size)
    m = d.mean()
    if m == 0 or abs(m) <= stats.t.ppf(0.975, d.size - 1) * se:
        return "n.s."
    good = m > 0 if higher_is_better else m < 0
    return "**better**" if good else "**worse**"


def main_runs(sweep):
    return [r for r in sweep["runs"] if r["key"][0] == "main"]


def select(runs, **kw):
    out = []
    for r in runs:
        if all(r.get(k) == v for k, v in kw.items()):
            out.append(r)
    return sorted(out, key=lambda r: r["seed"])


def select_side(runs, cfg, dataset, pair, side, batch):
    """The runs of the batch-size sweep proper: ``cfg["replicas"]`` replicas, and for
    ``side == "vr"`` the paper's gamma 0.1 (the ablations add other k and gamma), by seed."""
    kw = dict(dataset=dataset, pair=pair, side=side, batch=batch, replicas=cfg["replicas"])
    if side == "vr":
        kw["gamma"] = 0.1
    return select(runs, **kw)


def paired(base, vr):
    """Runs of the same seeds on both sides."""
    b = {r["seed"]: r for r in base}
    v = {r["seed"]: r for r in vr}
    seeds = sorted(set(b) & set(v))
    return [b[s] for s in seeds], [v[s] for s in seeds]


def mean_curve(runs):
    """(steps, mean test acc) over seeds; curves share their eval steps."""
    if not runs:
        return [], []
    n = min(len(r["curve"]) for r in runs)
    steps = [runs[0]["curve"][i]["step"] for i in range(n)]
    acc = [float(np.mean([r["curve"][i]["test_acc"] for r in runs])) for i in range(n)]
    return steps, acc


def first_reach(steps, acc, target):
    for s, a in zip(steps, acc):
        if a >= target - 1e-12:
            return s
    return None


def n_div(runs):
    return sum(1 for r in runs if r["final"]["diverged"] or r["final"]["train_acc"] < 0.15)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "figure.dpi": 110})
    return plt
