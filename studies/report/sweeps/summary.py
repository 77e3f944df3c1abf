"""The head of the sweeps' block: ``HEADING``, the commands that made the results, the machine,
the table of the batch-size sweep's largest batches (VR − base, paired by seed), BERT-tiny's
line and the main plots. The sections fill ``ctx.headline`` and ``ctx.bert_headline`` first."""

import os

from report.sweeps.common import PAIR_LABEL, VR_LABEL, load_average, pm, verdict

HEADING = "## Earlier sweeps at a glance (MNIST-1D, digits, BERT-tiny)"
_IMAGES = (
    ("acc_vs_batch_mnist1d.png", "test accuracy and gap vs batch"),
    ("bert_mlm.png", "BERT-tiny MLM"),
)


def _machine(docs, quick):
    """The render command and the machine the runs were made on."""
    env = next((d.get("environment", {}) for d in docs if d.get("environment")), {})
    load = load_average(env)
    return (
        f"Rendered with `python3 studies/render.py{' --quick' if quick else ''}`. Machine: "
        f"{env.get('platform')}, {env.get('cpu_count')} CPU cores, TensorFlow "
        f"{env.get('tensorflow')}, Keras {env.get('keras')}; load average at the start "
        f"{load}. Replicas are logical CPU devices of one host: the maths of k-replica data "
        "parallelism is exact, the all-reduce an in-memory copy-and-add."
    )


def _table(headline):
    """The largest batch of each data set and pair: base and VR test accuracy, Δ, verdict."""
    if not headline:
        return []
    lines = [
        "Seeded sweeps (learning rates not tuned per side, 3 seeds, several runs collapsed at "
        "random: too little power to tell VR from base; kept for the record, verdict = "
        "two-sided paired t-test at 5 %):",
        "",
        "| data | pair | largest batch | base test % | VR test % | Δ test (pp) | "
        "verdict | Δ gap (pp) | seeds |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for ds, pair, b, dt, dg, n, base_acc, vr_acc in headline:
        lines.append(
            f"| {ds} | {PAIR_LABEL[pair]} vs {VR_LABEL[pair]} | {b} | "
            f"{pm(base_acc)} | {pm(vr_acc)} | {pm(dt)} | {verdict(dt)} | "
            f"{pm(dg)} | {n} |"
        )
    return lines + [""]


def summary_lines(ctx, docs):
    """The block's head: heading, commands, machine, the table, BERT-tiny's line, plots."""
    lines = [HEADING, ""]
    if ctx.quick:
        lines += [
            "> **These are `--quick` results** (small data, few epochs, 2 seeds): a smoke "
            "test of the pipeline, not evidence.",
            "",
        ]
    lines += [
        "Accuracy of VR-X against X before the pre-registered study above: a batch-size "
        "sweep on MNIST-1D and scikit-learn's digits with k and gamma ablations, BERT-tiny "
        "masked-LM pretraining, and the factors with bfloat16 squares. Made by "
        + ", ".join(f"`{d['command']}`" for d in docs)
        + (
            " (recorded when the scripts lived in `benchmarks/`; they are in `studies/sweeps/` now)"
            if any("benchmarks/" in d.get("command", "") for d in docs)
            else ""
        )
        + "; the method and the caveats are in the sections below.",
        "",
        _machine(docs, ctx.quick),
        "",
    ]
    lines += _table(ctx.headline) + ctx.bert_headline
    lines.append("")
    for name, alt in _IMAGES:
        if os.path.exists(os.path.join(ctx.img_dir, name)):
            lines.append(f"![{alt}]({ctx.img_rel}/{name})")
    return lines + [""]
