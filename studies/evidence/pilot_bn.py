r"""Round 3, item 6: the BatchNorm pilot of studies/evidence/PILOT_BN.md (a pilot, not a
result): does the base Momentum optimizer at batch 4096 converge close to batch 256 with the
BatchNorm CNN, 40 epochs and at least 200 warm-up steps?

One seed, base only, validation only. ``<out_dir>/pilot_bn.json`` is rewritten after every
run; rerunning the command skips the finished runs. The rules (grids, the edge rule, the
decision) are pilot_bn_plan.py's, shared with the report (studies/report/pilot_bn.py).
The runner refuses to start unless its code is a clean commit (``--quick`` excepted).

Example (from the repository root):
  PYTHONPATH=$PWD setsid nohup python3 studies/evidence/pilot_bn.py --budget_minutes=90 \
      > /work/pilot_bn.log 2>&1 &
"""

import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))  # this checkout's vrgd_tf first

import provenance  # noqa: E402
from pilot_bn_plan import (  # noqa: E402
    EPOCHS,
    FILE,
    GROUPS,
    PLAN,
    SEED,
    TRAIN_EVAL_SUBSET,
    decision,
    next_run,
    run_key,
    warmup_epochs,
)

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Fashion-MNIST IDX directory (default: Debian's).")
flags.DEFINE_string("out_dir", None, "JSON directory (default studies/evidence/results/round3).")
flags.DEFINE_float("budget_minutes", 0.0, "Stop before a run that would overrun (0 = none).")
flags.DEFINE_bool("quick", False, "Development smoke test: 2 epochs, 8k examples, own file.")


def out_path():
    d = FLAGS.out_dir or os.path.join(HERE, "results", "round3")
    return os.path.join(d, "pilot_bn_quick.json" if FLAGS.quick else FILE)


def train_one(data, trainers, batch, lr, epochs):
    """One run's record (imports TensorFlow through ``studylib``)."""
    import studylib

    if batch not in trainers:

        def make_opt(schedule):
            return studylib.make_optimizer("momentum", "base", schedule)

        strategy = studylib.strategy_for(1)
        trainers[batch] = studylib.Trainer(
            strategy, studylib.fashion_cnn_bn, make_opt, groups=GROUPS[batch]
        )
    warm = warmup_epochs(batch, data["x"].shape[0])
    run = studylib.pilot_run(
        data, trainers[batch], batch, lr, epochs, warm, SEED, TRAIN_EVAL_SUBSET
    )
    run["provenance"] = provenance.snapshot(ignore=("studies/evidence/results/",))
    return run


def main(argv):
    del argv
    import studylib

    studylib.setup_devices(8)
    start = provenance.snapshot(ignore=("studies/evidence/results/",))
    if start["dirty"] and not FLAGS.quick:
        raise SystemExit(f"pilot refused: the code is not a clean commit ({start['changed']}).")
    path = out_path()
    state = studylib.read_json(path) if os.path.exists(path) else {"plan": PLAN, "runs": {}}
    data = studylib.load_fashion_mnist(FLAGS.data_dir)
    del data["x_test"], data["y_test"]
    if FLAGS.quick:
        data["x"], data["y"] = data["x"][:8192], data["y"][:8192]
    data = studylib.prepare(data, with_test=False)
    epochs = 2 if FLAGS.quick else EPOCHS
    limit = FLAGS.budget_minutes * 60.0 if FLAGS.budget_minutes > 0 else None
    t_start, times, trainers = time.time(), [], {}
    runs = state["runs"]
    while (nxt := next_run(runs)) is not None:
        batch, lr = nxt
        guess = sum(times) / len(times) if times else 480.0
        if limit is not None and time.time() - t_start + guess > limit:
            logging.warning("stopped: budget, next run %s", run_key(batch, lr))
            return
        logging.info("pilot %s", run_key(batch, lr))
        runs[run_key(batch, lr)] = run = train_one(data, trainers, batch, lr, epochs)
        times.append(run["wall_s"])
        state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state["command"] = provenance.command_line()
        studylib.write_json(path, state)
        logging.info("  val %s wall %.0fs", run["final"]["val_acc"], run["wall_s"])
    logging.info("decision: %s", decision(runs))


if __name__ == "__main__":
    app.run(main)
