r"""Round 4's execution measurement (PROTOCOL4.md, "Execution"): the fastest configuration
that gives the same runs, measured before registration.

At the pilot's batch (8192, k = 16 samples of 512 examples), for the base and the VR arm
of the Momentum pair at rate 6.4, from one seed's initial weights: the train step of
``studylib.Trainer`` as

  groups      1 device x 16 micro-batch groups, ``tf.function`` (the pilots' configuration);
  groups_xla  the same under ``jit_compile=True``;
  replicas    16 replicas (logical CPU devices) x 1 group, ``tf.function``.

Each configuration trains step 0 of an epoch (the traced warm-up call, not counted), then
steps 1-5 of that epoch (an epoch at 8192 is 6 steps) ``--repeats`` times, timed per step
(``groups_xla``: ``--xla_steps`` steps once: XLA's CPU convolutions are slow here); then the largest absolute and relative weight
difference to ``groups`` after the same steps (configurations timed alike only; the
registered schedule's first steps: warm-up over 16 of 40 epochs at peak 6.4). Per step: wall time and the process's CPU
time (all threads; steadier than wall time on a machine shared with other work). One
process, this machine's load: the ratios, not the times. Writes ``results/round4/speed4.json``.

  PYTHONPATH=$PWD python3 studies/evidence/speed4.py
"""

import os
import sys
import time

from absl import app, flags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))

import provenance  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 2, "Timed calls of steps 1-5 of an epoch per configuration.")
flags.DEFINE_list("configs", ["groups", "groups_xla", "replicas"], "Configurations to time.")
flags.DEFINE_integer("xla_steps", 1, "Timed steps of groups_xla (once; XLA:CPU is slow here).")
flags.DEFINE_string("out", None, "JSON path (default results/round4/speed4.json).")

BATCH, GROUP, LR, SEED = 8192, 512, 6.4, 1000


def main(argv):
    del argv
    import numpy as np
    import studylib

    k = BATCH // GROUP
    studylib.setup_devices(k)
    data = studylib.load_fashion_mnist(None)
    del data["x_test"], data["y_test"]
    data = studylib.prepare(data, with_test=False)
    n = data["x"].shape[0]
    perm = np.random.default_rng([SEED, 0]).permutation(n).astype(np.int32)
    weights = studylib.init_weights(studylib.fashion_cnn_bn, SEED)
    out = {
        "batch": BATCH,
        "k": k,
        "lr": LR,
        "seed": SEED,
        "arms": {},
    }
    for side in ("base", "vr"):
        rows, final = {}, {}
        for cfg in FLAGS.configs:
            trainer = studylib.Trainer(
                studylib.strategy_for(k if cfg == "replicas" else 1),
                studylib.fashion_cnn_bn,
                lambda s, side=side: studylib.make_optimizer("momentum", side, s),
                groups=1 if cfg == "replicas" else k,
                jit_compile=cfg == "groups_xla",
            )
            steps = 55000 // BATCH  # the registered schedule: warm-up 16 of 40 epochs
            trainer.reset(weights, LR, 16 * steps, 40 * steps)
            t0 = time.time()
            trainer.train_steps(data["tf_x"], data["tf_y"], perm, 0, BATCH, 1)
            first = time.time() - t0
            calls = [(1, FLAGS.xla_steps)] if cfg == "groups_xla" else [(1, 5)] * FLAGS.repeats
            t0, c0 = time.time(), time.process_time()
            for start, num in calls:
                trainer.train_steps(data["tf_x"], data["tf_y"], perm, start, BATCH, num)
            timed = sum(num for _, num in calls)
            per_step = (time.time() - t0) / timed
            cpu_per_step = (time.process_time() - c0) / timed
            final[cfg] = [w.copy() for w in trainer.model.get_weights()]
            rows[cfg] = {
                "timed_steps": timed,
                "first_call_s": round(first, 2),
                "step_s": round(per_step, 3),
                "cpu_step_s": round(cpu_per_step, 3),
            }
            print(side, cfg, rows[cfg], flush=True)
        for cfg in FLAGS.configs:
            for t in ("step_s", "cpu_step_s"):
                rows[cfg][f"speed_vs_groups_{t}"] = round(rows["groups"][t] / rows[cfg][t], 3)
            if rows[cfg]["timed_steps"] != rows["groups"]["timed_steps"]:
                rows[cfg]["max_abs_diff"] = None  # other steps: no weight comparison
                continue
            a = np.concatenate([w.ravel() for w in final["groups"]]).astype(np.float64)
            b = np.concatenate([w.ravel() for w in final[cfg]]).astype(np.float64)
            rows[cfg]["max_abs_diff"] = float(np.max(np.abs(a - b)))
            rows[cfg]["max_rel_diff"] = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
        out["arms"][side] = rows
    out["provenance"] = provenance.snapshot(ignore=("studies/evidence/results/",))
    out["load_average"] = list(os.getloadavg())
    path = FLAGS.out or os.path.join(HERE, "results", "round4", "speed4.json")
    studylib.write_json(path, out)
    for side, rows in out["arms"].items():
        for cfg, r in rows.items():
            print(f"{side:5s} {cfg:10s} {r}")


if __name__ == "__main__":
    app.run(main)
