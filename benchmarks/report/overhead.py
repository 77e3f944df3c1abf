"""Overhead of VR-X over X: step-time ratios, optimizer state and peak memory.

Input: ``overhead.py``'s JSON (``benchmarks/results/overhead.json``)."""

import os

from report.common import PAIR_LABEL, VARIANT_LABEL, pyplot


def render(ctx, lines):
    ov = ctx.result("overhead")
    if not ov:
        return
    img_rel, img_dir, headline_ov = ctx.img_rel, ctx.img_dir, ctx.headline_ov
    lines += [
        "## Overhead of VR-X over X",
        "",
        f"Command: `{ov['command']}`  ",
        f"Status: {'complete' if ov.get('complete') else '**partial**'}; wall time "
        f"{ov.get('elapsed_s', 0) / 60:.1f} min.",
        "",
        "Step time of compiled train steps (`tf.function` around `strategy.run`, fixed "
        "batch, steps looped inside the function, tracing and one warm-up call "
        "excluded). Variants are built side by side in one process and timed in "
        "rotating order in every repetition; ratios are variant/base within a "
        "repetition ('min/min': fastest repetition of the variant over the fastest of "
        "base, less sensitive to load spikes). 'graph ops' counts the nodes of the traced step (all replicas "
        "unrolled), a proxy for fixed per-step cost on CPU.",
        "",
        "Variants: " + "; ".join(f"`{k}` = {v}" for k, v in VARIANT_LABEL.items()) + ".",
        "",
    ]
    for e in ov["timing"]:
        lines += [
            f"### {e['model']}, {PAIR_LABEL.get(e['pair'], e['pair'])}, batch "
            f"{e['batch']} ({e['per_replica_batch']}/replica), {e['replicas']} replicas"
            f", {e['params']:,} parameters in {e['trainable_variables']} variables",
            "",
            f"{e['reps']} repetitions of {e['steps_per_call']} steps. Family: "
            f"{e['family']}." + (f" Data: {e['data']}." if e.get("data") else ""),
            "",
            "| variant | step ms (median) | ratio min | ratio median | ratio max | "
            "min/min | graph ops | optimizer state MB (all replicas) | "
            "weights vs reference |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for v, r in e["ratio"].items():
            wc = e.get("weights_check", {}).get(v)
            wtxt = f"{wc['max_abs_diff_rel']:.1e} vs {wc['vs']}" if wc else ""
            sb = (e.get("state_bytes") or {}).get(v)
            stxt = f"{sb['optimizer_state_bytes'] / 2**20:.2f}" if sb else "—"
            rm = e.get("ratio_of_min", {}).get(v)
            mm = f"{rm:.3f}" if rm is not None else "—"
            lines.append(
                f"| {VARIANT_LABEL.get(v, v)} | {e['step_ms'][v]['median']:.1f} | "
                f"{r['min']:.3f} | {r['median']:.3f} | {r['max']:.3f} | "
                f"{mm} | {e['graph_ops'].get(v) or '—'} | {stxt} | {wtxt} |"
            )
        sb = e.get("state_bytes") or {}
        if sb.get("base") and sb.get("vr"):
            lines += [
                "",
                f"Model weights {sb['base']['model_bytes'] / 2**20:.2f} MB over all "
                f"{e['replicas']} replica copies; VR adds "
                f"{(sb['vr']['optimizer_state_bytes'] - sb['base']['optimizer_state_bytes']) / 2**20:.2f}"
                " MB of optimizer state (exact, all replicas), i.e. "
                f"{(sb['vr']['optimizer_state_bytes'] - sb['base']['optimizer_state_bytes']) / sb['base']['model_bytes']:.2f}"
                "x the weights.",
            ]
        parts = e.get("parts_of_base_median", {})
        if parts:
            names = {
                "aggregation_path": "replica-context all_reduce instead of "
                "OptimizerV2's default aggregation",
                "a_allreduce_squares": "(a) all-reduce of the squares",
                "b_gsnr_math_and_state": "(b) element-wise GSNR math and factor state "
                "(vr_nostats − sq)",
                "c_diagnostics_every_step": "(c) diagnostics on every step (vr − vr_nostats)",
            }
            lines += [
                "",
                "Extra time as a fraction of the base step (medians): "
                + "; ".join(f"{names.get(k, k)} {100 * x:+.1f}%" for k, x in parts.items())
                + ".",
            ]
        lines.append("")
        if "vr" in e["ratio"]:
            headline_ov.append(e)
    name = "overhead.png"
    if ov["timing"]:
        plot_overhead(ov, os.path.join(img_dir, name))
        lines += [f"![overhead ratios]({img_rel}/{name})", ""]
    for err in ov.get("bert_errors", []):
        lines += [f"A BERT-tiny row failed: `{err[:300]}`", ""]
    if ov.get("memory"):
        lines += [
            "### Peak memory",
            "",
            f"Method: {ov['memory_method']}. `tf.config.experimental.get_memory_info` "
            f"on CPU: {ov['tf_get_memory_info_cpu']}. 'increment' = peak RSS minus the "
            "RSS just before the model was built (TensorFlow's own footprint removed). "
            "Peak RSS on CPU includes graph construction and optimisation, which for "
            "these small models dwarfs the tensors.",
            "",
            "| model | pair | batch | variant | base peak MB | variant peak MB | "
            "peak ratio (min/median/max) | increment ratio (min/median/max) |",
            "|---|---|---:|---|---:|---:|---:|---:|",
        ]
        for m in ov["memory"]:
            for v, r in m.items():
                if not isinstance(r, dict) or "peak_ratio" not in r:
                    continue
                pr, ir = r["peak_ratio"], r["increment_ratio"]
                lines.append(
                    f"| {m['model']} | {PAIR_LABEL.get(m['pair'], m['pair'])} | "
                    f"{m['batch']} | {v} | {m['base_peak_mb_median']:.0f} | "
                    f"{r['peak_mb_median']:.0f} | {pr['min']:.3f} / {pr['median']:.3f}"
                    f" / {pr['max']:.3f} | {ir['min']:.2f} / {ir['median']:.2f} / "
                    f"{ir['max']:.2f} |"
                )
        lines.append("")


def plot_overhead(ov, path):
    plt = pyplot()
    entries = ov["timing"]
    variants = []
    for e in entries:
        variants += [v for v in e["ratio"] if v != "base" and v not in variants]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(entries) + 2), 3.8))
    width = 0.8 / max(1, len(variants))
    colors = {
        "base_allreduce": "tab:cyan",
        "sq": "tab:gray",
        "vr_nostats": "tab:orange",
        "vr_default": "tab:purple",
        "vr": "tab:red",
    }
    for i, v in enumerate(variants):
        xs, meds, lo, hi = [], [], [], []
        for j, e in enumerate(entries):
            if v not in e["ratio"]:
                continue
            r = e["ratio"][v]
            xs.append(j + (i - (len(variants) - 1) / 2) * width)
            meds.append(r["median"])
            lo.append(r["median"] - r["min"])
            hi.append(r["max"] - r["median"])
        ax.bar(
            xs,
            meds,
            width,
            yerr=[lo, hi],
            capsize=2,
            color=colors.get(v),
            label=VARIANT_LABEL.get(v, v),
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(1.05, color="k", lw=0.6, ls="--")
    top = max([e["ratio"][v]["max"] for e in entries for v in e["ratio"]] + [1.1])
    ax.set_yscale("log")
    ticks = [t for t in (0.8, 1.0, 1.05, 1.25, 1.5, 2, 3, 4, 8, 16, 32) if t <= top * 1.2]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(
        min(0.8, min(e["ratio"][v]["min"] for e in entries for v in e["ratio"]) * 0.95), top * 1.3
    )
    ax.set_xticks(range(len(entries)))
    ax.set_xticklabels(
        [f"{e['model']}\n{PAIR_LABEL.get(e['pair'], e['pair'])} B={e['batch']}" for e in entries],
        fontsize=8,
    )
    ax.set_ylabel("step time / base step time (log)")
    ax.set_title(
        f"Step-time ratios at {entries[0]['replicas'] if entries else '?'} replicas "
        "(bar: median, whiskers: min–max over interleaved reps)",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
