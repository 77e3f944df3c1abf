"""The registered constants and rules of the round-3 protocol (studies/evidence/PROTOCOL.md):
grids, the edge-extension rule, the tuning choice, seeds and run keys. Pure Python (no
TensorFlow), shared by the runner and the report."""

import hashlib
import math
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOL = os.path.join(HERE, "PROTOCOL.md")

#: The arms, in the order they run at each rate and seed (studies/evidence/arms.py builds
#: their optimizers).
ARMS = ("base", "vr", "scalar_vr", "shuffled_nm")
ARM_LABEL = {
    "base": "base",
    "vr": "VR",
    "scalar_vr": "scalar-VR",
    "shuffled_nm": "shuffled (norm-matched)",
}
BATCH = 4096
K = 8  # GSNR samples per step
GAMMA = 0.1
EPOCHS = 30
WARMUP_EPOCHS = 3
TRAIN_EVAL_SUBSET = 10000
COLLAPSE_BELOW = 20.0  # % accuracy
LAYOUT = "groups"  # 1 device x 8 micro-batch groups (the pilot's faster layout)
PILOT_SECONDS = 220.0  # a 30-epoch run at the layout pilot's speed (budget guess only)

TUNE_SEEDS = (1000, 1001, 1002)
FINAL_SEEDS = tuple(range(16))
STEP = 2.0**0.25
#: pair -> (centre, lowest exponent, highest exponent, extensions allowed per edge)
GRIDS = {"momentum": (0.05, -2, 6, 4), "lamb": (0.02, -4, 4, 8)}
MARGIN = 1.0  # pp
ALPHA = 0.05


def rate(center, i):
    """``center * 2**(i / 4)`` rounded to 6 significant digits (the run keys' value)."""
    return float(f"{center * STEP**i:.6g}")


def run_key(pair, arm, lr, seed):
    return f"{pair}/{arm}/lr{lr:.6g}/s{seed}"


def seeds(phase, quick=False):
    if quick:
        return (TUNE_SEEDS[0],) if phase == "tune" else (FINAL_SEEDS[0],)
    return TUNE_SEEDS if phase == "tune" else FINAL_SEEDS


def mean_val(runs, pair, arm, lr, tune_seeds):
    """Mean final validation accuracy over ``tune_seeds`` (a non-finite one counts 0 %), or
    None if a seed's run is missing."""
    vals = []
    for s in tune_seeds:
        r = runs.get(run_key(pair, arm, lr, s))
        if r is None:
            return None
        v = r["final"]["val_acc"]
        vals.append(v if v is not None and math.isfinite(v) else 0.0)
    return sum(vals) / len(vals)


def best_rates(runs, pair, grid, tune_seeds, arms=ARMS):
    """{arm: rate of the highest mean validation accuracy (the lower rate on a tie)} or
    None while a run of the grid is missing."""
    best = {}
    for arm in arms:
        means = [mean_val(runs, pair, arm, lr, tune_seeds) for lr in grid]
        if any(m is None for m in means):
            return None
        top = max(means)
        best[arm] = grid[means.index(top)]
    return best


def tune_grid(runs, pair, quick=False, arms=ARMS):
    """(grid, best) by the registered edge rule.

    Start from the registered 9 points; while any arm's best is at the lowest (highest)
    point and that edge has been extended fewer than the allowed times, add one point
    ``x 2**(-1/4)`` (``x 2**(1/4)``) there, for every arm. ``best`` is None while runs are
    missing; when the cap binds, the edge value is the choice (the report says so).
    """
    center, lo, hi, cap = GRIDS[pair]
    if quick:
        lo, hi, cap = 0, 1, 0
    tune_seeds = seeds("tune", quick)
    low, high = lo, hi
    while True:
        grid = [rate(center, i) for i in range(low, high + 1)]
        best = best_rates(runs, pair, grid, tune_seeds, arms)
        if best is None:
            return grid, None
        at_low = any(b == grid[0] for b in best.values()) and lo - low < cap
        at_high = any(b == grid[-1] for b in best.values()) and high - hi < cap
        if not (at_low or at_high):
            return grid, best
        low, high = low - int(at_low), high + int(at_high)


def registration():
    """The protocol's registration record: the commit that added PROTOCOL.md, the last
    commit that changed it, and the sha256 of its text now."""

    def git(*args):
        try:
            out = subprocess.run(
                ["git", "-C", HERE] + list(args), capture_output=True, text=True, timeout=30
            )
        except Exception:  # noqa: BLE001
            return None
        return out.stdout.strip() or None

    with open(PROTOCOL, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    added = git("log", "--diff-filter=A", "--format=%H", "--", PROTOCOL)
    return {
        "registered_commit": added.splitlines()[-1] if added else None,
        "last_protocol_commit": git("log", "-1", "--format=%H", "--", PROTOCOL),
        "protocol_sha256": digest,
    }
