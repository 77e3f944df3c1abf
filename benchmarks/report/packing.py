"""The pack of small variables: step time with and without it, and the GSNR step's element
passes before and after it.

Inputs: ``overhead.py --variants=...,vr_unpacked``'s JSON
(``benchmarks/results/overhead_packing.json``: ``vr`` packs the variables of at most
``pack_limit`` elements, ``vr_unpacked`` is the same class with ``pack_limit=0``, side by
side in one process) and ``passes.py``'s JSON (``benchmarks/results/passes.json``, and
``passes_before_packing.json`` from the commit before the pack); full report only."""

import os

from report.common import PAIR_LABEL, RESULTS, load, load_average


def render(ctx, lines):
    if ctx.quick:
        return
    ov = load(os.path.join(RESULTS, "overhead_packing.json"))
    passes = {
        "before the pack": load(os.path.join(RESULTS, "passes_before_packing.json")),
        "with the pack": load(os.path.join(RESULTS, "passes.json")),
    }
    if not (ov and ov.get("timing")) and not any(passes.values()):
        return
    lines += [
        "## The pack of small variables",
        "",
        "The GSNR step computes on the sums of the dense variables of at most `pack_limit` "
        "(16384) elements as one buffer (`vrgd_tf.gsnr.layout`): the same values bit for bit "
        "(the step's outputs and state: `tests/test_packing.py`), far fewer ops per small "
        "variable. The weights after the base rule can differ in the last bits, since "
        "TensorFlow's graph optimizer regroups the base update around the step's output "
        "differently, and the steps amplify it (the last column). What it changes in a "
        "step's time:",
        "",
    ]
    if ov and ov.get("timing"):
        _step_times(ov, lines)
        _readme_line(ov, ctx.readme_lines)
    if any(passes.values()):
        _passes(passes, lines)


def _step_times(ov, lines):
    lines += [
        f"Command: `{ov['command']}`  ",
        f"Status: {'complete' if ov.get('complete') else '**partial**'}; wall time "
        f"{ov.get('elapsed_s', 0) / 60:.1f} min; load average at the start "
        f"{load_average(ov.get('environment'))}. Method as in the overhead section: the "
        "variants side by side in one process, ratios to the base within a repetition.",
        "",
        "| model | pair | batch | replicas | variables | graph ops base / unpacked / packed "
        "| VR/base unpacked, median (min/min) | VR/base packed, median (min/min) | "
        "weights packed vs unpacked |",
        "|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for e in ov["timing"]:
        if "vr_unpacked" not in e["ratio"] or "vr" not in e["ratio"]:
            continue
        ops = e.get("graph_ops", {})
        mm = e.get("ratio_of_min", {})
        wc = e.get("weights_check", {}).get("vr_unpacked")
        cells = [
            f"{e['ratio'][v]['median']:.3f} ({mm.get(v, float('nan')):.3f})"
            for v in ("vr_unpacked", "vr")
        ]
        lines.append(
            f"| {e['model']} | {PAIR_LABEL.get(e['pair'], e['pair'])} | {e['batch']} | "
            f"{e['replicas']} | {e['trainable_variables']} | {ops.get('base')} / "
            f"{ops.get('vr_unpacked')} / {ops.get('vr')} | {cells[0]} | {cells[1]} | "
            + (f"{wc['max_abs_diff_rel']:.1e} vs {wc['vs']}" if wc else "")
            + " |"
        )
    lines.append("")


def _readme_line(ov, readme_lines):
    """One README line: this release's VR/base medians (packed) against the unpacked step's,
    per model, from the same runs."""
    by_model = {}
    for e in ov["timing"]:
        if "vr_unpacked" in e["ratio"] and "vr" in e["ratio"]:
            by_model.setdefault(e["model"], []).append(e)
    parts = []
    for model, rows in by_model.items():
        packed = [e["ratio"]["vr"]["median"] for e in rows]
        unpacked = [e["ratio"]["vr_unpacked"]["median"] for e in rows]
        parts.append(
            f"{model} {min(packed):.2f}–{max(packed):.2f} (unpacked "
            f"{min(unpacked):.2f}–{max(unpacked):.2f}, {len(rows)} cases)"
        )
    if parts:
        readme_lines.append(
            "- This release, with the small variables packed (side by side with the step "
            "before the pack): step time VR/base median " + "; ".join(parts) + "."
        )


def _passes(passes, lines):
    lines += [
        "Element passes of the GSNR part of a VR-LAMB step (`benchmarks/passes.py`: "
        "BERT-tiny's 44 variable shapes, 4 micro-batch groups on one device, against one "
        "read+write pass over all elements and against LAMB; issue 19's target: at most 24), "
        "from the fastest repetitions:",
        "",
        "| code | mode | pass ms | LAMB passes | VR-LAMB passes | GSNR part, passes | "
        "load average at start |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for label, doc in passes.items():
        if not doc:
            continue
        head = doc.get("environment", {}).get("library", {}).get("git_head", "")[:7]
        for row in doc.get("rows", []):
            m = row["min"]
            mode = "XLA" if row["jit_compile"] else "graph"
            lines.append(
                f"| {label} (`{head}`) | {mode} | {m['ms']['pass']:.2f} | "
                f"{m['lamb_passes']:.1f} | {m['vrgd_passes']:.1f} | {m['gsnr_passes']:.1f} | "
                f"{load_average(doc.get('environment'))} |"
            )
    lines.append("")
