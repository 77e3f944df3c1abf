"""The JAX path's GSNR cost, round by round (issue 39), and its README line.

Inputs: ``jax_cost.py``'s JSONs ``benchmarks/results/jax_cost_*issue39_round{3,6,8}_*.json``
(:data:`RUNS`: the library's commit per run; ``docs/cost_model.md`` sections 6.2, 6.5 and 6.7 say
what each round changed). The passes part: VR-LAMB minus LAMB in passes per element on one
CPU device, median (min-based in brackets); the end-to-end part, where a run has it:
VR-LAMB/LAMB step time and compiled memory on 8 CPU devices."""

import os

from report.common import RESULTS, load

#: (results stem, round and side, the library's commit).
RUNS = (
    ("jax_cost_passes_issue39_round3_before", "round 3, before", "b1b2ebe"),
    ("jax_cost_passes_issue39_round3_after", "round 3, after", "b448cb7"),
    ("jax_cost_issue39_round6_before", "round 6, before", "29f25b7"),
    ("jax_cost_issue39_round6_after", "round 6, after", "74376cc"),
    ("jax_cost_passes_issue39_round6_after_rerun", "round 6, after (rerun)", "74376cc"),
    ("jax_cost_passes_issue39_round6_before_rerun", "round 6, before (rerun)", "29f25b7"),
    ("jax_cost_passes_issue39_round8_before", "round 8, before", "58e3d6c"),
    ("jax_cost_passes_issue39_round8_after", "round 8, after", "b7892d8"),
    ("jax_cost_passes_issue39_round8_after_rerun", "round 8, after (rerun)", "b7892d8"),
    ("jax_cost_passes_issue39_round8_before_rerun", "round 8, before (rerun)", "58e3d6c"),
)
#: The passes part's arms (``jax_cost.VR_VARIANTS``): column title, key of the medians.
ARMS = (
    ("defaults", "gsnr_passes_vrgd_default"),
    ("no diagnostics", "gsnr_passes_vrgd_no_statistics"),
    ("no diagnostics, `beta_3=0`", "gsnr_passes_vrgd_raw_factor"),
    ("diagnostics every step", "gsnr_passes"),
    ("LAMB's update", "lamb_passes"),
)


def _passes_row(label, code, p):
    cells = [label, f"`{code}`"]
    cells += [f"{p['median'][key]:.1f} ({p['min'][key]:.1f})" for _, key in ARMS]
    defaults = p["median"]["gsnr_passes_vrgd_default"] / p["median"]["lamb_passes"]
    return "| " + " | ".join(cells + [f"{defaults:.2f}"]) + " |"


def _end_to_end(runs, lines):
    rows = [(label, code, row) for doc, label, code in runs for row in doc.get("end_to_end", [])]
    if not rows:
        return
    lines += [
        "",
        "End to end (`jax_cost.py`'s first part: `fit` with `use_micro_batches`, 8 CPU devices "
        "x 1 group, the defaults; step time medians (min-based in brackets), compiled memory "
        "of the step, VR-LAMB over LAMB):",
        "",
        "| run | code | model | global batch | step time | memory | temporaries |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for label, code, row in rows:
        t, m = row["time_ratio"], row.get("memory_ratio", {})
        lines.append(
            f"| {label} | `{code}` | {row['model']} | {row['global_batch']} | "
            f"{t['median']:.3f} ({t['min']:.3f}) | {m.get('total', float('nan')):.3f} | "
            f"{m.get('temp', float('nan')):.3f} |"
        )


def render(ctx, lines):
    if ctx.quick:
        return
    runs = [(load(os.path.join(RESULTS, stem + ".json")), *rest) for stem, *rest in RUNS]
    runs = [r for r in runs if r[0] and r[0].get("passes")]
    if not runs:
        return
    lines += [
        "## The GSNR step's element passes on JAX (issue 39)",
        "",
        "`benchmarks/jax_cost.py` (BERT-tiny's 44 variable shapes, 4.38M elements, 4 "
        "micro-batch groups, one CPU device; wall clock over a donated `x + 1` pass): the GSNR "
        "part of a VR-LAMB step, VR-LAMB minus LAMB in passes per element, median over the "
        "repetitions (min-based in brackets), and the defaults over LAMB's whole update.",
        "",
        "| run | code | " + " | ".join(title for title, _ in ARMS) + " | defaults / LAMB |",
        "|---|---|" + "---:|" * (len(ARMS) + 1),
    ]
    lines += [_passes_row(label, code, doc["passes"]) for doc, label, code in runs]
    _end_to_end(runs, lines)
    lines.append("")
    doc, label, _ = next(r for r in reversed(runs) if "before" not in r[1])
    m = doc["passes"]["median"]
    line = (
        f"- On JAX (`benchmarks/jax_cost.py`, {label}, one CPU device): the GSNR part with the "
        f"defaults {m['gsnr_passes_vrgd_default']:.1f} passes per element "
        f"({m['gsnr_passes_vrgd_default'] / m['lamb_passes']:.2f} of LAMB's update)."
    )
    ctx.readme_lines.append(line)
    ctx.readme_short.append(line)
