"""The registered constants and rules of round 4 (studies/evidence/PROTOCOL4.md): the arms,
the grids and their edge rule, the tuning choice with its stability guard, the re-pilot stop,
the speed-up target, seeds and run keys. Pure Python (no TensorFlow), shared by the runner
(round4.py) and the report. The round-3 helpers it reuses (``rate``, ``mean_val``,
``best_rates``) are protocol3's, unchanged."""

import hashlib
import math
import os
import subprocess

import protocol3 as p3

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOL = os.path.join(HERE, "PROTOCOL4.md")

#: The arms, in the order they run at each rate and seed.
ARMS = ("base", "vr", "scalar_vr")
ARM_LABEL = {"base": "base", "vr": "VR", "scalar_vr": "scalar-VR"}
PAIRS = ("momentum", "lars")
BATCH = 8192
GROUP_SIZE = 512
K = BATCH // GROUP_SIZE  # GSNR samples per step (micro-batch groups on one device)
GAMMA = 0.1
EPOCHS = 40
WARMUP_EPOCHS = 16  # 0.4 of the run
TRAIN_EVAL_SUBSET = 10000
COLLAPSE_BELOW = 20.0  # % final validation accuracy: the one definition of a collapse
GUARD_PP = 5.0  # the stability guard's drop below the chosen rate's mean
TARGET_BELOW_PP = 0.5  # E2's target: the base's tuned mean minus this
PILOT_SECONDS = 310.0  # a 40-epoch run at 8192 in the pilot (budget guess only)
JIT = False  # Execution (PROTOCOL4.md, [pilot]): the train step under jit_compile or not

TUNE_SEEDS = (1000, 1001, 1002)
FINAL_SEEDS = tuple(range(24))
#: pair -> (centre, lowest exponent, highest exponent, extensions allowed per edge)
GRIDS = {"momentum": (6.4, -4, 4, 8), "lars": (10.0, -4, 4, 8)}

#: The descriptive batch-256 reference: the base of the Momentum pair, one pass (BatchNorm
#: over 256), warm-up 3 epochs, 40 epochs, rate 0.2.
REFERENCE = {"pair": "momentum", "batch": 256, "lr": 0.2, "warmup_epochs": 3, "groups": 1}
REFERENCE_SEEDS = tuple(range(100, 108))

rate = p3.rate


def run_key(pair, arm, lr, seed):
    return p3.run_key(pair, arm, lr, seed)


def reference_key(seed):
    return f"reference/b{REFERENCE['batch']}/lr{REFERENCE['lr']:g}/s{seed}"


def seeds(phase, quick=False):
    if quick:
        return {"tune": TUNE_SEEDS[:1], "final": FINAL_SEEDS[:1]}.get(phase, REFERENCE_SEEDS[:1])
    return {"tune": TUNE_SEEDS, "final": FINAL_SEEDS}.get(phase, REFERENCE_SEEDS)


def val_of(run):
    """A run's final validation accuracy (%), 0 for a non-finite one."""
    v = run["final"]["val_acc"]
    return v if v is not None and math.isfinite(v) else 0.0


def tune_grid(runs, pair, quick=False):
    """``(grid, best)`` by the edge rule: from the registered 9 points, while any arm's best
    is an edge of the grid and that edge has fewer than 8 extensions, one more point
    ``x 2**(±1/4)`` there for every arm. ``best`` (the arms' choices before the guard) is
    None while a run of the grid is missing; a binding cap leaves the edge as the choice."""
    center, lo, hi, cap = GRIDS[pair]
    if quick:
        lo, hi, cap = 0, 1, 0
    tune_seeds = seeds("tune", quick)
    low, high = lo, hi
    while True:
        grid = [rate(center, i) for i in range(low, high + 1)]
        best = p3.best_rates(runs, pair, grid, tune_seeds, ARMS)
        if best is None:
            return grid, None
        at_low = any(b == grid[0] for b in best.values()) and lo - low < cap
        at_high = any(b == grid[-1] for b in best.values()) and high - hi < cap
        if not (at_low or at_high):
            return grid, best
        low, high = low - int(at_low), high + int(at_high)


def guard_holds(runs, pair, arm, grid, i, tune_seeds):
    """The stability guard at grid index ``i``: no tuning run at ``grid[i]`` or at the next
    higher grid rate ends more than 5 pp below ``grid[i]``'s mean or collapses."""
    mean = p3.mean_val(runs, pair, arm, grid[i], tune_seeds)
    for lr in grid[i : i + 2]:
        for s in tune_seeds:
            v = val_of(runs[run_key(pair, arm, lr, s)])
            if v < COLLAPSE_BELOW or v < mean - GUARD_PP:
                return False
    return True


def choose(runs, pair, quick=False):
    """The tuning's outcome, or None while runs are missing: ``{"grid", "best_before_guard",
    "best", "guard_steps", "cap_binding", "repilot", "target_val_acc"}``. ``best`` is each
    arm's rate after the guard (stepping down one grid point until it holds; the lowest
    point if it never does); ``repilot`` is True when a base tuning run collapsed at the
    base's chosen rate (the round stops); ``target_val_acc`` is E2's target, the base's
    mean validation accuracy at its chosen rate minus 0.5 pp."""
    grid, before = tune_grid(runs, pair, quick)
    if before is None:
        return None
    tune_seeds = seeds("tune", quick)
    best, steps = {}, {}
    for arm in ARMS:
        i = grid.index(before[arm])
        steps[arm] = 0
        while i > 0 and not guard_holds(runs, pair, arm, grid, i, tune_seeds):
            i, steps[arm] = i - 1, steps[arm] + 1
        best[arm] = grid[i]
    center, lo, hi, cap = GRIDS[pair]
    edges = (rate(center, lo - cap), rate(center, hi + cap))
    base_runs = [runs[run_key(pair, "base", best["base"], s)] for s in tune_seeds]
    mean_base = p3.mean_val(runs, pair, "base", best["base"], tune_seeds)
    return {
        "grid": grid,
        "best_before_guard": before,
        "best": best,
        "guard_steps": steps,
        "cap_binding": sorted({a for a, b in before.items() if b in edges and not quick}),
        "repilot": any(val_of(r) < COLLAPSE_BELOW for r in base_runs),
        "target_val_acc": round(mean_base - TARGET_BELOW_PP, 3),
    }


def registration():
    """The protocol's registration record: the commit that removed the draft note (the
    registration), the last commit that changed the protocol, the sha256 of its text."""

    def git(*args):
        try:
            out = subprocess.run(
                ["git", "-C", HERE] + list(args), capture_output=True, text=True, timeout=30
            )
        except Exception:  # noqa: BLE001
            return None
        return out.stdout.strip() or None

    with open(PROTOCOL, "rb") as f:
        text = f.read()
    commits = git("log", "--format=%H", "--", PROTOCOL)
    return {
        "registered": b"DRAFT, not registered" not in text,
        "last_protocol_commit": commits.splitlines()[0] if commits else None,
        "protocol_sha256": hashlib.sha256(text).hexdigest(),
    }
