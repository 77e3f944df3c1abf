"""k (replicas) and gamma ablations of the sweep.

Input: ``sweep.py``'s JSON (experiments ``k`` and ``gamma``)."""

import os

import numpy as np

from report.sweeps.common import (
    PAIR_LABEL,
    VR_LABEL,
    main_runs,
    paired,
    pct,
    pm,
    pyplot,
    select,
    verdict,
)


def _last_epoch_medians(vr, index):
    """Per run with GSNR records: median over variables of field ``index`` (0 mean GSNR,
    1 fraction at gamma, 2 fraction at 1) at the last epoch."""
    return [
        float(np.median([s[index] for s in r["gsnr"][-1]["stats"].values()]))
        for r in vr
        if r["gsnr"]
    ]


def render(ctx, lines):
    sweep = ctx.result("sweep")
    if not sweep:
        return
    img_rel, img_dir = ctx.img_rel, ctx.img_dir
    cfg = sweep["config"]
    # Ablations: only the ablation seeds, so that every row has the same seeds.
    ab_seeds = set(range(cfg.get("ablation_seeds") or cfg["seeds"]))
    all_runs = [r for r in main_runs(sweep) if r["seed"] in ab_seeds]
    ab_ds, ab_pair, ab_b = cfg["ablation_dataset"], cfg["ablation_pair"], cfg["ablation_batch"]
    if "k" in cfg["experiments"]:
        rows = []
        lines += [
            f"### k ablation ({PAIR_LABEL[ab_pair]}, {ab_ds}, batch {ab_b}, seeds "
            f"{sorted(ab_seeds)})",
            "",
            "Replicas k change how many shards the GSNR is estimated from (and the "
            "per-replica batch); the base optimizer's maths does not depend on k.",
            "",
            "| k | per-replica batch | base test | VR test | Δ test | verdict | VR gap | "
            "VR % at gamma (last epoch) |",
            "|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for k in cfg["k_values"]:
            base = select(
                all_runs, dataset=ab_ds, pair=ab_pair, side="base", batch=ab_b, replicas=k
            )
            vr = select(
                all_runs, dataset=ab_ds, pair=ab_pair, side="vr", batch=ab_b, replicas=k, gamma=0.1
            )
            if not base and not vr:
                continue
            pb, pv = paired(base, vr)
            dt = [v["final"]["test_acc"] - u["final"]["test_acc"] for u, v in zip(pb, pv)]
            fg = _last_epoch_medians(vr, 1)
            lines.append(
                f"| {k} | {ab_b // k} | {pm([r['final']['test_acc'] for r in base])}"
                f" | {pm([r['final']['test_acc'] for r in vr])} | {pm(dt)} | "
                f"{verdict(dt) if dt else '—'} | "
                f"{pm([r['final']['gap'] for r in vr])} | "
                f"{pct(np.mean(fg) if fg else None, 1)} |"
            )
            rows.append(
                {
                    "x": k,
                    "base": [r["final"]["test_acc"] for r in base],
                    "vr": [r["final"]["test_acc"] for r in vr],
                }
            )
        lines.append("")
        if rows:
            plot_ablation(
                rows,
                "replicas k",
                f"k ablation: {PAIR_LABEL[ab_pair]} vs {VR_LABEL[ab_pair]}, {ab_ds}, batch {ab_b}",
                os.path.join(img_dir, "ablation_k.png"),
                xlog=True,
            )
            lines += [f"![k ablation]({img_rel}/ablation_k.png)", ""]
    if "gamma" in cfg["experiments"]:
        rows = []
        base = select(
            all_runs, dataset=ab_ds, pair=ab_pair, side="base", batch=ab_b, replicas=cfg["replicas"]
        )
        lines += [
            f"### gamma ablation ({VR_LABEL[ab_pair]}, {ab_ds}, batch {ab_b}, "
            f"{cfg['replicas']} replicas, seeds {sorted(ab_seeds)})",
            "",
            f"Base {PAIR_LABEL[ab_pair]}: test {pm([r['final']['test_acc'] for r in base])}"
            f", gap {pm([r['final']['gap'] for r in base])}. gamma = 1 must reproduce "
            "the base optimizer exactly (factor identically 1).",
            "",
            "| gamma | VR test | Δ test vs base | verdict | VR gap | % at gamma | "
            "% at 1 | max abs Δ test vs base |",
            "|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for g in cfg["gammas"]:
            vr = select(
                all_runs,
                dataset=ab_ds,
                pair=ab_pair,
                side="vr",
                batch=ab_b,
                replicas=cfg["replicas"],
                gamma=g,
            )
            if not vr:
                continue
            pb, pv = paired(base, vr)
            dt = [v["final"]["test_acc"] - u["final"]["test_acc"] for u, v in zip(pb, pv)]
            fg = _last_epoch_medians(vr, 1)
            f1 = _last_epoch_medians(vr, 2)
            lines.append(
                f"| {g:g} | {pm([r['final']['test_acc'] for r in vr])} | {pm(dt)} | "
                f"{verdict(dt) if dt else '—'} | "
                f"{pm([r['final']['gap'] for r in vr])} | "
                f"{pct(np.mean(fg) if fg else None, 1)} | "
                f"{pct(np.mean(f1) if f1 else None, 1)} | "
                f"{pct(max(abs(x) for x in dt) if dt else None, 3)} |"
            )
            rows.append(
                {
                    "x": g,
                    "vr": [r["final"]["test_acc"] for r in vr],
                    "base": [r["final"]["test_acc"] for r in base],
                }
            )
        lines.append("")
        if rows:
            plot_ablation(
                rows,
                "gamma (log scale)",
                f"gamma: {VR_LABEL[ab_pair]} (base = {PAIR_LABEL[ab_pair]}), {ab_ds}, batch {ab_b}",
                os.path.join(img_dir, "ablation_gamma.png"),
                xlog=True,
            )
            lines += [f"![gamma ablation]({img_rel}/ablation_gamma.png)", ""]


def plot_ablation(rows, xlabel, title, path, xlog=False):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    xs = [r["x"] for r in rows]
    for key, color, label in (("base", "tab:blue", "base"), ("vr", "tab:red", "VR")):
        pts = [(r["x"], r[key]) for r in rows if r.get(key)]
        if not pts:
            continue
        m = [100 * np.mean(v) for _, v in pts]
        s = [100 * (np.std(v, ddof=1) if len(v) > 1 else 0) for _, v in pts]
        ax.errorbar([x for x, _ in pts], m, yerr=s, marker="o", capsize=3, color=color, label=label)
    if xlog:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
