"""Batch-size sweep: per data set, final accuracy and gap vs batch, steps to target, curves.

Input: ``sweep.py``'s JSON (``studies/sweeps/results/sweep.json``)."""

import os

import numpy as np

from report.sweeps.common import (
    PAIR_LABEL,
    VR_LABEL,
    first_reach,
    main_runs,
    mean_curve,
    n_div,
    paired,
    pct,
    pm,
    pyplot,
    select_side,
    verdict,
)


def _base_and_vr(runs, cfg, ds, batches):
    """``(pair, batch, base runs, VR runs)`` of the sweep proper, pair by pair, batch by batch."""
    for pair in cfg["pairs"]:
        for b in batches:
            base = select_side(runs, cfg, ds, pair, "base", b)
            yield pair, b, base, select_side(runs, cfg, ds, pair, "vr", b)


def render(ctx, lines):
    sweep = ctx.result("sweep")
    if not sweep:
        return
    img_rel, img_dir, headline = ctx.img_rel, ctx.img_dir, ctx.headline
    cfg = sweep["config"]
    runs = main_runs(sweep)
    status = (
        "complete"
        if sweep.get("complete")
        else f"**partial** ({len(runs)} runs; the sweep was still running or stopped)"
    )
    lines += (
        [
            "## Batch-size sweep",
            "",
            f"Command: `{sweep['command']}`  ",
            f"Status: {status}; wall time {sweep.get('elapsed_s', 0) / 60:.1f} min"
            f" (started {sweep.get('started')}).",
            "",
        ]
        + [
            f"Resumed from an earlier invocation: `{h.get('command')}` (started {h.get('started')},"
            f" seeds {h.get('seeds')}, {h.get('runs_at_stop')} runs kept; runs are keyed by their "
            "own settings, so kept runs are identical to what this command would produce)."
            for h in sweep.get("history", [])
        ]
        + [
            "",
            "Setup (from the results file): "
            + "; ".join(
                [
                    f"model {cfg['model']}",
                    f"{cfg['replicas']} logical CPU replicas, MirroredStrategy + ReductionToOneDevice",
                    f"seeds 0..{cfg['seeds'] - 1} (seed = initial weights and data order, shared by "
                    "base and VR)",
                    f"learning rate: {cfg['lr_rule']}-scaled from the base batch, {cfg['schedule']}, "
                    f"warm-up fraction {cfg['warmup_frac']}",
                    "VR: gamma 0.1, beta_3 = library default (0 for Momentum/LARS, 0.9 for Adam/LAMB)",
                ]
            )
            + ".",
            "",
        ]
    )
    ds_info = sweep.get("datasets", {})
    for ds in cfg["datasets"]:
        info = ds_info.get(ds, {})
        batches = cfg["batches"] if ds == "mnist1d" else cfg["digits_batches"]
        base_b = cfg["base_batch"] if ds == "mnist1d" else cfg["digits_base_batch"]
        epochs = cfg["epochs"] if ds == "mnist1d" else cfg["digits_epochs"]
        lrs = cfg["base_lr"][ds] if isinstance(cfg["base_lr"].get(ds), dict) else cfg["base_lr"]
        lines += [
            f"### {ds}",
            "",
            f"{info.get('num_train', '?')} train / {info.get('num_test', '?')} test "
            f"({info.get('source') or info.get('generator')}); {epochs} epochs at every "
            f"batch; base learning rates at batch {base_b}: "
            + ", ".join(f"{PAIR_LABEL[p]} {lrs[p]:g}" for p in cfg["pairs"] if p in lrs)
            + ".",
            "",
        ]
        lines += [
            "Final test accuracy (%), generalization gap = train − test accuracy (pp), "
            "mean ± std over seeds; Δ = VR − base, paired by seed (mean ± std). 'div' = runs that diverged (train acc < 15% "
            "or non-finite loss). Verdict: two-sided paired t-test at 5% on the per-seed Δ "
            "(n/a below 3 seeds).",
            "",
            "| pair | batch | steps | base test | VR test | Δ test | verdict | base gap | "
            "VR gap | Δ gap | div (base/VR) |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for pair, b, base, vr in _base_and_vr(runs, cfg, ds, batches):
            if not base and not vr:
                continue
            pb, pv = paired(base, vr)
            dt = [v["final"]["test_acc"] - u["final"]["test_acc"] for u, v in zip(pb, pv)]
            dg = [v["final"]["gap"] - u["final"]["gap"] for u, v in zip(pb, pv)]
            steps = (base or vr)[0]["steps"]
            lines.append(
                f"| {PAIR_LABEL[pair]} | {b} | {steps} | "
                f"{pm([r['final']['test_acc'] for r in base])} | "
                f"{pm([r['final']['test_acc'] for r in vr])} | {pm(dt)} | "
                f"{verdict(dt) if dt else '—'} | "
                f"{pm([r['final']['gap'] for r in base])} | "
                f"{pm([r['final']['gap'] for r in vr])} | {pm(dg)} | "
                f"{n_div(base)}/{n_div(vr)} |"
            )
            if b == max(batches) and dt:
                headline.append(
                    (
                        ds,
                        pair,
                        b,
                        dt,
                        dg,
                        len(dt),
                        [u["final"]["test_acc"] for u in pb],
                        [v["final"]["test_acc"] for v in pv],
                    )
                )
        lines.append("")
        name = f"acc_vs_batch_{ds}.png"
        plot_acc_vs_batch(sweep, ds, os.path.join(img_dir, name))
        lines += [f"![test accuracy and gap vs batch, {ds}]({img_rel}/{name})", ""]

        # Steps to target.
        lines += [
            "Steps to reach the base optimizer's best test accuracy (target = maximum of the "
            "base's seed-mean test-accuracy curve, evaluated "
            f"{cfg['evals_per_epoch']}x per epoch; '—' = VR's seed-mean curve never reached "
            "it):",
            "",
            "| pair | batch | target (%) | base steps | VR steps | VR/base | VR best (%) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for pair, b, base, vr in _base_and_vr(runs, cfg, ds, batches):
            pb, pv = paired(base, vr)
            if not pb:
                continue
            sb, ab = mean_curve(pb)
            sv, av = mean_curve(pv)
            target = max(ab)
            nb, nv = first_reach(sb, ab, target), first_reach(sv, av, target)
            ratio = f"{nv / nb:.2f}" if nv and nb else "—"
            lines.append(
                f"| {PAIR_LABEL[pair]} | {b} | {pct(target)} | {nb} | "
                f"{nv if nv else '—'} | {ratio} | {pct(max(av))} |"
            )
        lines.append("")
        big = max(batches)
        name = f"curves_{ds}_b{big}.png"
        plot_curves(sweep, ds, big, os.path.join(img_dir, name))
        lines += [
            f"Test-accuracy curves at batch {big} (thin: seeds, thick: mean):",
            "",
            f"![curves {ds} batch {big}]({img_rel}/{name})",
            "",
        ]


def plot_acc_vs_batch(sweep, ds, path):
    plt = pyplot()
    cfg = sweep["config"]
    runs = main_runs(sweep)
    batches = cfg["batches"] if ds == "mnist1d" else cfg["digits_batches"]
    pairs = cfg["pairs"]
    fig, axes = plt.subplots(2, len(pairs), figsize=(3.4 * len(pairs), 6.2), squeeze=False)
    for j, pair in enumerate(pairs):
        for side, color, label in (
            ("base", "tab:blue", PAIR_LABEL[pair]),
            ("vr", "tab:red", VR_LABEL[pair]),
        ):
            for row, metric in ((0, "test_acc"), (1, "gap")):
                xs, ms, ss = [], [], []
                for b in batches:
                    rs = select_side(runs, cfg, ds, pair, side, b)
                    if not rs:
                        continue
                    v = [r["final"][metric] for r in rs]
                    xs.append(b)
                    ms.append(100 * np.mean(v))
                    ss.append(100 * (np.std(v, ddof=1) if len(v) > 1 else 0))
                if xs:
                    axes[row][j].errorbar(
                        xs, ms, yerr=ss, marker="o", capsize=3, color=color, label=label
                    )
        for row, ylabel in ((0, "test accuracy (%)"), (1, "train − test accuracy (pp)")):
            ax = axes[row][j]
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches)
            ax.set_xticklabels([str(b) for b in batches])
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel(ylabel)
            if row == 1:
                ax.set_xlabel("global batch")
        axes[0][j].set_title(PAIR_LABEL[pair])
        axes[0][j].legend(fontsize=8, loc="lower left")
    fig.suptitle(
        f"{ds}: final test accuracy and generalization gap vs batch "
        f"(mean ± std over seeds, {cfg['replicas']} replicas, fixed epochs)"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_curves(sweep, ds, batch, path):
    plt = pyplot()
    cfg = sweep["config"]
    runs = main_runs(sweep)
    pairs = cfg["pairs"]
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.4 * len(pairs), 3.3), squeeze=False)
    for j, pair in enumerate(pairs):
        ax = axes[0][j]
        for side, color, label in (
            ("base", "tab:blue", PAIR_LABEL[pair]),
            ("vr", "tab:red", VR_LABEL[pair]),
        ):
            rs = select_side(runs, cfg, ds, pair, side, batch)
            for r in rs:
                ax.plot(
                    [c["step"] for c in r["curve"]],
                    [100 * c["test_acc"] for c in r["curve"]],
                    color=color,
                    alpha=0.25,
                    lw=0.8,
                )
            s, a = mean_curve(rs)
            if s:
                ax.plot(s, [100 * x for x in a], color=color, lw=2, label=label)
        ax.set_title(f"{PAIR_LABEL[pair]}, batch {batch}")
        ax.set_xlabel("step")
        if j == 0:
            ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
