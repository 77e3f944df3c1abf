"""The plan's constants and rules of round 4's pilot (studies/evidence/PILOT4.md): the
Momentum grids at batch 8192 and 16384 with their edge rule, the choice of the batch, and
the LARS centring grid at the chosen batch. Pure Python (no TensorFlow), shared by the
runner (pilot4.py) and the report (studies/report/pilot4.py)."""

import math

PLAN = "studies/evidence/PILOT4.md"
FILE = "pilot4.json"
EPOCHS = 40
WARMUP_EPOCHS = 16  # 0.4 of the run, the 4096 pilot's fraction (208 of 520 steps)
SEED = 1000
GROUP_SIZE = 512  # BatchNorm's group: 1 device x batch / 512 micro-batch groups
REFERENCE = 92.88  # batch 256's best validation accuracy in the 4096 pilot (seed 1000, 0.2)
BATCHES = (8192, 16384)  # the report's order; the smaller first on a tie
GRIDS = {8192: (1.6, 3.2, 6.4), 16384: (3.2, 6.4, 12.8)}
LARS_GRID = (1.25, 2.5, 5.0, 10.0)
GAP_RANGE = (1.0, 3.0)  # pp below the reference
TRAIN_EVAL_SUBSET = 10000


def run_key(pair, batch, lr):
    return f"{pair}/b{batch}/lr{lr:g}"


def groups(batch):
    return batch // GROUP_SIZE


def val_of(run):
    """A run's final validation accuracy (%), 0 for a collapsed (non-finite) run."""
    v = run["final"]["val_acc"]
    return v if v is not None and math.isfinite(v) else 0.0


def grid(runs, batch):
    """(rates, best) of the Momentum grid of ``batch`` by the plan's edge rule: one more
    point x2 beyond an edge holding the best, once per edge; ``best`` is None while a run
    of the grid is missing (the lower rate wins a tie)."""
    rates, extended = list(GRIDS[batch]), set()
    while True:
        found = [runs.get(run_key("momentum", batch, lr)) for lr in rates]
        if any(r is None for r in found):
            return rates, None
        accs = [val_of(r) for r in found]
        best = rates[accs.index(max(accs))]
        if best == rates[0] and "low" not in extended:
            rates.insert(0, rates[0] / 2)
            extended.add("low")
        elif best == rates[-1] and "high" not in extended:
            rates.append(rates[-1] * 2)
            extended.add("high")
        else:
            return rates, best


def decision(runs):
    """``{"best": {batch: (rate, val %)}, "gap_pp": {batch: gap}, "batch", "beyond"}`` by
    the plan's rule, or None while a Momentum run is missing. ``batch`` is None where no
    gap reaches 1 pp; ``beyond`` is True where the chosen gap exceeds 3 pp."""
    best, gaps = {}, {}
    for batch in BATCHES:
        _, lr = grid(runs, batch)
        if lr is None:
            return None
        best[batch] = (lr, val_of(runs[run_key("momentum", batch, lr)]))
        gaps[batch] = REFERENCE - best[batch][1]
    lo, hi = GAP_RANGE
    inside = [b for b in BATCHES if lo <= gaps[b] <= hi]
    falling = [b for b in BATCHES if gaps[b] >= lo]
    chosen = inside[0] if inside else (falling[0] if falling else None)
    beyond = chosen is not None and gaps[chosen] > hi
    return {"best": best, "gap_pp": gaps, "batch": chosen, "beyond": beyond}


def next_run(runs):
    """(pair, batch, rate) of the next run, or None when the pilot is complete: the
    Momentum grids first, alternating (the batch with fewer runs, 8192 on a tie, its lowest
    missing rate), then the LARS grid at the chosen batch (none if no batch was chosen)."""
    todo = []
    for batch in BATCHES:
        rates, best = grid(runs, batch)
        missing = [lr for lr in rates if run_key("momentum", batch, lr) not in runs]
        if best is None and missing:
            done = sum(run_key("momentum", batch, lr) in runs for lr in rates)
            todo.append((done, batch, missing[0]))
    if todo:
        _, batch, lr = min(todo)
        return "momentum", batch, lr
    chosen = decision(runs)["batch"]
    if chosen is None:
        return None
    for lr in LARS_GRID:
        if run_key("lars", chosen, lr) not in runs:
            return "lars", chosen, lr
    return None


def lars_best(runs):
    """(batch, rate, val %) of the LARS pilot's best run (the lower rate on a tie), or None
    while a LARS run is missing."""
    d = decision(runs)
    if d is None or d["batch"] is None:
        return None
    found = [runs.get(run_key("lars", d["batch"], lr)) for lr in LARS_GRID]
    if any(r is None for r in found):
        return None
    accs = [val_of(r) for r in found]
    i = accs.index(max(accs))
    return d["batch"], LARS_GRID[i], accs[i]
