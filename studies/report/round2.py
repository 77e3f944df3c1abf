"""The round-2 Fashion-MNIST evidence section of docs/results.md, from
studies/evidence/results/round2/.

:func:`section` returns the markdown and writes its plots (studies/render.py calls it);
:func:`headline` gives the README's lines. Whatever
data exist are shown; a missing phase reads "not yet run", too few pairs "inconclusive".
The verdict words and rules are the pre-registered ones (studies/evidence/ROUND2_PROTOCOL.md,
studies/evidence/evidence_stats.py).
"""

import json
import math
import os

import evidence_stats as es
import numpy as np

RESULTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evidence", "results"
)
PAIR_LABEL = {"momentum": ("Momentum", "VR-Momentum"), "lamb": ("LAMB", "VR-LAMB")}
SMALL, LARGE = 256, 4096
COLORS = {"base": "tab:blue", "vr": "tab:red", "vr_shuffled": "tab:gray"}


def _load(results_dir, phase):
    path = os.path.join(results_dir, f"{phase}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _runs(state, **kw):
    if not state:
        return []
    return [r for r in state["runs"].values() if all(r.get(k) == v for k, v in kw.items())]


def _side_label(pair, side):
    return "VR-shuffled (control)" if side == "vr_shuffled" else PAIR_LABEL[pair][side == "vr"]


def _by_seed(runs):
    return {r["seed"]: r for r in runs}


def _fmt_ci(ci):
    return f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _pairs(base_runs, vr_runs, field="test_acc"):
    b, v = _by_seed(base_runs), _by_seed(vr_runs)
    seeds = sorted(set(b) & set(v))
    return seeds, [v[s]["final"][field] - b[s]["final"][field] for s in seeds]


def _paired(base_runs, vr_runs):
    """:func:`evidence_stats.paired_summary` of ``vr − base`` test accuracy by seed, or
    None with fewer than 2 pairs."""
    _, d = _pairs(base_runs, vr_runs)
    return es.paired_summary(d) if len(d) >= 2 else None


def _delta_text(summary):
    """``"+x.xx pp, 95 % CI [lo, hi]"`` of a :func:`evidence_stats.paired_summary`."""
    return f"{summary['mean']:+.2f} pp, 95 % CI {_fmt_ci(summary['t_ci'])}"


def _rule_out(summary):
    """What the 95 % t interval of a paired Δ (VR − base, pp) rules out and what it does
    not, against 0 and the ±margin of the protocol."""
    lo, hi = summary["t_ci"]
    m = es.MARGIN_PP
    yes, no = [], []
    if lo > -m:
        yes.append(f"VR being worse by more than {max(-lo, 0):.2f} pp (so by the {m:g} pp margin)")
    else:
        no.append(f"VR being worse by the {m:g} pp margin or more")
    if hi < m:
        yes.append(f"a benefit of {m:g} pp or more")
    else:
        no.append(f"a benefit of up to {hi:+.2f} pp, beyond the margin")
    if lo <= 0 <= hi:
        no.append("no effect at all")
    parts = []
    if yes:
        parts.append("The 95 % CI rules out " + " and ".join(yes) + ".")
    if no:
        parts.append(
            ("It" if yes else "The 95 % CI") + " does not rule out " + ", nor ".join(no) + "."
        )
    tost = summary.get("p_tost")
    if tost is not None and tost >= 0.05:
        parts.append(f"Equivalence within ±{m:g} pp is not shown (TOST p = {tost:.2g}).")
    return " ".join(parts)


def _boot_note(summary):
    return (
        f'The bootstrap interval alone would read "{summary["verdict_boot"]}"; the '
        "pre-registered rule uses the t interval: with "
        f"{summary['n']} pairs a percentile bootstrap under-covers (it spreads the mean with "
        "the sample's own variance, a factor (n − 1)/n too small, and with normal-like rather "
        "than t quantiles), so its interval is too narrow."
        if summary["verdict_boot"] != summary["verdict"]
        else f'The bootstrap interval gives the same verdict ("{summary["verdict_boot"]}").'
    )


# ------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------


def plot_tuning(tune, pair, path):
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    drawn = False
    for ax, batch in zip(axes, (SMALL, LARGE)):
        for side in ("base", "vr"):
            runs = _runs(tune, pair=pair, batch=batch, side=side)
            if not runs:
                continue
            rates = sorted({r["peak_lr"] for r in runs})
            means = [
                np.mean([r["final"]["val_acc"] for r in runs if r["peak_lr"] == lr]) for lr in rates
            ]
            for r in runs:
                ax.plot(r["peak_lr"], r["final"]["val_acc"], ".", color=COLORS[side], alpha=0.4)
            label = PAIR_LABEL[pair][side == "vr"]
            ax.plot(rates, means, "o-", color=COLORS[side], label=label)
            drawn = True
        ax.set_xscale("log")
        ax.set_title(f"batch {batch}")
        ax.set_xlabel("peak learning rate")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation accuracy (%) after 30 epochs")
    if drawn:
        axes[0].legend()
    fig.tight_layout()
    if drawn:
        fig.savefig(path)
    plt.close(fig)
    return drawn


def plot_tuned_vs_batch(final, pair, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    drawn = False
    for side, dx in (("base", 0.97), ("vr", 1.03)):
        xs, ms, es_ = [], [], []
        for batch in (SMALL, LARGE):
            acc = [r["final"]["test_acc"] for r in _runs(final, pair=pair, batch=batch, side=side)]
            if len(acc) >= 1:
                xs.append(batch * dx)
                ms.append(np.mean(acc))
                es_.append(
                    0.0 if len(acc) < 2 else 2.571 * np.std(acc, ddof=1) / math.sqrt(len(acc))
                )
        if xs:
            ax.errorbar(
                xs, ms, yerr=es_, fmt="o-", capsize=3, color=COLORS[side],
                label=PAIR_LABEL[pair][side == "vr"],
            )  # fmt: skip
            drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch")
    ax.set_ylabel("test accuracy (%), tuned, mean ± 95% CI")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend()
    fig.tight_layout()
    if drawn:
        fig.savefig(path)
    plt.close(fig)
    return drawn


def plot_curves(final, controls, pair, target, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    drawn = False
    groups = [("base", final), ("vr", final), ("vr_shuffled", controls)]
    for side, state in groups:
        for i, r in enumerate(_runs(state, pair=pair, batch=LARGE, side=side)):
            steps = [c["step"] for c in r["curve"]]
            acc = [c["val_acc"] for c in r["curve"]]
            ax.plot(
                steps, acc, color=COLORS[side], alpha=0.6, lw=1,
                label=_side_label(pair, side) if i == 0 else None,
            )  # fmt: skip
            drawn = True
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label="0.98 x batch-256 base")
    ax.set_xlabel("step (batch 4096)")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_ylim(bottom=max(0, (target or 60) - 30))
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    fig.tight_layout()
    if drawn:
        fig.savefig(path)
    plt.close(fig)
    return drawn


def plot_gap_vs_loss(final, pair, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    drawn = False
    for side in ("base", "vr"):
        for i, r in enumerate(_runs(final, pair=pair, batch=LARGE, side=side)):
            tl = [c["train_loss"] for c in r["curve"]]
            gap = [c["train_acc"] - c["val_acc"] for c in r["curve"]]
            ax.plot(
                tl, gap, color=COLORS[side], alpha=0.6, lw=1,
                label=PAIR_LABEL[pair][side == "vr"] if i == 0 else None,
            )  # fmt: skip
            drawn = True
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("training loss (10k subset), decreasing →")
    ax.set_ylabel("train − validation accuracy (pp)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend()
    fig.tight_layout()
    if drawn:
        fig.savefig(path)
    plt.close(fig)
    return drawn


def plot_factor_stats(final, controls, mech, pair, path):
    """Per-layer mean factor and fraction at gamma over training (VR runs at 4096), with
    the null-calibration lines of check (a)."""
    plt = _plt()
    runs = _runs(final, pair=pair, batch=LARGE, side="vr")
    if not runs or not runs[0].get("diagnostics"):
        return False
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    names = list(runs[0]["diagnostics"][0]["stats"])
    cmap = plt.get_cmap("viridis")
    for ax, field in zip(axes, ("mean_factor", "frac_at_gamma", "norm_ratio")):
        for j, name in enumerate(names):
            epochs = [d["epoch"] for d in runs[0]["diagnostics"]]
            vals = np.mean(
                [[d["stats"][name][field] for d in r["diagnostics"]] for r in runs], axis=0
            )
            ax.plot(epochs, vals, color=cmap(j / max(1, len(names) - 1)), label=name, lw=1)
        null = (mech or {}).get("null", {}).get("8")
        if null:
            ax.axhline(null[field], color="k", ls="--", lw=1, label="pure noise, k = 8")
        ax.set_title(field)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_spearman(mech, path):
    info = (mech or {}).get("informative")
    if not info:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    cps = info["checkpoints"]
    names = info["variables"]
    cmap = plt.get_cmap("viridis")
    for ax, k in zip(axes, ("8", "32")):
        for j, name in enumerate(names):
            ys = [cp["spearman_factor"][k][name] for cp in cps]
            ax.plot(
                [cp["epoch"] for cp in cps], [np.nan if y is None else y for y in ys], "o-",
                color=cmap(j / max(1, len(names) - 1)), label=name.split("/", 1)[-1], lw=1,
            )  # fmt: skip
        ax.axhline(0, color="k", lw=0.8)
        ax.set_title(f"k = {k}: Spearman(factor, reference GSNR)")
        ax.set_xlabel("epoch of the base run (batch 4096)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Spearman rho per layer")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------------------
# Text
# ------------------------------------------------------------------------------------------


def _tuning_lines(tune, pair):
    lines = []
    for batch in (SMALL, LARGE):
        runs = _runs(tune, pair=pair, batch=batch)
        if not runs:
            lines.append(f"- Batch {batch}: not yet run.")
            continue
        best = (tune.get("best") or {}).get(f"{pair}/b{batch}")
        grid = (tune.get("grids") or {}).get(f"{pair}/b{batch}", [])
        cells = []
        for side in ("base", "vr"):
            per_lr = {}
            for r in _runs(tune, pair=pair, batch=batch, side=side):
                per_lr.setdefault(r["peak_lr"], []).append(r["final"]["val_acc"])
            cells.append(
                f"{PAIR_LABEL[pair][side == 'vr']}: "
                + ", ".join(
                    f"{lr:g} → {np.mean(v):.2f} ({len(v)})" for lr, v in sorted(per_lr.items())
                )
            )
        status = (
            f"best base {best['base']:g}, best VR {best['vr']:g}"
            if best
            else f"incomplete ({len(runs)} of {2 * 2 * len(grid)} runs of the grid)"
        )
        lines.append(
            f"- Batch {batch}, grid {', '.join(f'{g:g}' for g in grid)}: {status}. "
            "Mean validation accuracy % (tuning seeds): " + "; ".join(cells) + "."
        )
    return lines


def _primary(final, pair, lines):
    base = _runs(final, pair=pair, batch=LARGE, side="base")
    vr = _runs(final, pair=pair, batch=LARGE, side="vr")
    seeds, deltas = _pairs(base, vr)
    if not final or not (base or vr):
        lines += ["**Primary endpoint: not yet run** (tuning first).", ""]
        return None
    if len(deltas) < 2:
        lines.append(
            f"**Primary endpoint: inconclusive** — only {len(deltas)} seed pair(s) finished "
            "(6 registered)."
        )
        lines.append("")
        return None
    s = es.paired_summary(deltas)
    lines += [
        f"**Primary endpoint (test accuracy at batch 4096, each side at its tuned rate, "
        f"{s['n']} seed pairs): Δ = VR − base = {s['mean']:+.2f} pp, 95 % CI (t) "
        f"{_fmt_ci(s['t_ci'])}, bootstrap {_fmt_ci(s['boot_ci'])}; TOST against ±1 pp "
        f'p = {s["p_tost"]:.3g}. Verdict: "{s["verdict"]}"**'
        + ("" if s["n"] >= 6 else f" (partial: {s['n']} of 6 pairs)")
        + ".",
        "",
        _rule_out(s) + " " + _boot_note(s),
        "",
    ]
    return s


def _secondary(tune, final, paper, pair, lines):
    rows, ps = [], []
    # 1. collapse rate, paper-protocol arm
    pb, pv = (_runs(paper, pair=pair, side=s) for s in ("base", "vr"))
    seeds = sorted(set(_by_seed(pb)) & set(_by_seed(pv)))
    if seeds:
        c = es.collapse_test(
            [_by_seed(pb)[s]["final"]["test_acc"] for s in seeds],
            [_by_seed(pv)[s]["final"]["test_acc"] for s in seeds],
        )
        rows.append(
            f"collapse rate (< 20 % test) in the paper-protocol arm: base "
            f"{c['base_rate']:.2f}, VR {c['vr_rate']:.2f} ({c['n']} pair(s); exact McNemar)"
        )
        ps.append(c["p"])
    else:
        rows.append("collapse rate in the paper-protocol arm: not yet run")
        ps.append(None)
    # 2. learning-rate window (descriptive: 2 tuning seeds give no test)
    parts = []
    for side in ("base", "vr"):
        runs = _runs(tune, pair=pair, batch=LARGE, side=side)
        if runs:
            per = {}
            for r in runs:
                per.setdefault(r["peak_lr"], []).append(r["final"]["val_acc"])
            rates = sorted(per)
            w = es.lr_window_width(rates, [np.mean(per[lr]) for lr in rates])
            parts.append(
                f"{side} {w['count']} grid rate"
                + (
                    " (the window is narrower than ×4, since it ends short of both "
                    "neighbouring grid points; the ×2 grid does not resolve it)"
                    if w["count"] == 1
                    else f"s, {w['log2_width']:.0f} octaves"
                )
            )
    rows.append(
        "learning-rate window within 1 pp of the best, batch 4096: "
        + (", ".join(parts) if parts else "not yet run")
        + " (descriptive, no test)"
    )
    ps.append(None)
    # 3. steps to 0.98 x batch-256 base final validation accuracy
    target = None
    small = _runs(final, pair=pair, batch=SMALL, side="base")
    if small:
        target = 0.98 * np.mean([r["final"]["val_acc"] for r in small])
    base, vr = (_by_seed(_runs(final, pair=pair, batch=LARGE, side=s)) for s in ("base", "vr"))
    seeds = sorted(set(base) & set(vr))
    if target is not None and len(seeds) >= 2:
        total = base[seeds[0]]["steps"]

        def reach(r):
            s = es.steps_to_target(
                [c["step"] for c in r["curve"]], [c["val_acc"] for c in r["curve"]], target
            )
            return total + r["curve"][0]["step"] if s is None else s  # censored

        best = max(max(c["val_acc"] for c in r["curve"]) for x in (base, vr) for r in x.values())
        if all(reach(x[s]) > total for x in (base, vr) for s in seeds):
            rows.append(
                f"steps to {target:.2f} % validation (0.98 x batch-256 base): no run of either "
                f"side reached it at batch {LARGE} (best validation accuracy of any run "
                f"{best:.2f} %), so there is nothing to compare"
            )
            ps.append(1.0)
        else:
            sm = es.paired_summary([reach(vr[s]) - reach(base[s]) for s in seeds])
            rows.append(
                f"steps to {target:.2f} % validation (0.98 x batch-256 base): VR − base "
                f"{sm['mean']:+.1f} steps, CI {_fmt_ci(sm['t_ci'])} (never reached counts as "
                "one epoch past the end)"
            )
            ps.append(sm["p_t"])
    else:
        rows.append("steps to 0.98 x batch-256 base validation accuracy: not yet run")
        ps.append(None)
    # 4. generalization gap at the end and at matched training loss
    if len(seeds) >= 2:
        d_end = [vr[s]["final"]["gap"] - base[s]["final"]["gap"] for s in seeds]
        sm = es.paired_summary(d_end)
        matched = []
        for s in seeds:
            loss = max(vr[s]["curve"][-1]["train_loss"], base[s]["curve"][-1]["train_loss"])
            g = [
                es.gap_at_loss(
                    [c["train_loss"] for c in r["curve"]],
                    [c["train_acc"] - c["val_acc"] for c in r["curve"]],
                    loss,
                )
                for r in (vr[s], base[s])
            ]
            if None not in g:
                matched.append(g[0] - g[1])
        extra = ""
        if len(matched) >= 2:
            mm = es.paired_summary(matched)
            extra = (
                f" Beside it, not in the Holm family: at matched training loss (train − "
                f"validation) {mm['mean']:+.2f} pp, CI {_fmt_ci(mm['t_ci'])}, p = "
                f"{mm['p_t']:.3g}."
            )
        rows.append(
            (
                f"generalization gap (train − test) at the end, VR − base: {sm['mean']:+.2f} "
                f"pp, CI {_fmt_ci(sm['t_ci'])}",
                extra,
            )
        )
        ps.append(sm["p_t"])
    else:
        rows.append("generalization gap: not yet run")
        ps.append(None)
    adj = es.holm(ps)
    lines.append("Secondary endpoints (Holm over 4; an endpoint without a test counts p = 1):")
    lines.append("")
    for row, p, a in zip(rows, ps, adj):
        row, extra = row if isinstance(row, tuple) else (row, "")
        lines.append(
            f"- {row}" + ("" if p is None else f"; p = {p:.3g}, Holm {a:.3g}") + "." + extra
        )
    lines.append("")
    return target


def _shuffled(final, controls, pair, lines):
    vr = _runs(final, pair=pair, batch=LARGE, side="vr")
    sh = _runs(controls, pair=pair, batch=LARGE, side="vr_shuffled")
    s = _paired(sh, vr)
    if s:
        lines.append(
            f"VR − VR-shuffled at 4096 (same rate and seeds, {s['n']} pairs): "
            f"{_delta_text(s)}: "
            + (
                "the GSNR information in the factor matters."
                if s["t_ci"][0] > 0
                else "no evidence that the factor's GSNR information (rather than its "
                "distribution) matters."
            )
            + _matched_note(sh, vr)
        )
    else:
        lines.append("VR − VR-shuffled at 4096: not yet run.")
    lines.append("")


def _matched_note(shuffled_runs, vr_runs):
    """The control's step size against VR's, from the recorded update norm ratios."""
    nr_sh, nr_vr = norm_ratio_range(shuffled_runs), norm_ratio_range(vr_runs)
    if not (nr_sh and nr_vr):
        return ""
    return (
        f" The control was not step-matched: its update norm ratio was {nr_sh[0]:.2f}–"
        f"{nr_sh[1]:.2f}, VR's {nr_vr[0]:.2f}–{nr_vr[1]:.2f}, so this contrast mixes the "
        "factor's information with a shorter step (round 3's norm-matched shuffle and "
        "scalar-VR arms separate them)."
    )


def _tuned_note(tune, lr):
    """How the mechanistic run's rate compares with the tuned base rate at batch 4096."""
    best = ((tune or {}).get("best") or {}).get(f"momentum/b{LARGE}")
    if not best:
        return "the tuned rates are not known yet"
    acc = [
        r["final"]["val_acc"]
        for r in _runs(tune, pair="momentum", batch=LARGE, side="base")
        if r["peak_lr"] == lr
    ]
    return f"{lr / best['base']:g}x the tuned base rate {best['base']:g}" + (
        f", where the base reached {np.mean(acc):.0f} % validation in tuning" if acc else ""
    )


def _mechanistic(mech, lines, tune=None):
    lines += ["#### Mechanistic checks", ""]
    if not mech:
        lines += ["Not yet run.", ""]
        return
    null = mech.get("null")
    if null:
        lines.append(
            "(a) Null calibration (replica gradients pure noise, true GSNR 0; the library's "
            "factor, gamma 0.1): "
            + "; ".join(
                f"k = {k}: mean factor {v['mean_factor']:.3f}, at gamma "
                f"{v['frac_at_gamma']:.3f}, at 1 {v['frac_at_one']:.3f}, norm ratio "
                f"{v['norm_ratio']:.3f}"
                for k, v in null.items()
            )
            + ". A factor with no signal in it already scales most elements down (all but "
            "the fraction at 1) and puts about a quarter at gamma; its mean is about 0.5. "
            "Per-layer values near these lines are what a factor without signal would also "
            "show, but a factor that does track the GSNR can sit close to them too (these "
            "marginal statistics barely move with the signal), so they cannot tell whether it "
            "carries information; check (b) asks that directly."
        )
        lines.append("")
    info = mech.get("informative")
    if info:
        lines += [
            f"(b, c) Along a base Momentum run at batch 4096 (peak lr {info['peak_lr']:g}, "
            "seed 0; the registered centre, fixed before tuning: "
            + _tuned_note(tune, info["peak_lr"])
            + "): Spearman correlation per layer of the k-replica factor with a "
            "reference GSNR from 256 micro-batches of 64 (mean of 3 batches), and the "
            "critical batch B_simple = tr(Σ)/|G|² (McCandlish et al. 2018).",
            "",
            "| epoch | val % | B_simple | dead elements % (mean over variables) | "
            "ρ k = 8 (per layer) | "
            "ρ k = 32 (per layer) |",
            "|---:|---:|---:|---:|---|---|",
        ]
        for cp in info["checkpoints"]:
            r8, r32 = (
                ", ".join(
                    "–" if v is None else f"{v:.2f}" for v in cp["spearman_factor"][k].values()
                )
                for k in ("8", "32")
            )
            dead = 100 * np.mean(list(cp.get("frac_dead", {"-": np.nan}).values()))
            lines.append(
                f"| {cp['epoch']} | {cp['val_acc']:.1f} | {cp['b_simple']:.0f} | {dead:.1f} | "
                f"{r8} | {r32} |"
            )
        lines += [
            "",
            "Layers in order: " + ", ".join(n.split("/", 1)[-1] for n in info["variables"]) + ".",
            "",
        ]
    toy = mech.get("toy")
    if toy:
        lines.append(
            f"(d) The paper's linear-regression toy (d = {toy['d']}, W_i = i, init 0, "
            f"{toy['steps']} steps, B = {toy['batch']}, {toy['seeds']} seeds; excess loss "
            "|w − W|²): "
            + "; ".join(
                f"lr {lr}: base {v['base_excess']:.3g}, best gamma {v['best_gamma']:g} "
                f"({v['gamma_sweep_k64'][str(v['best_gamma'])]:.3g}), best k {v['best_k']} "
                f"({v['k_sweep_gamma0.1'][str(v['best_k'])]:.3g})"
                for lr, v in toy["by_lr"].items()
            )
            + ". The paper's best gamma is 0.04–0.2 and best k 32–256."
        )
        by_lr = list(toy["by_lr"].values())
        n_gamma = sum(0.04 <= v["best_gamma"] <= 0.2 for v in by_lr)
        n_k = sum(32 <= v["best_k"] <= 256 for v in by_lr)
        lines.append("")
        lines.append(
            f"Does it reproduce? Best gamma inside the paper's 0.04–0.2 at {n_gamma} of "
            f"{len(by_lr)} learning rates, best k inside 32–256 at {n_k} of {len(by_lr)}."
        )
        lines.append("")


def _paper_power_note(vr_runs, lr, base_lr):
    """Why the paper arm could not show a rescue: VR shortens the step by its norm ratio
    only, far less than the overshoot of the tuned base rate."""
    nr = norm_ratio_range(vr_runs)
    if nr is None or not base_lr:
        return "."
    return (
        f". The arm had no power to show a rescue: its rate is {lr / base_lr:g}x the base's "
        f"tuned {base_lr:g}, and VR shortened its updates to only {nr[0]:.2f}–{nr[1]:.2f} of "
        "the gradient step here, so it could not bring this rate near a working one."
    )


def _paper_rate_note(tune, pair, lr):
    """Whether both sides already collapsed at the paper arm's rate in tuning."""
    tuned = [
        r["final"]["val_acc"]
        for r in _runs(tune, pair=pair, batch=LARGE)
        if r["peak_lr"] == lr and r["side"] in ("base", "vr")
    ]
    if tuned and max(tuned) < 20.0:
        return (
            " Both sides also collapsed at this rate in every tuning run, so this arm can only "
            "show VR rescuing a rate that fails for the base; it does not."
        )
    return ""


def norm_ratio_range(runs):
    """(min, max) over ``runs`` of each run's mean recorded update norm ratio
    ``||f * S1|| / ||S1||`` (over epochs and variables), or None without diagnostics."""
    per = []
    for r in runs:
        vals = [v["norm_ratio"] for d in r.get("diagnostics", []) for v in d["stats"].values()]
        if vals:
            per.append(float(np.mean(vals)))
    return (min(per), max(per)) if per else None


def _step_text(vr_runs, vr_lr):
    """How far VR's tuned step moved, from its recorded update norm ratios, or ""."""
    nr = norm_ratio_range(vr_runs)
    if nr is None:
        return ""
    return (
        f"VR's update was {nr[0]:.2f}–{nr[1]:.2f} times the plain gradient step, so at its rate "
        f"{vr_lr:g} it moved like the base at {vr_lr * nr[0]:.3f}–{vr_lr * nr[1]:.3f}"
    )


def _mean_acc(runs):
    return float(np.mean([r["final"]["test_acc"] for r in runs]))


def _mean_sd(runs):
    acc = [r["final"]["test_acc"] for r in runs]
    return f"{np.mean(acc):.2f} ± {np.std(acc, ddof=1):.2f}" if len(acc) > 1 else "–"


def headline(results_dir, pair="momentum"):
    """The evidence headline for the report's head and the README block.

    Args:
      results_dir: directory of the phase JSON files (``tune``, ``final``, ``controls``,
        ``paper``; any may be missing).
      pair: ``"momentum"`` or ``"lamb"``.

    Returns:
      Markdown bullet lines (str): the primary endpoint with its verdict and what its CI
      rules out, then batch 256, the VR-shuffled control and the paper-protocol arm where
      they exist; empty if fewer than 2 seed pairs of ``pair`` finished at batch 4096.
      Every number is computed from the JSON.
    """
    tune, final, controls, paper = (
        _load(results_dir, p) for p in ("tune", "final", "controls", "paper")
    )
    base_l, vr_l = PAIR_LABEL[pair]
    base = _runs(final, pair=pair, batch=LARGE, side="base")
    vr = _runs(final, pair=pair, batch=LARGE, side="vr")
    s = _paired(base, vr)
    if not s:
        return []
    best = (tune or {}).get("best", {})
    rates = best.get(f"{pair}/b{LARGE}", {})

    partial = "" if s["n"] >= 6 else f" (partial: {s['n']} of 6 registered pairs)"
    out = [
        f"- **Fashion-MNIST, {base_l} vs {vr_l}, global batch {LARGE} (16x the batch-256 "
        f"reference), 8 replicas, 30 epochs, each side's learning rate tuned on validation "
        f"with the same grid and seeds** (peak learning rates: base {rates.get('base', '?'):g}, "
        f"VR {rates.get('vr', '?'):g}), {s['n']} fresh seed pairs{partial}: test accuracy "
        f"(mean ± sd over seeds) base "
        f"{_mean_sd(base)} %, VR {_mean_sd(vr)} %; **Δ = VR − base {_delta_text(s)} "
        f'(bootstrap {_fmt_ci(s["boot_ci"])}): "{s["verdict"]}"** '
        f"(pre-registered rule on the t interval, ±1 pp margin). {_rule_out(s)} " + _boot_note(s)
    ]
    small = [_runs(final, pair=pair, batch=SMALL, side=x) for x in ("base", "vr")]
    if all(len(r) > 1 for r in small):
        ss = _paired(*small)
        small_ci = f"; Δ {_delta_text(ss)}" if ss else ""
        out.append(
            f"- Same protocol at batch {SMALL} (tuned): test accuracy base "
            f"{_mean_sd(small[0])} %, VR {_mean_sd(small[1])} %{small_ci}. At batch {LARGE} "
            f"both sides end {_mean_acc(small[1]) - _mean_acc(vr):.0f} to "
            f"{_mean_acc(small[0]) - _mean_acc(base):.0f} pp lower after the same 30 epochs: "
            "VRGD does not close the large-batch gap here."
        )
    sh = _runs(controls, pair=pair, batch=LARGE, side="vr_shuffled")
    ss = _paired(sh, vr)
    if ss:
        sb = _paired(base, sh)
        vs_base = ""
        if sb:
            step = _step_text(vr, rates.get("vr", vr[0]["peak_lr"]))
            vs_base = (
                f" The shuffled control itself reaches {_mean_sd(sh)} %, VR-shuffled − base "
                f"{_delta_text(sb)}: these data do not separate the factor's GSNR "
                "information from the step size"
                + (
                    f" ({step}: a larger step than the base's tuned "
                    f"{rates.get('base', float('nan')):g}, between the base's ×2 grid points)"
                    if step
                    else ""
                )
                + "."
            )
        nr_sh, nr_vr = norm_ratio_range(sh), norm_ratio_range(vr)
        matched = (
            f"; not step-matched: its update norm ratio was {nr_sh[0]:.2f}–{nr_sh[1]:.2f}, "
            f"VR's {nr_vr[0]:.2f}–{nr_vr[1]:.2f}"
            if nr_sh and nr_vr
            else ""
        )
        out.append(
            f"- Control, VR − VR-shuffled (the factor permuted within each variable every "
            f"step: same distribution, no GSNR information; at VR's rate{matched}), "
            f"{ss['n']} pairs: {_delta_text(ss)}.{vs_base}"
        )
    pb, pv = (_by_seed(_runs(paper, pair=pair, side=x)) for x in ("base", "vr"))
    pseeds = sorted(set(pb) & set(pv))
    if pseeds:
        c = es.collapse_test(
            [pb[x]["final"]["test_acc"] for x in pseeds],
            [pv[x]["final"]["test_acc"] for x in pseeds],
        )
        lr = pb[pseeds[0]]["peak_lr"]
        out.append(
            f"- Paper protocol (both sides untuned at the square-root-scaled rate "
            f"{lr:g}), {c['n']} pairs: collapse to < 20 % test accuracy base "
            f"{round(c['base_rate'] * c['n'])}/{c['n']}, VR {round(c['vr_rate'] * c['n'])}/"
            f"{c['n']} (exact McNemar p = {c['p']:.2g}); test accuracy base {_mean_sd(list(pb.values()))} %, "
            f"VR {_mean_sd(list(pv.values()))} %"
            + (
                ": VR does not prevent the collapse here (the paper's largest claim is that "
                "it does: +75 pp at batch 4k on CIFAR-10)"
                if c["vr_rate"] > 0 and c["vr_rate"] >= c["base_rate"]
                else ""
            )
            + _paper_power_note(list(pv.values()), lr, rates.get("base"))
            + _paper_rate_note(tune, pair, lr)
        )
    return out


def _disclosures(tune, final, controls, paper, mech, pair="momentum"):
    """What round 2 did not state at the time, computed from its JSON."""
    out = []
    best = (tune or {}).get("best", {})
    b_small, b_large = (best.get(f"{pair}/b{b}") for b in (SMALL, LARGE))
    if b_small and b_large:
        ratios = {b: v["vr"] / v["base"] for b, v in ((SMALL, b_small), (LARGE, b_large))}
        out.append(
            "The tuned rates differ by exactly one step of the ×2 grid at both batches (VR/base "
            + ", ".join(f"{r:g}x at {b}" for b, r in ratios.items())
            + "), so the two sides were compared on effectively offset grids."
        )
        out.append(
            f"The tuned rate falls with the batch: base {b_small['base']:g} at {SMALL} → "
            f"{b_large['base']:g} at {LARGE}, VR {b_small['vr']:g} → {b_large['vr']:g} (the "
            "opposite of any scaling rule: a stability-limited regime)."
        )
    out += _small_batch_outlier(final, pair)
    n_test = sum("test_acc" in r["final"] for r in _runs(tune))
    if n_test:
        out.append(
            f"Test accuracy was computed and stored in all {n_test} tuning runs (no choice "
            "used it: every choice is on validation accuracy)."
        )
    versions = []
    for name, st in (("tune", tune), ("final", final), ("controls", controls), ("paper", paper)):
        lib = ((st or {}).get("environment") or {}).get("library") or {}
        if lib.get("git_head"):
            dirty = lib.get("git_status_vrgd_tf")
            versions.append(
                f"{name} {lib['git_head'][:7]}"
                + (f" (uncommitted: {dirty.strip()})" if dirty else "")
            )
    if versions:
        out.append(
            "Code versions were recorded once per phase, from the files on disk at the first "
            "save, not per run nor from the imported modules: " + "; ".join(versions) + "."
        )
    if not out:
        return []
    return (
        ["Disclosed after the runs (from the review of round 2):", ""]
        + [f"- {x}" for x in out]
        + [""]
    )


def _small_batch_outlier(final, pair):
    b = _by_seed(_runs(final, pair=pair, batch=SMALL, side="base"))
    v = _by_seed(_runs(final, pair=pair, batch=SMALL, side="vr"))
    seeds = sorted(set(b) & set(v))
    if len(seeds) < 4:
        return []
    worst = min(seeds, key=lambda x: v[x]["final"]["test_acc"])
    rest = es.paired_summary(
        [v[x]["final"]["test_acc"] - b[x]["final"]["test_acc"] for x in seeds if x != worst]
    )
    full = _paired(list(b.values()), list(v.values()))
    return [
        f"At batch {SMALL} one VR seed ({worst}: {v[worst]['final']['test_acc']:.2f} %) drives "
        f"the result: Δ {full['mean']:+.2f} pp with it, {rest['mean']:+.2f} ± {rest['sd']:.2f} "
        "pp (mean ± sd) without it."
    ]


def section(results_dir, images_dir, images_rel):
    """The evidence section (markdown) for docs/results.md; writes its plots.

    Args:
      results_dir: directory of the phase JSON files (studies/evidence/results/round2).
      images_dir: where the PNGs go.
      images_rel: ``images_dir`` relative to the markdown file (for the links).

    Returns:
      The section as one string (starts with a ``## `` heading, ends with a newline).
    """
    tune, final, controls, paper, mech = (
        _load(results_dir, p) for p in ("tune", "final", "controls", "paper", "mechanistic")
    )
    lines = [
        "### Round 2: tuned base vs VR (pre-registered)",
        "",
        "The protocol, fixed before any run: "
        "[studies/evidence/ROUND2_PROTOCOL.md](../studies/evidence/ROUND2_PROTOCOL.md); runner "
        "`python3 studies/evidence/round2.py`. Verdict words, decided by the "
        '95 % t interval of the paired Δ only: "VR better" (CI above 0 and mean ≥ +1 pp), '
        '"equivalent" (CI inside ±1 pp), "worse" (CI below 0), otherwise '
        '"inconclusive".',
        "",
    ]
    lines += _disclosures(tune, final, controls, paper, mech)
    os.makedirs(images_dir, exist_ok=True)
    for pair in ("momentum", "lamb"):
        if pair != "momentum" and not any(
            _runs(s, pair=pair) for s in (tune, final, controls, paper)
        ):
            continue
        base_l, vr_l = PAIR_LABEL[pair]
        lines += [f"#### {base_l} vs {vr_l}", ""]
        _primary(final, pair, lines)
        target = _secondary(tune, final, paper, pair, lines)
        _shuffled(final, controls, pair, lines)
        lines += ["Tuning (validation accuracy at the end of training):", ""]
        lines += _tuning_lines(tune, pair) + [""]
        plots = [
            (plot_tuning(tune, pair, _p(images_dir, f"evidence_tuning_{pair}.png")),
             f"evidence_tuning_{pair}.png", "validation accuracy vs learning rate"),
            (plot_tuned_vs_batch(final, pair, _p(images_dir, f"evidence_batch_{pair}.png")),
             f"evidence_batch_{pair}.png", "tuned test accuracy vs batch"),
            (plot_curves(final, controls, pair, target,
                         _p(images_dir, f"evidence_curves_{pair}.png")),
             f"evidence_curves_{pair}.png", "validation curves at 4096"),
            (plot_gap_vs_loss(final, pair, _p(images_dir, f"evidence_gap_{pair}.png")),
             f"evidence_gap_{pair}.png", "gap vs training loss"),
            (plot_factor_stats(final, controls, mech, pair,
                               _p(images_dir, f"evidence_factor_{pair}.png")),
             f"evidence_factor_{pair}.png", "factor statistics over training"),
        ]  # fmt: skip
        for ok, name, alt in plots:
            if ok:
                lines += [f"![{alt}]({images_rel}/{name})", ""]
    _mechanistic(mech, lines, tune)
    if plot_spearman(mech, _p(images_dir, "evidence_spearman.png")):
        lines += [f"![factor vs reference GSNR]({images_rel}/evidence_spearman.png)", ""]
    done = {
        p: len((s or {}).get("runs", {}))
        for p, s in (("tune", tune), ("final", final), ("controls", controls), ("paper", paper))
    }
    lines += [
        "Runs finished per phase: " + ", ".join(f"{p} {n}" for p, n in done.items()) + ".",
        "",
    ]
    return "\n".join(lines)


def _p(d, name):
    return os.path.join(d, name)
