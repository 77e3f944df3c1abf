"""GSNR statistics during the sweep: median over variables, first and last epoch, and a plot.

Input: ``sweep.py``'s JSON (the VR runs' ``gsnr`` records)."""

import os

import numpy as np

from report.sweeps.common import VR_LABEL, main_runs, pyplot, select_side


def render(ctx, lines):
    sweep = ctx.result("sweep")
    if not sweep:
        return
    img_rel, img_dir = ctx.img_rel, ctx.img_dir
    cfg = sweep["config"]
    runs = main_runs(sweep)
    ds0 = cfg["datasets"][0]
    b0 = cfg["batches"] if ds0 == "mnist1d" else cfg["digits_batches"]
    lines += [
        "### GSNR statistics during training",
        "",
        "Read with `opt.vrgd_statistics()` after every epoch (the values of that "
        "epoch's last step): per variable, the mean GSNR `r` and the fraction of "
        "elements whose factor is clipped at gamma. Median over the variables, seed-"
        "mean, first and last epoch:",
        "",
        "| pair | batch | mean GSNR, epoch 1 | mean GSNR, last | % at gamma, epoch 1 | "
        "% at gamma, last | % at 1, last |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pair in cfg["pairs"]:
        for b in b0:
            vr = select_side(runs, cfg, ds0, pair, "vr", b)
            vr = [r for r in vr if r["gsnr"]]
            if not vr:
                continue

            def med(r, idx, field):
                return float(np.median([v[field] for v in r["gsnr"][idx]["stats"].values()]))

            cells = []
            for idx, field, scale in (
                (0, 0, 1),
                (-1, 0, 1),
                (0, 1, 100),
                (-1, 1, 100),
                (-1, 2, 100),
            ):
                cells.append(f"{scale * np.mean([med(r, idx, field) for r in vr]):.3g}")
            lines.append(f"| {VR_LABEL[pair]} | {b} | " + " | ".join(cells) + " |")
    lines.append("")
    name = "gsnr_evolution.png"
    gp = [p for p in (cfg.get("ablation_pair"), "momentum") if p in cfg["pairs"]]
    gp = list(dict.fromkeys(gp))[:2]
    plot_gsnr(sweep, ds0, [min(b0), max(b0)], gp, os.path.join(img_dir, name))
    lines += [f"![GSNR evolution]({img_rel}/{name})", ""]


def plot_gsnr(sweep, ds, batches, pairs, path):
    """Mean GSNR and fraction clipped at gamma per variable over training (seed 0)."""
    plt = pyplot()
    cfg = sweep["config"]
    runs = main_runs(sweep)
    cols = [(p, b) for p in pairs for b in batches]
    fig, axes = plt.subplots(2, len(cols), figsize=(3.4 * len(cols), 6.0), squeeze=False)
    for j, (pair, batch) in enumerate(cols):
        rs = select_side(runs, cfg, ds, pair, "vr", batch)
        if not rs or not rs[0]["gsnr"]:
            continue
        r = rs[0]
        names = list(r["gsnr"][0]["stats"])
        steps = [g["step"] for g in r["gsnr"]]
        for name in names:
            style = "-" if name.endswith("kernel") else ":"
            short = name.replace("cnn1d/", "")
            axes[0][j].plot(
                steps, [g["stats"][name][0] for g in r["gsnr"]], style, marker=".", label=short
            )
            axes[1][j].plot(
                steps,
                [100 * g["stats"][name][1] for g in r["gsnr"]],
                style,
                marker=".",
                label=short,
            )
        axes[0][j].set_yscale("log")
        axes[0][j].set_title(f"{VR_LABEL[pair]}, batch {batch} (seed {r['seed']})")
        axes[1][j].set_xlabel("step")
        for row in (0, 1):
            axes[row][j].grid(alpha=0.3)
        if j == 0:
            axes[0][j].set_ylabel("mean GSNR of the variable")
            axes[1][j].set_ylabel("% elements clipped at gamma")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"{ds}: GSNR statistics at the last step of each epoch (solid: kernels, dotted: biases)"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
