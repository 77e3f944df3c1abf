"""Learning-rate probe of the base optimizers (how the sweep's base learning rates were chosen).

Input: ``studies/sweeps/results/lr_probe*.json`` (``--lr_probes``); full report only."""

import os

from absl import flags

from report.sweeps.common import PAIR_LABEL, RESULTS, load, pct

flags.DEFINE_list(
    "lr_probes",
    ["lr_probe.json", "lr_probe_8192.json", "lr_probe_lars.json", "lr_probe_lars_digits.json"],
    "Learning-rate probe JSONs under studies/sweeps/results (those that exist); for "
    "the same data set, pair and batch a later file supersedes an earlier one.",
)


HEADING = "## Learning-rate probe (base optimizers only, seed 0)"
_ABSENT = "> The probe JSON files"


def _without_json(out_md, names):
    """The section when none of the probe JSONs exists: the previous render's table, kept
    verbatim from ``out_md`` under a note that says so (or only the note if there is none).

    The probe files were git-ignored until the split of ``render.py`` and are lost; without
    this, rendering a clean clone silently dropped the section.
    """
    note = (
        f"{_ABSENT} ({', '.join(names)}) are not in `studies/sweeps/results/`, so this section "
        "was not recomputed: "
    )
    previous = []
    if os.path.exists(out_md):
        with open(out_md) as f:
            text = f.read().split("\n")
        if HEADING in text:
            start = text.index(HEADING) + 1
            end = next((i for i in range(start, len(text)) if text[i].startswith("## ")), len(text))
            previous = [line for line in text[start:end] if not line.startswith(_ABSENT)]
            while previous and not previous[0]:
                previous.pop(0)
            while previous and not previous[-1]:
                previous.pop()
    if previous:
        note += (
            "the table below is the previous render of this file, kept verbatim. Rerun the "
            "probe commands of `studies/sweeps/README.md` to recompute it."
        )
        return [HEADING, "", note, "", *previous, ""]
    note += "rerun the probe commands of `studies/sweeps/README.md` to make them."
    return [HEADING, "", note, ""]


def render(ctx, lines):
    if ctx.quick:
        return
    probes = [
        (p, d) for p in flags.FLAGS.lr_probes if (d := load(os.path.join(RESULTS, p))) is not None
    ]
    if not probes:
        lines += _without_json(ctx.out_md, flags.FLAGS.lr_probes)
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
        HEADING,
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
