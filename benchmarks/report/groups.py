"""Micro-batch groups: cost of VR-LAMB with m groups per replica against LAMB.

Input: ``groups.py``'s JSON (``benchmarks/results/groups.json``)."""

import os

import numpy as np

from report.common import pyplot


def render(ctx, lines):
    gr = ctx.result("groups")
    if not (gr and gr.get("timing")):
        return
    img_rel, img_dir = ctx.img_rel, ctx.img_dir
    cfg = gr["config"]
    lines += [
        "## Micro-batch groups: cost",
        "",
        f"Command: `{gr['command']}`  ",
        f"Status: {'complete' if gr.get('complete') else '**partial**'}; wall time "
        f"{gr.get('elapsed_s', 0) / 60:.1f} min.",
        "",
        "VR-LAMB with m micro-batch groups per replica (k = devices x m GSNR samples; "
        "`apply_grouped_gradients`) against plain LAMB at the same global batch (one "
        "gradient per replica). m = 1 is VR-LAMB with `apply_gradients`, the "
        "reference row. Each replica splits its shard into m contiguous groups and "
        "computes each group's gradients at the same weights, one group after another; "
        "the gradients and their squares are summed. Step: " + gr["step"] + ". Loops "
        f"over the groups: cnn1d `{cfg['cnn_loop']}` (a Python loop, as "
        "`use_micro_batches`: m copies of the forward and backward pass in the graph), "
        f"bert_tiny `{cfg['bert_loop']}` (`tf.while_loop`, one copy whatever m). "
        "Timing as in the overhead section (variants side by side in one process, "
        "rotating order, ratios within a repetition; 'min/min' = fastest repetition "
        "over the fastest base). Peak memory: " + gr["memory_method"] + "; ratio to "
        "the base's child of the same repetition ('increment' = peak minus the RSS "
        "before the timed model was built), measured for cnn1d at batch "
        f"{cfg['memory_cnn_batch']} and BERT-tiny at batch {cfg['bert_batch']} with "
        f"{cfg['memory_reps']} child process(es) per variant and {cfg['memory_steps']}"
        " steps. 'build s' = building the variant and its first call (tracing and "
        "graph optimisation), once per process.",
        "",
    ]
    mem = {(m["model"], m["devices"]): m for m in gr.get("memory", [])}
    for e in gr["timing"]:
        mm = (
            mem.get((e["model"], e["devices"]))
            if (mem.get((e["model"], e["devices"]), {}).get("batch") == e["batch"])
            else None
        )
        seq = f", sequence {e['seq_len']}" if e.get("seq_len") else ""
        lines += [
            f"### {e['model']}, batch {e['batch']}{seq}, {e['devices']} device"
            f"{'s' if e['devices'] > 1 else ''} ({e['per_replica_batch']} per replica)",
            "",
            f"{e['params']:,} parameters; {e['reps']} repetitions of "
            f"{e['steps_per_call']} steps. {e['family']}."
            + (f" Data: {e['data']}." if e.get("data") else ""),
            "",
            "| variant | k | group size | step ms (median) | ratio median (min–max) | "
            "min/min | peak RSS ratio | increment ratio | build s | graph ops |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        ]
        for v, info in e["variants"].items():
            r = e["ratio"][v]
            pr = ir = "—"
            if mm and isinstance(mm.get(v), dict):
                pr = f"{mm[v]['peak_ratio']['median']:.3f}"
                ir = f"{mm[v]['increment_ratio']['median']:.2f}"
            elif mm and v == "base":
                inc = (
                    np.median(
                        [r["maxrss_kb"] - r["rss_before_model_kb"] for r in mm["raw"]["base"]]
                    )
                    / 1024
                )
                pr, ir = f"{mm['base_peak_mb_median']:.0f} MB", f"{inc:.0f} MB"
            b = (e.get("build_s") or {}).get(v)
            lines.append(
                f"| {_group_label(v, info)} | {info['k'] or '—'} | {info['group_size']} | "
                f"{e['step_ms'][v]['median']:.1f} | "
                + ("1" if v == "base" else f"{r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})")
                + f" | {e['ratio_of_min'][v]:.3f} | {pr} | {ir} | "
                f"{'—' if b is None else f'{b:.0f}'} | {e['graph_ops'].get(v) or '—'} |"
            )
        checks = e.get("weights_check") or {}
        if checks:
            lines += [
                "",
                f"Weights after {e.get('steps_before_check', '?')} steps on the same "
                "batch, against a variant doing the same arithmetic in another order "
                "(rounding differences grow with the steps through LAMB's normalised "
                "update; max |Δ| / max |w|): "
                + "; ".join(
                    f"{v} vs {c['vs']} {c['max_abs_diff_rel']:.1e}" for v, c in checks.items()
                )
                + ".",
            ]
        lines.append("")
    for c in gr.get("cross_checks", []):
        lines += [
            f"Check, {c['model']} batch {c['batch']}, k = {c['k']}: {c['a']} vs {c['b']}:"
            f" final weights max |Δ| / max |w| = {c['max_abs_diff_rel']:.1e}.",
            "",
        ]
    for err in gr.get("errors", []):
        lines += [f"A row failed: `{err[:300]}`", ""]
    name = "groups_cost.png"
    if gr["timing"]:
        plot_groups(gr, os.path.join(img_dir, name))
        lines += [f"![micro-batch groups cost]({img_rel}/{name})", ""]


def _group_label(v, info):
    if v == "base":
        return "LAMB (base)"
    if info["vr"]:
        loop = f", {info['loop']} loop" if info.get("loop") and v.count("_") == 2 else ""
        return f"VR-LAMB m={info['m']}{loop}"
    return f"LAMB, {info['m']} groups summed (no VR)"


def plot_groups(gr, path):
    """Step-time ratio VR(m)/LAMB against m, one line per (model, devices, batch)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    styles = {1: "--", 8: "-"}
    colors = {"cnn1d": ["tab:blue", "tab:cyan"], "bert_tiny": ["tab:red"]}
    seen = {}
    for e in gr["timing"]:
        pts = sorted(
            (i["m"], e["ratio"][v])
            for v, i in e["variants"].items()
            if i["vr"] and v == f"vr_m{i['m']}"
        )
        if not pts:
            continue
        ms = [m for m, _ in pts]
        med = [r["median"] for _, r in pts]
        lo = [r["median"] - r["min"] for _, r in pts]
        hi = [r["max"] - r["median"] for _, r in pts]
        key = (e["model"], e["batch"])
        if key not in seen:
            seen[key] = len([k for k in seen if k[0] == e["model"]])
        cl = colors.get(e["model"], ["k"])
        ax.errorbar(
            ms,
            med,
            yerr=[lo, hi],
            capsize=2,
            marker="o",
            ms=3,
            ls=styles.get(e["devices"], ":"),
            color=cl[seen[key] % len(cl)],
            label=f"{e['model']} B={e['batch']}, {e['devices']} dev",
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 4, 8])
    ax.set_xticklabels(["1", "2", "4", "8"])
    ticks = [0.8, 1, 1.25, 1.5, 2, 3, 4, 6, 8]
    top = max([r["max"] for e in gr["timing"] for r in e["ratio"].values()] + [1.5])
    ax.set_yticks([t for t in ticks if t <= top * 1.2])
    ax.set_yticklabels([f"{t:g}" for t in ticks if t <= top * 1.2])
    ax.minorticks_off()
    ax.set_xlabel("micro-batch groups m per replica (k = devices x m)")
    ax.set_ylabel("step time VR-LAMB(m) / LAMB")
    ax.set_title(
        "Cost of micro-batch groups (median, min–max over interleaved reps;\n"
        "dashed: 1 device, solid: 8 devices)",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
