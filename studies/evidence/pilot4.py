r"""Round 4, item 1: the pilot of studies/evidence/PILOT4.md (a pilot, not a result): the
base Momentum optimizer with the BatchNorm CNN at batch 8192 and 16384, which batch falls
1-3 pp below batch 256, then the LARS centring runs at that batch.

One seed, base only, validation only. ``<out_dir>/pilot4.json`` is rewritten after every
run; rerunning the command skips the finished runs. The rules (grids, the edge rule, the
choice, the LARS grid) are pilot4_plan.py's, shared with the report
(studies/report/pilot4.py). The runner refuses to start unless its code is a clean commit
(``--quick`` excepted).

Example (from the repository root of a clean worktree):
  PYTHONPATH=$PWD setsid nohup python3 studies/evidence/pilot4.py --budget_minutes=150 \
      > /work/pilot4.log 2>&1 &
"""

import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))  # this checkout's vrgd_tf first

import pilot4_plan as plan  # noqa: E402
import provenance  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Fashion-MNIST IDX directory (default: Debian's).")
flags.DEFINE_string("out_dir", None, "JSON directory (default studies/evidence/results/round4).")
flags.DEFINE_float("budget_minutes", 0.0, "Stop before a run that would overrun (0 = none).")
flags.DEFINE_bool("quick", False, "Development smoke test: 2 epochs, 16k examples, own file.")


def out_path():
    d = FLAGS.out_dir or os.path.join(HERE, "results", "round4")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, "pilot4_quick.json" if FLAGS.quick else plan.FILE)


def train_one(data, trainers, pair, batch, lr, epochs):
    """One run's record (imports TensorFlow through ``studylib``); one trainer (one trace)
    per (pair, batch), reused across rates."""
    import studylib

    if (pair, batch) not in trainers:

        def make_opt(schedule):
            return studylib.make_optimizer(pair, "base", schedule)

        trainers[pair, batch] = studylib.Trainer(
            studylib.strategy_for(1),
            studylib.fashion_cnn_bn,
            make_opt,
            groups=plan.groups(batch),
        )
    run = studylib.pilot_run(
        data,
        trainers[pair, batch],
        batch,
        lr,
        epochs,
        plan.WARMUP_EPOCHS * epochs // plan.EPOCHS,
        plan.SEED,
        plan.TRAIN_EVAL_SUBSET,
    )
    run["pair"] = pair
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
    state = studylib.read_json(path) if os.path.exists(path) else {"plan": plan.PLAN, "runs": {}}
    data = studylib.load_fashion_mnist(FLAGS.data_dir)
    del data["x_test"], data["y_test"]
    if FLAGS.quick:
        data["x"], data["y"] = data["x"][:16384], data["y"][:16384]
    data = studylib.prepare(data, with_test=False)
    epochs = 2 if FLAGS.quick else plan.EPOCHS
    limit = FLAGS.budget_minutes * 60.0 if FLAGS.budget_minutes > 0 else None
    t_start, times, trainers = time.time(), [], {}
    runs = state["runs"]
    while (nxt := plan.next_run(runs)) is not None:
        pair, batch, lr = nxt
        key = plan.run_key(pair, batch, lr)
        guess = sum(times) / len(times) if times else 480.0
        if limit is not None and time.time() - t_start + guess > limit:
            logging.warning("stopped: budget, next run %s", key)
            return
        logging.info("pilot %s", key)
        runs[key] = run = train_one(data, trainers, pair, batch, lr, epochs)
        times.append(run["wall_s"])
        state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state["command"] = provenance.command_line()
        studylib.write_json(path, state)
        logging.info("  val %s wall %.0fs", run["final"]["val_acc"], run["wall_s"])
    logging.info("decision: %s; LARS best: %s", plan.decision(runs), plan.lars_best(runs))


if __name__ == "__main__":
    app.run(main)
