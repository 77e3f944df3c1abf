r"""The round-4 evidence runner: the registered protocol of studies/evidence/PROTOCOL4.md,
phase by phase, resumable.

Phases (``--phases``), per pair (``--pairs``, Momentum first, then LARS):
  tune       every arm (base, VR, scalar-VR) on the registered x2^(1/4) grid, 3 tuning
             seeds, seed-major with the arms interleaved at each rate; the edge rule
             extends every arm's grid; the stability guard and the re-pilot stop
             (protocol4.choose). Validation only: the test set is not loaded.
  final      every arm at its own rate, the 24 registered seeds (0-23), paired by seed.
  reference  the descriptive batch-256 base (8 seeds 100-107), after the Momentum pair.

``<out_dir>/<phase>.json`` is rewritten after every run; rerunning the same command skips
the finished runs. ``--budget_minutes`` stops before a run whose expected time would
overrun. Every phase refuses to start unless the process's code is a clean commit and the
protocol is registered (``--quick`` excepted): one frozen commit runs the round.

Example (from the repository root of a clean worktree at the frozen commit):
  PYTHONPATH=$PWD setsid nohup python3 studies/evidence/round4.py --pairs=momentum \
      --phases=tune,final,reference --budget_minutes=600 > /work/round4.log 2>&1 &
"""

import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))  # this checkout's vrgd_tf first

import protocol4 as p4  # noqa: E402
import provenance  # noqa: E402
from evidence_runs import Budget, OutOfBudget, final_metrics  # noqa: E402

FLAGS = flags.FLAGS
PHASES = ("tune", "final", "reference")
flags.DEFINE_list("phases", ["tune", "final"], f"Subset of {PHASES}, run in that order.")
flags.DEFINE_list("pairs", ["momentum"], f"Optimizer pairs, in order: {p4.PAIRS}.")
flags.DEFINE_string("data_dir", None, "Fashion-MNIST IDX directory (default: Debian's).")
flags.DEFINE_string("out_dir", None, "JSON directory (default studies/evidence/results/round4).")
flags.DEFINE_float("budget_minutes", 0.0, "Stop before a run that would overrun (0 = none).")
flags.DEFINE_bool("quick", False, "Development smoke test: 2 epochs, 16k examples, own dir.")


def out_dir():
    default = "round4_quick" if FLAGS.quick else "round4"
    return FLAGS.out_dir or os.path.join(HERE, "results", default)


def results_prefix():
    return os.path.relpath(out_dir(), provenance.REPO) + os.sep


def load_phase(phase):
    import studylib

    path = os.path.join(out_dir(), f"{phase}.json")
    if os.path.exists(path):
        return studylib.read_json(path)
    return {"phase": phase, "protocol": "studies/evidence/PROTOCOL4.md", "runs": {}}


def save_phase(phase, state):
    import studylib

    state["registration"] = p4.registration()
    state["command"] = provenance.command_line()
    state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    studylib.write_json(os.path.join(out_dir(), f"{phase}.json"), state)


class Runner:
    """One traced trainer per (pair, arm, batch), the data and the budget."""

    def __init__(self, data, budget, epochs):
        self.data, self.budget, self.epochs = data, budget, epochs
        self.trainers = {}

    def trainer(self, pair, arm, groups):
        import arms
        import studylib
        import tensorflow as tf

        key = (pair, arm, groups)
        if key not in self.trainers:
            strategy = studylib.strategy_for(1)
            with strategy.scope():
                seed_var = tf.Variable(0, dtype=tf.int64, trainable=False)
            side, transforms = arms.arm_optimizer_args(arm, seed_var)

            def make_opt(schedule):
                return studylib.make_optimizer(
                    pair, side, schedule, gamma=p4.GAMMA, factor_transforms=transforms
                )

            t = studylib.Trainer(
                strategy, studylib.fashion_cnn_bn, make_opt, groups=groups, jit_compile=p4.JIT
            )
            self.trainers[key] = (t, seed_var)
        return self.trainers[key]

    def run(self, pair, arm, lr, seed, with_test, batch=p4.BATCH, warmup_epochs=None):
        """One training run of ``arm`` at peak rate ``lr`` for ``seed``; its record."""
        import studylib

        self.budget.check(f"{pair}/{arm}/b{batch}/lr{lr}/s{seed}")
        warmup_epochs = p4.WARMUP_EPOCHS if warmup_epochs is None else warmup_epochs
        groups = max(1, batch // p4.GROUP_SIZE)
        trainer, seed_var = self.trainer(pair, arm, groups)
        steps = self.data["x"].shape[0] // batch
        weights = trainer.weight_cache.get(seed)
        if weights is None:
            weights = trainer.weight_cache[seed] = studylib.init_weights(
                studylib.fashion_cnn_bn, seed
            )
        trainer.reset(weights, lr, steps * warmup_epochs, steps * self.epochs)
        seed_var.assign(seed)
        started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.time()
        curve, diag, _ = studylib.train_epochs(
            trainer, self.data, seed, batch, self.epochs, p4.TRAIN_EVAL_SUBSET
        )
        final = final_metrics(trainer, self.data, curve, with_test, p4.COLLAPSE_BELOW)
        wall = time.time() - t0
        self.budget.record(wall)
        return {
            "pair": pair,
            "arm": arm,
            "batch": batch,
            "groups": groups,
            "jit_compile": p4.JIT,
            "peak_lr": lr,
            "seed": seed,
            "epochs": self.epochs,
            "steps": steps * self.epochs,
            "warmup_steps": steps * warmup_epochs,
            "gamma": None if arm == "base" else p4.GAMMA,
            "optimizer_config": trainer.optimizer_config,
            "final": final,
            "curve": curve,
            "diagnostics": diag,
            "wall_s": round(wall, 1),
            "started": started,
            "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "provenance": provenance.snapshot(ignore=(results_prefix(),)),
            "load_average": list(os.getloadavg()),
        }


def _log(phase, key, run):
    f = run["final"]
    logging.info(
        "%s %s: val %s test %s wall %.0fs",
        *(phase, key, f["val_acc"], f.get("test_acc"), run["wall_s"]),
    )


def phase_tune(runner, pair, state):
    """Runs the missing tuning runs of ``pair``; records the grid and the choice."""
    runs = state["runs"]
    while True:
        grid, before = p4.tune_grid(runs, pair, FLAGS.quick)
        state.setdefault("grids", {})[pair] = grid
        if before is not None:
            break
        for seed in p4.seeds("tune", FLAGS.quick):
            for lr in grid:
                for arm in p4.ARMS:
                    key = p4.run_key(pair, arm, lr, seed)
                    if key not in runs:
                        runs[key] = runner.run(pair, arm, lr, seed, with_test=False)
                        save_phase("tune", state)
                        _log("tune", key, runs[key])
    state.setdefault("choice", {})[pair] = p4.choose(runs, pair, FLAGS.quick)
    save_phase("tune", state)


def phase_final(runner, pair, state):
    choice = load_phase("tune").get("choice", {}).get(pair)
    if choice is None:
        raise OutOfBudget(f"tuning of {pair} not finished")
    if choice["repilot"] and not FLAGS.quick:
        raise SystemExit(f"{pair}: a base tuning run collapsed at its chosen rate: re-pilot.")
    state.setdefault("choice", {})[pair] = choice
    runs = state["runs"]
    for seed in p4.seeds("final", FLAGS.quick):
        for arm in p4.ARMS:
            key = p4.run_key(pair, arm, choice["best"][arm], seed)
            if key not in runs:
                runs[key] = runner.run(pair, arm, choice["best"][arm], seed, with_test=True)
                save_phase("final", state)
                _log("final", key, runs[key])


def phase_reference(runner, pair, state):
    del pair
    ref, runs = p4.REFERENCE, state["runs"]
    for seed in p4.seeds("reference", FLAGS.quick):
        key = p4.reference_key(seed)
        if key not in runs:
            runs[key] = runner.run(
                ref["pair"], "base", ref["lr"], seed, True, ref["batch"], ref["warmup_epochs"]
            )
            save_phase("reference", state)
            _log("reference", key, runs[key])


def load_data(with_test):
    import studylib

    data = studylib.load_fashion_mnist(FLAGS.data_dir)
    if not with_test:
        del data["x_test"], data["y_test"]
    if FLAGS.quick:
        data["x"], data["y"] = data["x"][:16384], data["y"][:16384]
    return studylib.prepare(data, with_test=with_test)


def main(argv):
    del argv
    import studylib

    unknown = [p for p in FLAGS.phases if p not in PHASES] + [
        p for p in FLAGS.pairs if p not in p4.PAIRS
    ]
    if unknown:
        raise ValueError(f"unknown {unknown}; phases {PHASES}, pairs {p4.PAIRS}.")
    studylib.setup_devices(1)
    import arms  # noqa: F401  (imported before the provenance snapshot)

    import vrgd_tf  # noqa: F401

    start = provenance.snapshot(ignore=(results_prefix(),))
    logging.info("provenance at start: %s", start)
    if not FLAGS.quick and (start["dirty"] or not p4.registration()["registered"]):
        raise SystemExit(
            f"round 4 refused: the code is not a clean commit ({start['changed']}) or "
            "PROTOCOL4.md is still a draft. Register and commit, then rerun."
        )
    budget = Budget(FLAGS.budget_minutes, p4.PILOT_SECONDS)
    epochs = 2 if FLAGS.quick else p4.EPOCHS
    run_phase = {"tune": phase_tune, "final": phase_final, "reference": phase_reference}
    try:
        for pair in FLAGS.pairs:
            for phase in [p for p in PHASES if p in FLAGS.phases]:
                if phase == "reference" and pair != p4.REFERENCE["pair"]:
                    continue
                runner = Runner(load_data(with_test=phase != "tune"), budget, epochs)
                state = load_phase(phase)
                run_phase[phase](runner, pair, state)
                save_phase(phase, state)
    except OutOfBudget as e:
        logging.warning("stopped: %s", e)


if __name__ == "__main__":
    app.run(main)
