"""Round 4's pilot section of docs/results.md (a pilot, not a result), from
``studies/evidence/results/round4/pilot4.json`` (``studies/evidence/pilot4.py``); the grids,
the edge rule, the choice of the batch and the LARS grid are the plan's (``pilot4_plan``)."""

import json
import os

import pilot4_plan as plan

PLOT = "round4_pilot.png"
HEADING = "### Round 4, item 1: which batch starts to cost accuracy? (base only; a pilot)"
COLORS = {8192: "tab:orange", 16384: "tab:red", "lars": "tab:purple"}


def load(results_dir):
    path = os.path.join(results_dir, plan.FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _val(run):
    return "collapsed" if run["final"].get("collapsed") else f"{plan.val_of(run):.2f}"


def _cells(runs, pair, batch, rates):
    keys = [(lr, plan.run_key(pair, batch, lr)) for lr in rates]
    return [f"{lr:g} → {_val(runs[k])}" for lr, k in keys if k in runs]


def momentum_line(runs, batch):
    """One line per batch: each rate's final validation accuracy, the best, the progress."""
    rates, best = plan.grid(runs, batch)
    cells = _cells(runs, "momentum", batch, rates)
    mine = [r for r in runs.values() if r["batch"] == batch and r.get("pair") == "momentum"]
    head = f"- Momentum, batch {batch}" + (
        f" ({mine[0]['warmup_steps']} warm-up steps of {mine[0]['steps']}, "
        f"{plan.groups(batch)} groups of {plan.GROUP_SIZE}): "
        if mine
        else ": "
    )
    if best is None:
        tail = f" (in progress: {len(cells)} of {len(rates)} runs)."
    else:
        edge = (
            " (at the grid's edge after the rule's one extension)"
            if best
            in (
                rates[0],
                rates[-1],
            )
            else ""
        )
        tail = f"; best {best:g}{edge}, {plan.REFERENCE - plan.val_of(runs[plan.run_key('momentum', batch, best)]):.2f} pp below batch 256 (one seed)."
    return head + (", ".join(cells) or "no run yet") + tail


def decision_line(runs):
    d = plan.decision(runs)
    if d is None:
        return "Decision: pending (the plan's rule reads it once both Momentum grids are complete)."
    gaps = ", ".join(f"batch {b} {d['gap_pp'][b]:.2f} pp" for b in plan.BATCHES)
    lo, hi = plan.GAP_RANGE
    if d["batch"] is None:
        return (
            f"**Decision: no batch falls {lo:g} pp below batch 256's {plan.REFERENCE:.2f} % "
            f"({gaps}): this model and data do not reach the regime where large batch costs "
            "accuracy; no further round on Fashion-MNIST.**"
        )
    beyond = (
        f" (it falls more than {hi:g} pp: beyond the range the issue named)" if d["beyond"] else ""
    )
    return (
        f"**Decision (the plan's rule: the smallest batch {lo:g}-{hi:g} pp below batch 256's "
        f"{plan.REFERENCE:.2f} %): batch {d['batch']}{beyond}; gaps {gaps}.**"
    )


def lars_line(runs):
    d = plan.decision(runs)
    if d is None or d["batch"] is None:
        return "- LARS centring runs: after the decision."
    cells = _cells(runs, "lars", d["batch"], plan.LARS_GRID)
    best = plan.lars_best(runs)
    tail = (
        f"; best {best[1]:g}: round 4's LARS grid is centred there"
        + (
            " (the grid's top edge, which the plan does not extend: the best rate may lie"
            " higher, so round 4's grid must reach above it)."
            if best[1] == max(plan.LARS_GRID)
            else "."
        )
        if best
        else f" (in progress: {len(cells)} of {len(plan.LARS_GRID)} runs)."
    )
    return f"- LARS, batch {d['batch']}: " + (", ".join(cells) or "no run yet") + tail


def plot(runs, path):
    """Final validation accuracy vs peak rate per batch and pair."""
    from report.round3 import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    groups = {}
    for r in runs.values():
        groups.setdefault((r.get("pair", "momentum"), r["batch"]), []).append(r)
    for (pair, batch), mine in sorted(groups.items()):
        mine.sort(key=lambda r: r["peak_lr"])
        ax.plot(
            [r["peak_lr"] for r in mine],
            [plan.val_of(r) for r in mine],
            "o-" if pair == "momentum" else "s--",
            color=COLORS["lars" if pair == "lars" else batch],
            label=f"{pair}, batch {batch}",
        )
    ax.axhline(plan.REFERENCE, color="gray", lw=0.8, ls=":", label="batch 256 (4096 pilot)")
    ax.set(xscale="log", xlabel="peak rate", ylabel="final validation accuracy %")
    ax.set_title("Round 4 pilot: base only, one seed", fontsize=9)
    ax.legend(fontsize=7)
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
        "Plan, committed before the first run: [studies/evidence/PILOT4.md]"
        "(../studies/evidence/PILOT4.md); runner `python3 studies/evidence/pilot4.py` (JSON "
        "`studies/evidence/results/round4/pilot4.json`). The BatchNorm CNN of the 4096 pilot, "
        f"{plan.EPOCHS} epochs, warm-up {plan.WARMUP_EPOCHS} epochs then cosine, one seed, "
        f"base only, 1 device x batch/{plan.GROUP_SIZE} micro-batch groups (BatchNorm per "
        f"group of {plan.GROUP_SIZE}). Reference: batch 256's {plan.REFERENCE:.2f} % (4096 "
        "pilot). Final validation accuracy % per peak rate (no test set):",
        "",
        *(momentum_line(runs, b) for b in plan.BATCHES),
        lars_line(runs),
        "",
        decision_line(runs),
        "",
    ]
    os.makedirs(images_dir, exist_ok=True)
    plot(runs, os.path.join(images_dir, PLOT))
    lines += [f"![Round 4 pilot]({images_rel}/{PLOT})", ""]
    return "\n".join(lines)
