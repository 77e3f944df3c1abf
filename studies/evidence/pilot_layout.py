"""Round-3 layout pilot (not a result): 8 replicas vs 1 device x 8 micro-batch groups.

1. Same weights: each arm trained a few steps from the same initial weights and data order
   in both layouts; the largest absolute weight difference (float rounding only, if the
   layouts are the same maths).
2. Speed: training seconds per epoch (13 steps at batch 4096) of the base and VR arms in
   each layout, after tracing, a few repetitions, interleaved.

Writes ``studies/evidence/results/round3/pilot_layout.json``.
  PYTHONPATH=$PWD python3 studies/evidence/pilot_layout.py
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))

import studylib  # noqa: E402

studylib.setup_devices(8)

import arms  # noqa: E402
import numpy as np  # noqa: E402
import protocol3 as p3  # noqa: E402
import provenance  # noqa: E402
import tensorflow as tf  # noqa: E402


def make_trainer(arm, layout):
    groups = 8 if layout == "groups" else 1
    strategy = studylib.strategy_for(1 if groups > 1 else 8)
    with strategy.scope():
        seed_var = tf.Variable(7, dtype=tf.int64, trainable=False)
    side, transforms = arms.arm_optimizer_args(arm, seed_var)

    def make_opt(schedule):
        return studylib.make_optimizer("momentum", side, schedule, factor_transforms=transforms)

    return studylib.Trainer(strategy, studylib.fashion_cnn, make_opt, groups=groups)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    data = studylib.load_fashion_mnist()
    del data["x_test"], data["y_test"]
    data = studylib.prepare(data, with_test=False)
    n = data["x"].shape[0]
    perm = np.random.default_rng([0, 0]).permutation(n).astype(np.int32)
    w0 = studylib.init_weights(studylib.fashion_cnn, 0)
    trainers, same = {}, {}
    for arm in arms.ARMS:
        out = {}
        for layout in ("replicas", "groups"):
            t = trainers[(arm, layout)] = make_trainer(arm, layout)
            t.reset(w0, 0.1, 39, 390)
            t.train_steps(data["tf_x"], data["tf_y"], perm, 0, p3.BATCH, args.steps)
            out[layout] = t.model.get_weights()
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(out["replicas"], out["groups"]))
        scale = max(float(np.max(np.abs(a))) for a in out["replicas"])
        same[arm] = {"steps": args.steps, "max_abs_diff": diff, "max_abs_weight": scale}
        print(arm, same[arm], flush=True)
    timing = {f"{arm}/{layout}": [] for arm in ("base", "vr") for layout in ("replicas", "groups")}
    for _ in range(args.reps):
        for key in timing:
            arm, layout = key.split("/")
            t = trainers[(arm, layout)]
            t.reset(w0, 0.05, 39, 390)
            t0 = time.time()
            t.train_steps(data["tf_x"], data["tf_y"], perm, 0, p3.BATCH, n // p3.BATCH)
            timing[key].append(round(time.time() - t0, 3))
            print(key, timing[key][-1], flush=True)
    doc = {
        "what": "layout pilot of round 3 (not a result)",
        "same_weights": same,
        "train_seconds_per_epoch": timing,
        "median_seconds_per_epoch": {k: float(np.median(v)) for k, v in timing.items()},
        "provenance": provenance.snapshot(ignore=("studies/evidence/results/",)),
        "environment": provenance.environment(),
    }
    studylib.write_json(os.path.join(HERE, "results", "round3", "pilot_layout.json"), doc)


if __name__ == "__main__":
    main()
