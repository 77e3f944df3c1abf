"""The plan's constants and rules of the BatchNorm pilot (studies/evidence/PILOT_BN.md):
grids, warm-up, the edge rule and the decision. Pure Python (no TensorFlow), shared by the
runner (pilot_bn.py) and the report (studies/report/pilot_bn.py)."""

import math

PLAN = "studies/evidence/PILOT_BN.md"
FILE = "pilot_bn.json"
EPOCHS = 40
SEED = 1000
MIN_WARMUP_STEPS = 200
MIN_WARMUP_EPOCHS = 3
MARGIN = 1.0  # pp
BATCHES = (256, 4096)  # the report's order
GROUPS = {256: 1, 4096: 8}
GRIDS = {256: (0.1, 0.2, 0.4), 4096: (0.4, 0.8, 1.6)}
TRAIN_EVAL_SUBSET = 10000


def run_key(batch, lr):
    return f"b{batch}/lr{lr:g}"


def warmup_epochs(batch, num_train):
    """Whole warm-up epochs: the larger of 200 steps and 3 epochs."""
    steps = num_train // batch
    return max(MIN_WARMUP_EPOCHS, math.ceil(MIN_WARMUP_STEPS / steps))


def val_of(run):
    """A run's final validation accuracy (%), 0 for a collapsed (non-finite) run."""
    v = run["final"]["val_acc"]
    return v if v is not None and math.isfinite(v) else 0.0


def grid(runs, batch):
    """(rates, best) of ``batch`` by the plan's edge rule: one more point x2 beyond an edge
    holding the best, once per edge; ``best`` is None while a run of the grid is missing
    (the lower rate wins a tie)."""
    rates, extended = list(GRIDS[batch]), set()
    while True:
        found = [runs.get(run_key(batch, lr)) for lr in rates]
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
    """``{"best": {batch: (rate, val %)}, "gap_pp", "converges"}`` by the plan's rule
    (batch 4096's best within 1 pp of batch 256's), or None while runs are missing."""
    best = {}
    for batch in BATCHES:
        _, lr = grid(runs, batch)
        if lr is None:
            return None
        best[batch] = (lr, val_of(runs[run_key(batch, lr)]))
    gap = best[256][1] - best[4096][1]
    return {"best": best, "gap_pp": gap, "converges": gap <= MARGIN}


def next_run(runs):
    """(batch, rate) of the next run, or None when both grids are complete: the batch with
    fewer runs so far (4096 on a tie), its lowest missing rate."""
    todo = []
    for batch in BATCHES:
        rates, best = grid(runs, batch)
        missing = [lr for lr in rates if run_key(batch, lr) not in runs]
        if best is None and missing:
            done = sum(run_key(batch, lr) in runs for lr in rates)
            todo.append((done, -batch, batch, missing[0]))
    return min(todo)[2:] if todo else None
