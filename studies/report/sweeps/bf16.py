"""bfloat16 squares: how much ``squares_dtype="bfloat16"`` changes the factors on real
gradients (``studies/sweeps/bf16_factors.py``).

Input: ``studies/sweeps/results/bf16_factors.json`` (``--bf16_factors``); full report only
(one full run exists, no quick one)."""

import os

from absl import flags

from report.sweeps.common import RESULTS, load

flags.DEFINE_string("bf16_factors", None, "bfloat16-squares factor JSON (bf16_factors.json).")


def render(ctx, lines):
    if not flags.FLAGS.bf16_factors and ctx.quick:
        return
    bf = load(flags.FLAGS.bf16_factors or os.path.join(RESULTS, "bf16_factors.json"))
    if not (bf and bf.get("rows")):
        return
    lines += [
        "## bfloat16 squares",
        "",
        f"Made by `{bf.get('command')}`. Gradients of {bf.get('model')} "
        f"({bf.get('params')} parameters) at several points of plain momentum-SGD "
        "training, split over k replicas; factors from float32 statistics against "
        "statistics whose squares are rounded to bfloat16 and summed in bfloat16 "
        "replica after replica (as a ring all-reduce of a bfloat16 buffer), both with "
        f"the library's `gsnr_factors_flat`, gamma = {bf['config'].get('gamma')}. "
        "'clip changes' = fraction of elements whose factor is at gamma (at 1) in one "
        "and not the other; 'defined' = fraction with a GSNR above the noise threshold "
        "(bfloat16: r below 1 / (2^-8 k) - 1).",
        "",
        "| step | k | median abs diff | p99 | max | clip at gamma changes | "
        "clip at 1 changes | defined f32 | defined bf16 | mean factor f32 / bf16 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in bf["rows"]:
        d = r["abs_diff"]
        lines.append(
            f"| {r['step']} | {r['k']} | {d['median']:.1e} | {d['p99']:.1e} | "
            f"{d['max']:.2f} | {r['frac_clip_at_gamma_changes']:.4f} | "
            f"{r['frac_clip_at_one_changes']:.4f} | {r['frac_defined_f32']:.3f} | "
            f"{r['frac_defined_bf16']:.3f} | {r['mean_factor_f32']:.3f} / "
            f"{r['mean_factor_bf16']:.3f} |"
        )
    lines.append("")
