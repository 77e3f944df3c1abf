"""Learning-rate probe of the base optimizers (how the sweep's base learning rates were chosen).

Input: ``benchmarks/results/lr_probe*.json`` (``--lr_probes``); full report only."""

import os

from absl import flags

from report.common import PAIR_LABEL, RESULTS, load, pct

flags.DEFINE_list(
    "lr_probes",
    ["lr_probe.json", "lr_probe_8192.json", "lr_probe_lars.json", "lr_probe_lars_digits.json"],
    "Learning-rate probe JSONs under benchmarks/results (those that exist); for "
    "the same data set, pair and batch a later file supersedes an earlier one.",
)


def render(ctx, lines):
    if ctx.quick:
        return
    probes = [
        (p, d) for p in flags.FLAGS.lr_probes if (d := load(os.path.join(RESULTS, p))) is not None
    ]
    if not probes:
        return
    rows = []
    latest = {}
    for name, doc in probes:
        for r in doc["runs"]:
            latest[(r["dataset"], r["pair"], r["batch"])] = name
    superseded = 0
    for name, doc in probes:
        for r in doc["runs"]:
            if latest[(r["dataset"], r["pair"], r["batch"])] != name:
                superseded += 1
                continue
            rows.append(
                (
                    r["dataset"],
                    r["pair"],
                    r["batch"],
                    r["peak_lr"],
                    r["final"]["test_acc"],
                    r["final"]["diverged"] or r["final"]["train_acc"] < 0.15,
                    name,
                )
            )
    if not rows:
        return
    lines += [
        "## Learning-rate probe (base optimizers only, seed 0)",
        "",
        "How the base learning rates were chosen: the base optimizer alone, one seed, "
        "at the base batch (and at the largest batch with the square-root-scaled rate), "
        "from these files. VR was not tuned; it uses the base's rate.",
        "",
        "| data | pair | batch | peak lr | test acc (%) | diverged | file |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for ds, pair, b, lr, acc, div, name in sorted(rows, key=lambda t: t[:4]):
        lines.append(
            f"| {ds} | {PAIR_LABEL[pair]} | {b} | {lr:.4g} | {pct(acc)} | "
            f"{'yes' if div else ''} | {name} |"
        )
    lines += [
        "",
        f"{superseded} rows of earlier files superseded by a later probe of the "
        "same data set, pair and batch (e.g. after a change of the LARS exclusions) "
        "are not shown.",
        "",
        "Commands (base learning rates in effect, from each file):",
        "",
    ]
    for name, doc in probes:
        lines.append(f"- `{doc['command']}` — base lr {doc['config']['base_lr']}")
    lines.append("")
