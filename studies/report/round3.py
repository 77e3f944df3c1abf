"""The round-3 Fashion-MNIST evidence section of docs/results.md, from
studies/evidence/results/round3/ (``tune.json``, ``final.json``).

Whatever runs exist are shown, with their count: while tuning runs, "tuning in progress:
N of M runs" and each arm's validation accuracy per rate so far; while the final phase runs,
its count only (test accuracy is not summarised before the 64 final runs of a pair are in);
then the registered primary family (Holm over VR − base and VR − scalar-VR), the readout,
and the secondary results. Rules: studies/evidence/PROTOCOL.md, computed by
studies/evidence/evidence_stats.py.
"""

import json
import os

import evidence_stats as es
import numpy as np
import protocol3 as p3
from protocol3 import ARM_LABEL, ARMS

RESULTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evidence", "results", "round3"
)
PAIR_LABEL = {"momentum": "Momentum", "lamb": "LAMB"}
COLORS = {"base": "tab:blue", "vr": "tab:red", "scalar_vr": "tab:green", "shuffled_nm": "tab:gray"}
PRIMARY = (("vr", "base"), ("vr", "scalar_vr"))
SECONDARY = (("vr", "shuffled_nm"), ("scalar_vr", "base"))


def load(results_dir, phase):
    path = os.path.join(results_dir, f"{phase}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def runs_of(state, pair, **kw):
    return [
        r
        for r in (state or {}).get("runs", {}).values()
        if r["pair"] == pair and all(r.get(k) == v for k, v in kw.items())
    ]


def mean_norm_ratio(run):
    """Mean over epochs and variables of the recorded update norm ratio (None for base)."""
    vals = [v["norm_ratio"] for d in run.get("diagnostics", []) for v in d["stats"].values()]
    return float(np.mean(vals)) if vals else None


# ------------------------------------------------------------------------------------------
# Progress and tuning
# ------------------------------------------------------------------------------------------


def tuning_progress(tune, pair):
    """``(done, planned, grid, best)``: finished tuning runs, runs of the current grid
    (arms x rates x seeds), the grid, and the arms' best rates (None until complete)."""
    runs = (tune or {}).get("runs", {})
    grid, best = p3.tune_grid(runs, pair)
    planned = len(grid) * len(ARMS) * len(p3.TUNE_SEEDS)
    keys = {p3.run_key(pair, a, lr, s) for a in ARMS for lr in grid for s in p3.TUNE_SEEDS}
    return len(keys & set(runs)), planned, grid, best


def final_progress(final, pair, best):
    """``(done, planned, by_arm)``: finished final runs of the registered seeds at each
    arm's tuned rate, 64 planned, and ``{arm: {seed: run}}``."""
    by_arm = {a: {} for a in ARMS}
    if best:
        for a in ARMS:
            for r in runs_of(final, pair, arm=a, peak_lr=best[a]):
                if r["seed"] in p3.FINAL_SEEDS:
                    by_arm[a][r["seed"]] = r
    done = sum(len(v) for v in by_arm.values())
    return done, len(ARMS) * len(p3.FINAL_SEEDS), by_arm


def tuning_table(tune, pair, grid, arms=ARMS, spread=False):
    """Markdown table: mean validation accuracy % (seeds finished) per arm of ``arms`` and
    rate; with ``spread``, each rate's lowest and highest run beside the mean."""
    head = "| arm | " + " | ".join(f"{lr:g}" for lr in grid) + " |"
    lines = [head, "|---|" + "---:|" * len(grid)]
    for a in arms:
        cells = []
        for lr in grid:
            v = [r["final"]["val_acc"] for r in runs_of(tune, pair, arm=a, peak_lr=lr)]
            if not v:
                cells.append("–")
                continue
            notes = [str(len(v))]
            if spread:
                notes.append(f"{min(v):.2f}–{max(v):.2f}")
            collapsed = sum(x < p3.COLLAPSE_BELOW for x in v)
            if collapsed:
                notes.append(f"{collapsed} coll.")
            cells.append(f"{np.mean(v):.2f} ({('; ' if spread else ', ').join(notes)})")
        lines.append(f"| {ARM_LABEL[a]} | " + " | ".join(cells) + " |")
    return lines


def lr_windows(tune, pair, grid):
    """{arm: lr_window_width dict} over the grid's mean tuning validation accuracies."""
    out = {}
    for a in ARMS:
        rates, accs = [], []
        for lr in grid:
            v = [r["final"]["val_acc"] for r in runs_of(tune, pair, arm=a, peak_lr=lr)]
            if len(v) == len(p3.TUNE_SEEDS):
                rates.append(lr)
                accs.append(float(np.mean(v)))
        if rates:
            out[a] = es.lr_window_width(rates, accs)
    return out


# ------------------------------------------------------------------------------------------
# The registered readout
# ------------------------------------------------------------------------------------------


def deltas(by_arm, a, b, field="test_acc"):
    """Paired deltas ``a - b`` of ``field`` over the seeds both arms finished."""
    seeds = sorted(set(by_arm[a]) & set(by_arm[b]))
    return [by_arm[a][s]["final"][field] - by_arm[b][s]["final"][field] for s in seeds]


def registered_readout(by_arm):
    """The primary family, the readout and the secondary contrasts from complete finals.

    Args:
      by_arm: ``{arm: {seed: run}}`` with all 16 registered seeds of every arm.

    Returns:
      dict ``primary`` (``{"vr-base": summary, "vr-scalar_vr": summary}`` from
      :func:`evidence_stats.primary_family`), ``readout`` (one of
      :data:`evidence_stats.READOUTS`), ``secondary`` (``{"a-b": paired_summary}``) and
      ``n_needed`` (pairs for a ±1 pp half width at the larger primary SD).
    """
    family = es.primary_family({f"{a}-{b}": deltas(by_arm, a, b) for a, b in PRIMARY})
    words = [family[f"{a}-{b}"]["words"] for a, b in PRIMARY]
    secondary = {f"{a}-{b}": es.paired_summary(deltas(by_arm, a, b)) for a, b in SECONDARY}
    sd = max(s["sd"] for s in family.values())
    return {
        "primary": family,
        "readout": es.readout(*words),
        "secondary": secondary,
        "n_needed": es.pairs_for_half_width(sd),
    }


def _ci(s):
    lo, hi = s["t_ci"]
    return f"{s['mean']:+.2f} pp, 95 % CI [{lo:+.2f}, {hi:+.2f}]"


def _excludes_zero(s):
    """'below' or 'above' when the 95 % t CI of an "equivalent" contrast excludes 0, else
    None (a detectable difference smaller than the margin)."""
    lo, hi = s["t_ci"]
    if s["words"] != "equivalent" or lo <= 0.0 <= hi:
        return None
    return "below" if hi < 0.0 else "above"


def _word(s):
    """A contrast's registered word, with the side of 0 when an equivalence CI excludes it."""
    side = _excludes_zero(s)
    if side is None:
        return s["words"]
    return f"equivalent, but slightly {'lower' if side == 'below' else 'higher'}: CI {side} 0"


def sign_note(result):
    """A sentence on the primary contrasts read "equivalent" whose CI excludes 0, or None."""
    off = [(a, b, result["primary"][f"{a}-{b}"]) for a, b in PRIMARY]
    off = [(a, b, s) for a, b, s in off if _excludes_zero(s)]
    if not off:
        return None
    parts = [
        f"{ARM_LABEL[a]} − {ARM_LABEL[b]} ({_excludes_zero(s)} 0, Holm t-test p "
        f"{s['p_t_holm']:.3g})"
        for a, b, s in off
    ]
    return (
        "Beside the words: the 95 % CI of " + " and of ".join(parts) + " excludes 0, a "
        "detectable difference smaller than the ±1 pp margin. A negative one with Holm p < "
        '0.05 also meets the "worse" rule, which the registered order puts after '
        '"equivalent".'
    )


def readout_lines(result, by_arm):
    """Markdown lines of the primary family, the readout and the secondary contrasts."""
    lines = [
        "Final test accuracy (mean ± sd over the 16 seeds; collapsed = final validation "
        f"accuracy below {p3.COLLAPSE_BELOW:g} %, the protocol's definition):",
        "",
    ]
    for a in ARMS:
        acc = [r["final"]["test_acc"] for r in by_arm[a].values()]
        low = final_collapses(by_arm, a)
        lines.append(
            f"- {ARM_LABEL[a]}: {np.mean(acc):.2f} ± {np.std(acc, ddof=1):.2f} %, median "
            f"{np.median(acc):.2f} %" + (f" ({low} of {len(acc)} collapsed)" if low else "")
        )
    lines += ["", "Primary contrasts (Holm over the two):", ""]
    for a, b in PRIMARY:
        s = result["primary"][f"{a}-{b}"]
        lines.append(
            f"- {ARM_LABEL[a]} − {ARM_LABEL[b]}: {_ci(s)} ({seeds_text(deltas(by_arm, a, b))}); "
            f"t-test p = {s['p_t']:.3g} (Holm "
            f"{s['p_t_holm']:.3g}), TOST p = {s['p_tost']:.3g} (Holm {s['p_tost_holm']:.3g}): "
            f"**{s['words']}**"
        )
    note = sign_note(result)
    lines += [""] + ([note, ""] if note else []) + [f"**Registered readout: {result['readout']}.**"]
    if result["readout"] == "inconclusive":
        lines.append(
            f"At the larger observed SD, about {result['n_needed']} pairs would give a ±1 pp "
            "half width."
        )
    lines += ["", "Secondary (not in the Holm family; round-2 words on the 95 % t CI):", ""]
    for a, b in SECONDARY:
        s = result["secondary"][f"{a}-{b}"]
        word = s["verdict"].replace("VR better", f"{ARM_LABEL[a]} better")
        lines.append(f'- {ARM_LABEL[a]} − {ARM_LABEL[b]}: {_ci(s)}: "{word}"')
    return lines + [""]


# ------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "figure.dpi": 110})
    return plt


def plot_tuning(tune, pair, grid, path, effective=False, arms=ARMS, title=None):
    """Validation accuracy vs peak rate (or the effective rate, peak x the run's mean update
    norm ratio) per arm of ``arms``: every tuning run a dot, the mean over seeds a line;
    ``title`` (default: round 3's, with its progress)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for a in arms:
        runs = runs_of(tune, pair, arm=a)
        if not runs:
            continue
        x = [r["peak_lr"] * ((mean_norm_ratio(r) or 1.0) if effective else 1.0) for r in runs]
        ax.scatter(x, [r["final"]["val_acc"] for r in runs], s=10, color=COLORS[a], alpha=0.5)
        if not effective:
            per = [(lr, [r["final"]["val_acc"] for r in runs if r["peak_lr"] == lr]) for lr in grid]
            per = [(lr, np.mean(v)) for lr, v in per if v]
            ax.plot(*zip(*per), color=COLORS[a], label=ARM_LABEL[a])
        else:
            ax.scatter([], [], color=COLORS[a], label=ARM_LABEL[a])
    ax.set_xscale("log")
    if not effective:
        ax.set_xticks(grid, [f"{lr:.3g}" for lr in grid], fontsize=7)
        ax.minorticks_off()
    ax.set_xlabel("effective rate (peak × mean update norm ratio)" if effective else "peak rate")
    ax.set_ylabel("final validation accuracy %")
    if title is None:
        done, planned, _, _ = tuning_progress(tune, pair)
        title = f"Round 3 tuning, {PAIR_LABEL[pair]}, batch {p3.BATCH}" + (
            "" if done >= planned else f" (in progress: {done} of {planned} runs)"
        )
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_final(by_arm, path, pair, field="test_acc", title=None, ylabel=None, center=np.mean):
    """``field`` of the final runs per arm of ``by_arm``: every seed a dot, ``center`` (the
    mean, or e.g. ``np.median`` for censored values) a bar; ``title`` and ``ylabel`` default
    to round 3's test accuracy."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    arms = list(by_arm)
    for i, a in enumerate(arms):
        acc = [r["final"][field] for r in by_arm[a].values()]
        jitter = np.linspace(-0.15, 0.15, len(acc))
        ax.scatter(i + jitter, acc, s=12, color=COLORS[a])
        ax.hlines(center(acc), i - 0.3, i + 0.3, color="k")
    ax.set_xticks(range(len(arms)), [ARM_LABEL[a].replace(" (", "\n(") for a in arms], fontsize=8)
    ax.set_ylabel(ylabel or "final test accuracy %")
    ax.set_title(title or f"Round 3 final, {PAIR_LABEL[pair]}, 16 seeds per arm")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_curves(runs_by_arm, title, path):
    """Validation accuracy per epoch of every given run, coloured by arm."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for a, runs in runs_by_arm.items():
        for j, r in enumerate(runs):
            ax.plot(
                [c["epoch"] for c in r["curve"]],
                [c["val_acc"] for c in r["curve"]],
                color=COLORS[a],
                alpha=0.5,
                lw=0.8,
                label=ARM_LABEL[a] if j == 0 else None,
            )
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy %")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ------------------------------------------------------------------------------------------
# Section and headline
# ------------------------------------------------------------------------------------------


def _status(tune, final, pair):
    """(status sentence, grid, best, by_arm, complete)."""
    done, planned, grid, best = tuning_progress(tune, pair)
    if best is None:
        return f"tuning in progress: {done} of {planned} runs", grid, None, None, False
    fdone, fplanned, by_arm = final_progress(final, pair, best)
    if fdone < fplanned:
        return (
            f"tuning done ({done} runs); final phase in progress: {fdone} of {fplanned} runs",
            grid,
            best,
            by_arm,
            False,
        )
    return f"complete: {done} tuning and {fdone} final runs", grid, best, by_arm, True


def _plots(tune, pair, grid, best, by_arm, complete, images_dir, images_rel):
    out = []
    name = f"round3_tuning_{pair}.png"
    plot_tuning(tune, pair, grid, os.path.join(images_dir, name))
    out.append(f"![validation accuracy vs learning rate per arm]({images_rel}/{name})")
    name = f"round3_effective_{pair}.png"
    plot_tuning(tune, pair, grid, os.path.join(images_dir, name), effective=True)
    out.append(f"![validation accuracy vs effective rate per arm]({images_rel}/{name})")
    if complete:
        name = f"round3_final_{pair}.png"
        plot_final(by_arm, os.path.join(images_dir, name), pair)
        out.append(f"![final test accuracy per arm]({images_rel}/{name})")
        curves = {a: list(by_arm[a].values()) for a in ARMS}
        title = "Round 3 final runs, validation curves"
    else:
        curves = {a: [] for a in ARMS}
        for a in ARMS:
            top = _best_so_far(tune, pair, a, grid)
            curves[a] = runs_of(tune, pair, arm=a, peak_lr=top) if top else []
        title = "Round 3 tuning runs at each arm's best rate so far (in progress)"
    name = f"round3_curves_{pair}.png"
    plot_curves(curves, title, os.path.join(images_dir, name))
    out.append(f"![validation curves]({images_rel}/{name})")
    return [line for p in out for line in (p, "")]


def _best_so_far(tune, pair, arm, grid):
    means = []
    for lr in grid:
        v = [r["final"]["val_acc"] for r in runs_of(tune, pair, arm=arm, peak_lr=lr)]
        if v:
            means.append((float(np.mean(v)), -lr, lr))
    return max(means)[2] if means else None


#: Disclosed after the runs (PROTOCOL.md stays as registered), in the LAMB pair's section.
LAMB_GRID_DISCLOSURE = (
    "Disclosed: PROTOCOL.md section 6 writes the LAMB grid as `0.02 × 2^(i/4)`, i = −4 … 4, "
    "and beside it, in parentheses, 0.0119 – 0.0336, which is the range of i = −3 … 3 only. "
    "The runner followed the formula (0.01 – 0.04, 9 rates, then the registered edge rule)."
)


def disclosure(pair, grid, best):
    """The LAMB pair's grid disclosure with, once tuned, where the chosen rates lie; '' for
    another pair."""
    if pair != "lamb":
        return ""
    if not best:
        return LAMB_GRID_DISCLOSURE
    lo, hi = p3.rate(0.02, -3), p3.rate(0.02, 3)  # the parenthesis' range
    inside = all(lo <= b <= hi for b in best.values())
    return (
        f"{LAMB_GRID_DISCLOSURE} The tuned grid has {len(grid)} rates; the chosen rates "
        f"({', '.join(sorted({f'{b:g}' for b in best.values()}))}) lie "
        f"{'inside' if inside else 'outside'} the parenthesis' range too."
    )


def _gaps(w):
    """ ", not adjacent: N grid rates between them" when the window's rates are not one run
    of neighbouring grid points (its width then overstates the flat region), else ""."""
    span = round(w["log2_width"] * 4) + 1  # grid points from the lowest to the highest
    if w["count"] >= span or w["count"] < 2:
        return ""
    return f" (not adjacent: {span - w['count']} grid rate(s) between them fall out)"


def pair_lines(tune, final, pair, images_dir, images_rel):
    """The Markdown lines of one pair's round-3 results."""
    status, grid, best, by_arm, complete = _status(tune, final, pair)
    lines = [f"#### {PAIR_LABEL[pair]} pair: {status}", ""]
    if not runs_of(tune, pair):
        return lines + ["Not yet run.", ""]
    lines += [
        "Tuning, mean final validation accuracy % per arm and peak rate (tuning seeds "
        "finished; collapsed = below 20 %):",
        "",
        *tuning_table(tune, pair, grid),
        "",
    ]
    note = disclosure(pair, grid, best)
    lines += [note, ""] if note else []
    if best:
        lines.append("Tuned rates: " + ", ".join(f"{ARM_LABEL[a]} {best[a]:g}" for a in ARMS) + ".")
        for a, w in lr_windows(tune, pair, grid).items():
            lines.append(
                f"- learning-rate window within 1 pp of {ARM_LABEL[a]}'s best: {w['count']} "
                f"grid rate(s), ×{2 ** w['log2_width']:.2f} wide{_gaps(w)}"
            )
        lines.append("")
    if complete:
        lines += readout_lines(registered_readout(by_arm), by_arm)
    else:
        lines += [
            "No verdict: the registered readout is applied once the final phase is complete.",
            "",
        ]
    return lines + _plots(tune, pair, grid, best, by_arm, complete, images_dir, images_rel)


def section(results_dir, images_dir, images_rel):
    """The round-3 subsection (Markdown string); writes its plots."""
    tune, final = load(results_dir, "tune"), load(results_dir, "final")
    reg = (tune or {}).get("registration", {})
    lines = [
        "### Round 3: GSNR weighting or step size? (pre-registered, in progress)"
        if not _all_complete(tune, final)
        else "### Round 3: GSNR weighting or step size? (pre-registered)",
        "",
        "Protocol, fixed before the first run: "
        "[studies/evidence/PROTOCOL.md](../studies/evidence/PROTOCOL.md)"
        + (
            f" (registered in commit `{reg['registered_commit'][:10]}`)"
            if reg.get("registered_commit")
            else ""
        )
        + ". Fashion-MNIST, batch 4096, 30 epochs, four arms: base, VR, scalar-VR (each "
        "variable's factor replaced by VR's own update norm ratio: VR's step size per "
        "variable, no per-element weighting) and a norm-matched shuffle; each arm tuned on a "
        "×2^(1/4) grid with 3 seeds on validation only, then 16 fresh seed pairs on the test "
        "set. Runner `python3 studies/evidence/round3.py`.",
        "",
    ]
    lines += [commit_line(final, load(results_dir, "replicate")), ""]
    os.makedirs(images_dir, exist_ok=True)
    for pair in ("momentum", "lamb"):
        if pair == "lamb" and not runs_of(tune, pair):
            lines += ["#### LAMB pair: not yet run (after the Momentum pair's final phase).", ""]
            continue
        lines += pair_lines(tune, final, pair, images_dir, images_rel)
    return "\n".join(lines)


def commit_line(final, replicate):
    """Which library commit the final runs hold for (their provenance), and whether today's
    library reproduces them (``replicate.json`` of ``studies/evidence/replicate3.py``)."""
    prov = [r["provenance"] for r in (final or {}).get("runs", {}).values() if "provenance" in r]
    if not prov:
        return "No final run with a provenance record yet."
    commits = sorted({p.get("git_commit", "?")[:7] for p in prov})
    dirty = sum(bool(p.get("dirty")) for p in prov)
    text = (
        f"The results hold for the library at commit {', '.join(f'`{c}`' for c in commits)} "
        f"(every run's provenance; {dirty} of {len(prov)} from a dirty tree); the library "
        "changed after it (e.g. `b6b84e4`: `beta_3` steps without a noise estimate, which "
        "round 3's 8 contributing groups never take)."
    )
    reruns = (replicate or {}).get("runs", {})
    if not reruns:
        return text + " Not yet rerun with today's library."
    same = sum(r["identical_curve"] for r in reruns.values())
    at = sorted({r["provenance"].get("git_commit", "?")[:7] for r in reruns.values()})
    worst = max(r["max_abs_val_curve_diff_pp"] for r in reruns.values())
    return text + (
        f" Rerun at {', '.join(f'`{c}`' for c in at)} (`studies/evidence/replicate3.py`): "
        f"{same} of {len(reruns)} runs ({', '.join(sorted(reruns))}) gave the same "
        f"validation curve to the recorded digit; the largest difference at any epoch "
        f"{worst:.2f} pp."
    )


def _all_complete(tune, final):
    return all(_status(tune, final, pair)[4] for pair in ("momentum", "lamb"))


def readout_if_complete(results_dir, pair="momentum"):
    """The registered readout of ``pair`` once its final phase is complete, else None."""
    tune, final = load(results_dir, "tune"), load(results_dir, "final")
    _, _, _, by_arm, complete = _status(tune, final, pair)
    return registered_readout(by_arm)["readout"] if complete else None


def seeds_text(d):
    """The median of paired deltas and how many seeds favour each side, e.g.
    "median -0.76 pp, 7 of 16 seeds favour VR"."""
    d = np.asarray(d, np.float64)
    return f"median {np.median(d):+.2f} pp, {int((d > 0).sum())} of {d.size} seeds favour VR"


def final_collapses(by_arm, arm):
    """Final runs of ``arm`` that collapsed by the protocol's one definition (final
    validation accuracy below ``COLLAPSE_BELOW`` %, section 5 of PROTOCOL.md)."""
    return sum(not (r["final"]["val_acc"] >= p3.COLLAPSE_BELOW) for r in by_arm[arm].values())


def _contrast(s, d):
    """A primary contrast on one line: mean, median and seeds, the CI, Holm's p, the word."""
    return (
        f"{s['mean']:+.2f} pp ({seeds_text(d)}), 95 % CI [{s['t_ci'][0]:+.2f}, "
        f"{s['t_ci'][1]:+.2f}], Holm p {s['p_t_holm']:.2g} ({_word(s)})"
    )


def collapse_note(by_arm, result):
    """Where the base collapsed in the finals: whose seeds carry the mean difference, and
    whether the step-size control (scalar-VR) reproduces it; "" without collapses."""
    n = final_collapses(by_arm, "base")
    if not n:
        return ""
    sb = result["secondary"]["scalar_vr-base"]
    return (
        f" The base collapsed on {n} of {len(by_arm['base'])} seeds (validation below "
        f"{p3.COLLAPSE_BELOW:g} %), VR on {final_collapses(by_arm, 'vr')}: the mean difference "
        f"comes from those seeds, and scalar-VR (VR's step size without the per-element "
        f"weighting) − base {sb['mean']:+.2f} pp reproduces it."
    )


def headline(results_dir, pair="momentum"):
    """One line for the README: the readout with both primary contrasts (mean, median and
    seeds, CI, Holm p), and where the base collapsed; or the progress."""
    tune, final = load(results_dir, "tune"), load(results_dir, "final")
    status, _, _, by_arm, complete = _status(tune, final, pair)
    if not complete:
        return (
            f"Round 3 ({PAIR_LABEL[pair]}; step-matched scalar-VR control, a 2^(1/4) "
            f"learning-rate grid for every arm, 16 pairs) is running: {status}; no verdict yet."
        )
    r = registered_readout(by_arm)
    p1, p2 = (r["primary"][f"{a}-{b}"] for a, b in PRIMARY)
    d1, d2 = (deltas(by_arm, a, b) for a, b in PRIMARY)
    return (
        f"Round 3 ({PAIR_LABEL[pair]}, 16 pairs): **{r['readout']}**. VR − base "
        f"{_contrast(p1, d1)}; VR − scalar-VR (same step size, no per-element weighting) "
        f"{_contrast(p2, d2)}.{collapse_note(by_arm, r)}"
    )
