"""The "is the GSNR informative here?" section of docs/results.md: the split-half reliability
of the GSNR on the round-3 setting and on the digits demo, from
``studies/evidence/results/round3/reliability.json`` (``studies/evidence/reliability.py``;
a diagnostic outside the registered protocol).

Per run: for each variable, the epochs split into thirds (early, mid, late), the mean over
a third's epochs of the recorded Spearman-Brown reliability (and of the halves' correlation
rho) where defined, next to the mean factor; the median over variables per epoch (the
library's headline ``vrgd/median/reliability``) in the same thirds; one plot of the
reliability per epoch.
"""

import json
import os

import numpy as np

FILE = "reliability.json"
PLOT = "round3_reliability.png"
PAIR_LABEL = {"momentum": "VR-Momentum (VRGDSGD, momentum 0.9)", "lamb": "VR-LAMB (VRGDLamb)"}
DEMO_LABEL = {"vrgd_lamb": "VR-LAMB", "vrgd_lars": "VR-LARS"}
BUCKETS = ("early", "mid", "late")
LAYOUT_LABEL = {"replicas": "8 replicas x 1 group", "groups": "1 device x 8 groups"}
HEADING = (
    "### Is the GSNR informative here? Split-half reliability on the study's runs "
    "(a diagnostic outside the registered protocol)"
)


def load(results_dir):
    path = os.path.join(results_dir, FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def thirds(n):
    """``[(label, start, stop)]``: ``range(n)`` cut into three near-equal consecutive parts
    (fewer when ``n < 3``)."""
    cuts = [round(i * n / 3) for i in range(4)]
    return [(b, lo, hi) for b, lo, hi in zip(BUCKETS, cuts[:-1], cuts[1:]) if hi > lo]


def _mean(values):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def variable_series(run, name, field):
    """Per epoch the recorded ``field`` of variable ``name`` (None where the reliability is
    not defined, for the reliability fields)."""
    out = []
    for d in run["diagnostics"]:
        row = d["stats"][name]
        defined = bool(row.get("reliability_defined"))
        out.append(row[field] if defined or not field.startswith("reliability") else None)
    return out


def median_series(run):
    """Per epoch the median over variables of the defined reliabilities (None if none)."""
    out = []
    for d in run["diagnostics"]:
        vals = [r["reliability"] for r in d["stats"].values() if r.get("reliability_defined")]
        out.append(float(np.median(vals)) if vals else None)
    return out


def bucket_means(series):
    """``{bucket: mean over its epochs of the non-None values, or None}``."""
    return {b: _mean(series[lo:hi]) for b, lo, hi in thirds(len(series))}


def _fmt(x, digits=2):
    return "undefined" if x is None else f"{x:.{digits}f}"


def run_table(run):
    """Markdown lines: per variable and third, reliability (rho) and the mean factor."""
    parts = thirds(len(run["diagnostics"]))
    span = ", ".join(f"{b} = epochs {lo + 1}-{hi}" for b, lo, hi in parts)
    head = " | ".join(f"{b}: reliability (rho)" for b, _, _ in parts)
    lines = [
        f"Thirds: {span}; each cell the mean over the third's epochs (the epoch's last step).",
        "",
        f"| variable | pairs | {head} | mean factor {' / '.join(b for b, _, _ in parts)} |",
        "|---|---:|" + "---:|" * len(parts) + "---:|",
    ]
    names = list(run["diagnostics"][0]["stats"]) if run["diagnostics"] else []
    for name in names:
        rel = bucket_means(variable_series(run, name, "reliability"))
        rho = bucket_means(variable_series(run, name, "reliability_correlation"))
        fac = bucket_means(variable_series(run, name, "mean_factor"))
        pairs = run["diagnostics"][-1]["stats"][name].get("reliability_pairs", 0)
        cells = " | ".join(f"{_fmt(rel[b])} ({_fmt(rho[b])})" for b, _, _ in parts)
        lines.append(
            f"| `{name}` | {pairs} | {cells} | {' / '.join(_fmt(fac[b]) for b, _, _ in parts)} |"
        )
    med = bucket_means(median_series(run))
    cells = " | ".join(f"**{_fmt(med[b])}**" for b, _, _ in parts)
    lines.append(f"| median over variables | | {cells} | |")
    return lines


def run_lines(run):
    """The subsection of one study run."""
    acc = run["curve"][-1]["val_acc"] if run["curve"] else None
    return [
        f"#### {PAIR_LABEL.get(run['pair'], run['pair'])}, peak rate {run['peak_lr']:g}",
        "",
        f"Rate: {run['lr_choice']}. Seed {run['seed']}, {run['epochs']} epochs "
        f"({run['steps']} steps), {LAYOUT_LABEL.get(run['layout'], run['layout'])}, final "
        f"validation accuracy {_fmt(acc)} %, "
        f"{run['wall_s']:.0f} s wall (load average {run['load_average'][0]:.1f}).",
        "",
        *run_table(run),
        "",
    ]


def demo_lines(demo):
    """The demo's subsection: median reliability per third and the last step per variable."""
    cfg = demo["config"]
    lines = [
        "#### The digits demo (`examples/digits`)",
        "",
        f"`{demo['command']}`: {cfg['replicas']} replicas, batch {cfg['global_batch']}, "
        f"{cfg['epochs']} epochs, seed {cfg['seed']}; median over variables of the "
        "reliability per epoch (the epoch's last step), in thirds, and the last step per "
        "variable.",
        "",
        "| optimizer | " + " | ".join(BUCKETS) + " | last step per variable |",
        "|---|---:|---:|---:|---|",
    ]
    for name, r in demo["runs"].items():
        med = bucket_means(r["median_reliability"])
        last = ", ".join(
            f"`{v}` {_fmt(row['reliability']) if row['reliability_defined'] else 'undefined'}"
            for v, row in r["last_step"].items()
        )
        cells = " | ".join(_fmt(med.get(b)) for b in BUCKETS)
        lines.append(f"| {DEMO_LABEL.get(name, name)} | {cells} | {last} |")
    return lines + [""]


MEANING = [
    "How to read it: per variable and recording step the k = 8 GSNR samples are split into "
    "two halves of 4 (replicas 0-3 and 4-7), each half's per-element log GSNR is computed "
    "on its own, and the two are correlated over the variable's elements (rho; the "
    "reliability is its Spearman-Brown value 2 rho / (1 + |rho|) for the full k; "
    "`docs/spec.md` section 4). Near 0: which elements have a high or a low GSNR is not "
    "the same between two halves of the same batch, so the per-element pattern VRGD "
    "weights by is noise at that step: VRGD then scales the elements at random, and what "
    "stays systematic is the smaller step (the mean factor). Near 1: the pattern is a "
    "stable property of the elements, the case VRGD is built for. One step's value over n "
    "element pairs has a standard error of about 1 / sqrt(n) under pure noise, so the "
    "variables with few pairs (the biases: see the pairs column) swing widely from epoch "
    "to epoch; the medians and the kernels are the readable numbers.",
    "",
]


def summary_line(state):
    """One sentence: the median over variables per third of every run and of the demo."""
    parts = []
    for run in state.get("runs", {}).values():
        med = bucket_means(median_series(run))
        label = PAIR_LABEL.get(run["pair"], run["pair"]).split(" (")[0]
        parts.append(f"{label} {' -> '.join(_fmt(v) for v in med.values())}")
    for name, r in (state.get("demo") or {}).get("runs", {}).items():
        med = bucket_means(r["median_reliability"])
        parts.append(
            f"demo {DEMO_LABEL.get(name, name)} {' -> '.join(_fmt(v) for v in med.values())}"
        )
    return "**Median reliability over variables, early -> mid -> late:** " + "; ".join(parts) + "."


def _series_for_plot(state):
    panels = []
    for run in state.get("runs", {}).values():
        names = list(run["diagnostics"][0]["stats"]) if run["diagnostics"] else []
        lines = {n: variable_series(run, n, "reliability") for n in names}
        panels.append((PAIR_LABEL.get(run["pair"], run["pair"]), lines, median_series(run)))
    demo = state.get("demo")
    if demo:
        lines = {DEMO_LABEL.get(n, n): r["median_reliability"] for n, r in demo["runs"].items()}
        panels.append(("digits demo (median over variables)", lines, None))
    return panels


def plot(state, path):
    """One panel per run (per variable, kernels solid, biases dashed, the median black) and
    one for the demo; writes ``path``."""
    from report.round3 import _plt

    panels = _series_for_plot(state)
    if not panels:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, (title, lines, median) in zip(axes[0], panels):
        for name, ys in lines.items():
            xs = np.arange(1, len(ys) + 1)
            y = np.array([np.nan if v is None else v for v in ys], float)
            ax.plot(xs, y, "--" if name.endswith("bias") else "-", lw=0.9, label=name)
        if median is not None:
            y = np.array([np.nan if v is None else v for v in median], float)
            ax.plot(np.arange(1, len(y) + 1), y, "k-", lw=2.0, label="median")
        ax.axhline(0.0, color="gray", lw=0.6)
        ax.set(title=title, xlabel="epoch", ylim=(-1.0, 1.0))
        ax.legend(fontsize=6, ncol=2)
    axes[0][0].set_ylabel("split-half reliability")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def section(results_dir, images_dir, images_rel):
    """The section (Markdown string, '' without results); writes its plot."""
    state = load(results_dir)
    if not state or not (state.get("runs") or state.get("demo")):
        return ""
    lines = [
        HEADING,
        "",
        "Runner `python3 studies/evidence/reliability.py` (JSON `studies/evidence/results/"
        "round3/reliability.json`); not part of `PROTOCOL.md` and no registered result "
        "uses it. The round-3 setting (Fashion-MNIST 55k/5k, the CNN, batch 4096, k = 8 "
        "samples of 512, 30 epochs, warm-up + cosine, gamma 0.1) with `split_half=True`, "
        "one seed, on 8 replicas of one sample each: the registered 1 device x 8 "
        "micro-batch groups gives VRGD only the groups' sums, so no halves exist there (the "
        "same shards, the same weights up to rounding: the layout pilot).",
        "",
        summary_line(state),
        "",
        *MEANING,
    ]
    for run in state.get("runs", {}).values():
        lines += run_lines(run)
    if state.get("demo"):
        lines += demo_lines(state["demo"])
    os.makedirs(images_dir, exist_ok=True)
    if plot(state, os.path.join(images_dir, PLOT)):
        lines += [f"![split-half reliability per epoch]({images_rel}/{PLOT})", ""]
    return "\n".join(lines)
