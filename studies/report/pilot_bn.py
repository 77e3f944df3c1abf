"""The BatchNorm pilot's section of docs/results.md (round 3, item 6; a pilot, not a result),
from ``studies/evidence/results/round3/pilot_bn.json`` (``studies/evidence/pilot_bn.py``);
the grids, the edge rule and the decision are the plan's (``pilot_bn_plan``)."""

import json
import os

import pilot_bn_plan as plan

PLOT = "round3_pilot_bn.png"
HEADING = "### Round 3, item 6: a BatchNorm pilot (batch 4096 vs 256, base Momentum; not a result)"
COLORS = {256: "tab:blue", 4096: "tab:red"}


def load(results_dir):
    path = os.path.join(results_dir, plan.FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _val(run):
    return "collapsed" if run["final"].get("collapsed") else f"{plan.val_of(run):.2f}"


def batch_line(runs, batch):
    """One line per batch: each rate's final validation accuracy, the best, the progress."""
    rates, best = plan.grid(runs, batch)
    cells = [
        f"{lr:g} → {_val(runs[plan.run_key(batch, lr)])}"
        for lr in rates
        if plan.run_key(batch, lr) in runs
    ]
    mine = [r for r in runs.values() if r["batch"] == batch]
    head = f"- Batch {batch}" + (
        f" ({mine[0]['warmup_steps']} warm-up steps of {mine[0]['steps']}): " if mine else ": "
    )
    tail = (
        f"; best {best:g}"
        + (
            " (at the grid's edge after the rule's one extension)."
            if best in (rates[0], rates[-1])
            else "."
        )
        if best is not None
        else f" (in progress: {len(cells)} of {len(rates)} runs)."
    )
    return head + (", ".join(cells) or "no run yet") + tail


def decision_line(runs):
    d = plan.decision(runs)
    if d is None:
        return "Decision: pending (the plan's rule reads it once both grids are complete)."
    (ls, vs), (lb, vb) = d["best"][256], d["best"][4096]
    verdict = (
        "within the margin: the base converges close to batch 256 in this setting, so a "
        "round-4 protocol on it (round 3's arms, grid and seeds) is warranted; it is not run "
        "under issue 20"
        if d["converges"]
        else "beyond the margin: this setting does not give the converged regime either, so "
        "no protocol is run on it"
    )
    edges = [
        f"batch {b}'s best is at its grid's {'top' if lr == rates[-1] else 'bottom'} edge"
        for b in plan.BATCHES
        for rates, lr in [plan.grid(runs, b)]
        if lr in (rates[0], rates[-1])
    ]
    edge = (
        f" Note: {' and '.join(edges)} (the rule's one extension used), so a wider grid "
        "could only raise that best."
        if edges
        else ""
    )
    return (
        f"**Decision (the plan's rule: batch 4096's best within {plan.MARGIN:g} pp of batch "
        f"256's): batch 4096 {vb:.2f} % (rate {lb:g}) vs batch 256 {vs:.2f} % (rate {ls:g}), "
        f"gap {d['gap_pp']:+.2f} pp, {verdict}.**{edge}"
    )


def plot(runs, path):
    """Left: final validation accuracy vs peak rate per batch; right: the validation curve
    of each batch's best run so far."""
    from report.round3 import _plt

    plt = _plt()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(8.4, 3.2))
    for batch in plan.BATCHES:
        mine = sorted((r for r in runs.values() if r["batch"] == batch), key=lambda r: r["peak_lr"])
        if not mine:
            continue
        ax.plot(
            [r["peak_lr"] for r in mine],
            [plan.val_of(r) for r in mine],
            "o-",
            color=COLORS[batch],
            label=f"batch {batch}",
        )
        top = max(mine, key=plan.val_of)
        bx.plot(
            [c["epoch"] for c in top["curve"]],
            [c["val_acc"] for c in top["curve"]],
            color=COLORS[batch],
            label=f"batch {batch}, rate {top['peak_lr']:g}",
        )
    ax.set(
        xscale="log",
        xlabel="peak rate",
        ylabel="final validation accuracy %",
        title="BatchNorm pilot: rates",
    )
    bx.set(xlabel="epoch", ylabel="validation accuracy %", title="best run per batch")
    ax.legend(fontsize=8)
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section(results_dir, images_dir, images_rel):
    """The section (Markdown string, '' before the first run); writes its plot."""
    state = load(results_dir)
    if not state or not state.get("runs"):
        return ""
    runs = state["runs"]
    lines = [
        HEADING,
        "",
        "Plan, committed before the first run: [studies/evidence/PILOT_BN.md]"
        "(../studies/evidence/PILOT_BN.md); runner `python3 studies/evidence/pilot_bn.py` "
        "(JSON `studies/evidence/results/round3/pilot_bn.json`). Is there a setting where the "
        "base at batch 4096 converges close to batch 256, so that a VRGD comparison there "
        "speaks to the regime a large-batch user wants? The round-3 CNN with BatchNorm after "
        f"each convolution, base Momentum (0.9) only, one seed, {plan.EPOCHS} epochs, warm-up "
        f"then cosine, at least {plan.MIN_WARMUP_STEPS} warm-up steps; batch 4096 as 1 device "
        "x 8 micro-batch groups of 512 (BatchNorm per group), batch 256 in one pass. Final "
        "validation accuracy % per peak rate (no test set):",
        "",
        *(batch_line(runs, b) for b in plan.BATCHES),
        "",
        decision_line(runs),
        "",
    ]
    os.makedirs(images_dir, exist_ok=True)
    plot(runs, os.path.join(images_dir, PLOT))
    lines += [f"![BatchNorm pilot]({images_rel}/{PLOT})", ""]
    return "\n".join(lines)
