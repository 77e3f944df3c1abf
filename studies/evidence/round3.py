r"""The round-3 evidence runner: the pre-registered protocol of studies/evidence/PROTOCOL.md,
phase by phase, resumable.

Phases (``--phases``, run in this order per pair):
  tune   every arm (base, VR, scalar-VR, norm-matched shuffle) on the registered x2^(1/4)
         grid, 3 tuning seeds; a best rate at a grid edge extends every arm's grid by one
         point there (registered rule). Validation only: the test set is not loaded.
  final  every arm at its own best rate, the 16 registered seeds (0-15), paired (same
         initial weights, data order and shuffle draws for a seed across arms).

``<out_dir>/<phase>.json`` is rewritten atomically after every run; rerunning the same
command skips the finished runs (a run is the unit). ``--budget_minutes`` stops before a run
whose expected time (mean of this process's runs, else the pilot's) would overrun. The final
phase refuses to start when the process's code is not a clean commit (studies/provenance.py).

Example (from the repository root):
  PYTHONPATH=$PWD setsid nohup python3 studies/evidence/round3.py --phases=tune,final \
      --pairs=momentum --budget_minutes=600 > /work/evidence_run.log 2>&1 &
"""

import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))  # this checkout's vrgd_tf first

import protocol3 as p3  # noqa: E402
import provenance  # noqa: E402
from evidence_runs import Budget, OutOfBudget, final_metrics  # noqa: E402

FLAGS = flags.FLAGS
PHASES = ("tune", "final")
flags.DEFINE_list("phases", ["tune", "final"], f"Subset of {PHASES}.")
flags.DEFINE_list("pairs", ["momentum"], "Optimizer pairs, in order: momentum, lamb.")
flags.DEFINE_string("data_dir", None, "Fashion-MNIST IDX directory (default: Debian's).")
flags.DEFINE_string("out_dir", None, "JSON directory (default studies/evidence/results/round3).")
flags.DEFINE_float("budget_minutes", 0.0, "Stop before a run that would overrun (0 = none).")
flags.DEFINE_enum("layout", p3.LAYOUT, ["groups", "replicas"], "Registered: see PROTOCOL.md.")
flags.DEFINE_bool("quick", False, "Development smoke test: 2 epochs, 8k examples, own dir.")


def out_dir():
    default = "round3_quick" if FLAGS.quick else "round3"
    return FLAGS.out_dir or os.path.join(HERE, "results", default)


def results_prefix():
    """The results directory relative to the repository (its changes do not make a tree
    dirty: the running study writes there)."""
    return os.path.relpath(out_dir(), provenance.REPO) + os.sep


def load_phase(phase):
    import studylib

    path = os.path.join(out_dir(), f"{phase}.json")
    if os.path.exists(path):
        return studylib.read_json(path)
    return {"phase": phase, "protocol": "studies/evidence/PROTOCOL.md", "runs": {}}


def save_phase(phase, state):
    import studylib

    state["registration"] = p3.registration()
    state["command"] = provenance.command_line()
    state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    studylib.write_json(os.path.join(out_dir(), f"{phase}.json"), state)


class Runner:
    """One traced trainer per (pair, arm), the data and the budget."""

    def __init__(self, data, budget, epochs):
        self.data = data
        self.budget = budget
        self.epochs = epochs
        self.trainers = {}

    def trainer(self, pair, arm):
        import arms
        import studylib
        import tensorflow as tf

        key = (pair, arm)
        if key not in self.trainers:
            groups = p3.K if FLAGS.layout == "groups" else 1
            strategy = studylib.strategy_for(1 if groups > 1 else p3.K)
            with strategy.scope():
                seed_var = tf.Variable(0, dtype=tf.int64, trainable=False)
            side, transforms = arms.arm_optimizer_args(arm, seed_var)

            def make_opt(schedule):
                return studylib.make_optimizer(
                    pair, side, schedule, gamma=p3.GAMMA, factor_transforms=transforms
                )

            t = studylib.Trainer(strategy, studylib.fashion_cnn, make_opt, groups=groups)
            self.trainers[key] = (t, seed_var)
        return self.trainers[key]

    def run(self, pair, arm, lr, seed, with_test):
        """One training run of ``arm`` at peak rate ``lr`` for ``seed``; its record."""
        import studylib

        self.budget.check(f"{pair}/{arm}/lr{lr}/s{seed}")
        trainer, seed_var = self.trainer(pair, arm)
        n = self.data["x"].shape[0]
        steps = n // p3.BATCH
        weights = trainer.weight_cache.get(seed)
        if weights is None:
            weights = trainer.weight_cache[seed] = studylib.init_weights(studylib.fashion_cnn, seed)
        trainer.reset(weights, lr, steps * p3.WARMUP_EPOCHS, steps * self.epochs)
        seed_var.assign(seed)
        t0 = time.time()
        curve, diag, _ = studylib.train_epochs(
            trainer, self.data, seed, p3.BATCH, self.epochs, p3.TRAIN_EVAL_SUBSET
        )
        final = final_metrics(trainer, self.data, curve, with_test)
        wall = time.time() - t0
        self.budget.record(wall)
        return {
            "pair": pair,
            "arm": arm,
            "batch": p3.BATCH,
            "peak_lr": lr,
            "seed": seed,
            "epochs": self.epochs,
            "steps": steps * self.epochs,
            "warmup_steps": steps * p3.WARMUP_EPOCHS,
            "layout": FLAGS.layout,
            "gamma": None if arm == "base" else p3.GAMMA,
            "optimizer_config": trainer.optimizer_config,
            "final": final,
            "curve": curve,
            "diagnostics": diag,
            "wall_s": round(wall, 1),
            "provenance": provenance.snapshot(ignore=(results_prefix(),)),
            "load_average": list(os.getloadavg()),
        }


# --------------------------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------------------------


def phase_tune(runner, pair, state):
    """Runs the missing tuning runs of ``pair``; records the grid and each arm's best."""
    runs = state["runs"]
    while True:
        grid, best = p3.tune_grid(runs, pair, FLAGS.quick)
        state.setdefault("grids", {})[pair] = grid
        if best is not None:
            break
        for seed in p3.seeds("tune", FLAGS.quick):
            for lr in grid:
                for arm in p3.ARMS:
                    key = p3.run_key(pair, arm, lr, seed)
                    if key in runs:
                        continue
                    logging.info("tune %s", key)
                    runs[key] = runner.run(pair, arm, lr, seed, with_test=False)
                    save_phase("tune", state)
                    r = runs[key]
                    logging.info("  val %.2f wall %.0fs", r["final"]["val_acc"], r["wall_s"])
    state.setdefault("best", {})[pair] = best
    save_phase("tune", state)
    return best


def phase_final(runner, pair, state):
    best = load_phase("tune").get("best", {}).get(pair)
    if best is None:
        raise OutOfBudget(f"tuning of {pair} not finished")
    prov = provenance.snapshot(ignore=(results_prefix(),))
    if prov["dirty"] and not FLAGS.quick:
        raise SystemExit(
            f"final phase refused: the code of this process is not a clean commit "
            f"(changed: {prov['changed']}). Commit, then rerun the same command."
        )
    state.setdefault("best", {})[pair] = best
    runs = state["runs"]
    for seed in p3.seeds("final", FLAGS.quick):
        for arm in p3.ARMS:
            key = p3.run_key(pair, arm, best[arm], seed)
            if key in runs:
                continue
            logging.info("final %s", key)
            runs[key] = runner.run(pair, arm, best[arm], seed, with_test=True)
            save_phase("final", state)
            logging.info(
                "  test %.2f wall %.0fs", runs[key]["final"]["test_acc"], runs[key]["wall_s"]
            )


def load_data(with_test):
    """The registered data; the test arrays are dropped unless ``with_test``."""
    import studylib

    data = studylib.load_fashion_mnist(FLAGS.data_dir)
    if not with_test:
        del data["x_test"], data["y_test"]
    if FLAGS.quick:
        data["x"], data["y"] = data["x"][:8192], data["y"][:8192]
    return studylib.prepare(data, with_test=with_test)


def main(argv):
    del argv
    import studylib

    unknown = [p for p in FLAGS.phases if p not in PHASES]
    if unknown:
        raise ValueError(f"--phases: unknown {unknown}; allowed {PHASES}.")
    studylib.setup_devices(p3.K)
    import arms  # noqa: F401  (imported before the first provenance snapshot)

    import vrgd_tf  # noqa: F401

    start = provenance.snapshot(ignore=(results_prefix(),))
    logging.info("provenance at start: %s", start)

    budget = Budget(FLAGS.budget_minutes, p3.PILOT_SECONDS * p3.EPOCHS / 30.0)
    epochs = 2 if FLAGS.quick else p3.EPOCHS
    phases = [p for p in PHASES if p in FLAGS.phases]
    try:
        for pair in FLAGS.pairs:
            for phase in phases:
                runner = Runner(load_data(with_test=phase == "final"), budget, epochs)
                state = load_phase(phase)
                (phase_tune if phase == "tune" else phase_final)(runner, pair, state)
                save_phase(phase, state)
    except OutOfBudget as e:
        logging.warning("stopped: %s", e)


if __name__ == "__main__":
    app.run(main)
