r"""The round-2 Fashion-MNIST evidence runner: the pre-registered protocol of
studies/evidence/ROUND2_PROTOCOL.md, phase by phase, resumable.

Phases (``--phases``, always run in this order, so the paper-protocol arm is cut first when
the budget runs out):
  mechanistic  checks (a)-(d) of the protocol, minutes: null calibration of the factor,
               Spearman correlation of the k = 8 / k = 32 factors with a reference GSNR,
               the critical batch B_simple, the paper's linear-regression toy.
  tune         learning-rate grids (6 values spaced x2), 2 tuning seeds, per batch and
               side; batch 256 first (the batch-4096 grid contains the batch-256 base's best
               rate x sqrt(16)); a best rate at a grid edge extends both sides' grids.
  final        6 fresh seeds (0-5) per side at its own best rate, batch 4096 then 256.
  controls     VR-shuffled (the factor permuted at random within each variable every step)
               at VR's best 4096 rate, 6 seeds.
  paper        both sides at the square-root-scaled rate (untuned), 6 seeds at 4096.

Each phase writes ``<out_dir>/<phase>.json`` atomically after every run; a rerun skips the
runs already there. ``--budget_minutes`` stops before a run whose expected time (the mean wall
time of the finished runs at that batch, or the pilot's) would overrun.

Every run: 8 replicas (logical CPUs, MirroredStrategy), gamma 0.1, 30 epochs, linear
warm-up over 3 epochs then cosine to 0, mean cross-entropy over the global batch. A seed fixes
the initial weights and the data order, the same for both sides. Per epoch: validation
accuracy/loss, training accuracy/loss on a fixed 10k subset of the training split, the VR
diagnostics of the last step; at the end the full training split and the test set.

Examples:
  python3 studies/evidence/round2.py --phases=mechanistic
  nohup python3 studies/evidence/round2.py --phases=tune,final,controls,paper \
      --budget_minutes=600 > /tmp/evidence.log 2>&1 &
"""

import math
import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/
# This checkout's vrgd_tf first, whatever copy is installed.
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))

import evidence_stats as es  # noqa: E402

FLAGS = flags.FLAGS
PHASES = ("mechanistic", "tune", "final", "controls", "paper")
flags.DEFINE_list("phases", ["tune", "final", "controls", "paper"], f"Subset of {PHASES}.")
flags.DEFINE_list("pairs", ["momentum"], "Optimizer pairs, in order: momentum, lamb.")
flags.DEFINE_string("data_dir", None, "Fashion-MNIST IDX directory (default: Debian's).")
flags.DEFINE_string("out_dir", None, "JSON directory (default studies/evidence/results/round2).")
flags.DEFINE_float("budget_minutes", 0.0, "Stop before a run that would overrun (0 = none).")
flags.DEFINE_integer("replicas", 8, "Replicas (logical CPUs).")
flags.DEFINE_float("gamma", 0.1, "VRGD gamma.")
flags.DEFINE_integer("epochs", 30, "Epochs per run.")
flags.DEFINE_integer("warmup_epochs", 3, "Linear warm-up epochs.")
flags.DEFINE_integer("small_batch", 256, "Small global batch.")
flags.DEFINE_integer("large_batch", 4096, "Large global batch.")
flags.DEFINE_list("tune_seeds", ["1000", "1001"], "Tuning seeds.")
flags.DEFINE_list("final_seeds", ["0", "1", "2", "3", "4", "5"], "Seeds of final/control runs.")
flags.DEFINE_list("centers", ["momentum:0.05", "lamb:0.01"], "pair:lr, the batch-256 grid centre.")
flags.DEFINE_list(
    "grid_exponents", ["-2", "-1", "0", "1", "2", "3"], "Grid: centre x 2**e for these e."
)
flags.DEFINE_integer("max_extensions", 3, "Edge extensions per grid at most.")
flags.DEFINE_integer("train_eval_subset", 10000, "Training examples evaluated per epoch.")
flags.DEFINE_bool("quick", False, "Development smoke test: 2 epochs, small grids, 1 seed.")

PILOT_MINUTES = {256: 6.0, 4096: 3.5}  # ROUND2_PROTOCOL.md budget, 30 epochs


# --------------------------------------------------------------------------------------------
# Results files
# --------------------------------------------------------------------------------------------


def out_dir():
    return FLAGS.out_dir or os.path.join(HERE, "results", "round2")


def load_phase(phase):
    import studylib

    path = os.path.join(out_dir(), f"{phase}.json")
    if os.path.exists(path):
        return studylib.read_json(path)
    return {"phase": phase, "runs": {}}


def save_phase(phase, obj):
    import provenance
    import studylib

    obj.setdefault("environment", dict(provenance.environment(), library=provenance.snapshot()))
    obj["command"] = provenance.command_line()
    obj["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    studylib.write_json(os.path.join(out_dir(), f"{phase}.json"), obj)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


class Budget:
    """Wall-clock guard: ``fits(batch)`` is False when the expected run time would overrun."""

    def __init__(self, minutes):
        self.limit = minutes * 60.0 if minutes > 0 else None
        self.start = time.time()
        self.times = {}

    def record(self, batch, seconds):
        self.times.setdefault(batch, []).append(seconds)

    def expected(self, batch):
        t = self.times.get(batch)
        if t:
            return sum(t) / len(t)
        return 60.0 * PILOT_MINUTES.get(batch, 6.0) * FLAGS.epochs / 30.0

    def fits(self, batch):
        if self.limit is None:
            return True
        return time.time() - self.start + self.expected(batch) <= self.limit


class OutOfBudget(Exception):
    pass


class Runner:
    """Trainers (one traced graph per pair, side and variant) and the data."""

    def __init__(self, data, budget):
        self.data = data
        self.budget = budget
        self.trainers = {}

    def trainer(self, pair, side, shuffled=False):
        import studylib
        import tensorflow as tf

        key = (pair, side, shuffled)
        if key not in self.trainers:
            strategy = studylib.strategy_for(FLAGS.replicas)
            with strategy.scope():
                shuffle_seed = tf.Variable(0, dtype=tf.int64, trainable=False)

            def make_opt(schedule):
                transforms = [shuffle_transform(shuffle_seed)] if shuffled else []
                return studylib.make_optimizer(
                    pair, side, schedule, gamma=FLAGS.gamma, factor_transforms=transforms
                )

            t = studylib.Trainer(strategy, studylib.fashion_cnn, make_opt)
            t.shuffle_seed = shuffle_seed
            self.trainers[key] = t
        return self.trainers[key]

    def run(self, pair, side, batch, lr, seed, shuffled=False):
        """One training run; returns its record."""
        import studylib

        if not self.budget.fits(batch):
            raise OutOfBudget(f"{pair}/{side}/b{batch}")
        trainer = self.trainer(pair, side, shuffled)
        d = self.data
        n = d["x"].shape[0]
        steps_per_epoch = n // batch
        total = steps_per_epoch * FLAGS.epochs
        warmup = steps_per_epoch * FLAGS.warmup_epochs
        key = ("w", seed)
        weights = trainer.weight_cache.get(key)
        if weights is None:
            weights = trainer.weight_cache[key] = studylib.init_weights(studylib.fashion_cnn, seed)
        # Warm-up "over 3 epochs": lr(s) = peak (s + 1) / W for s < W, then cosine to 0.
        trainer.reset(weights, lr, warmup, total)
        if shuffled:
            trainer.shuffle_seed.assign(seed)
        t0 = time.time()
        curve, diag, train_s = studylib.train_epochs(
            trainer, d, seed, batch, FLAGS.epochs, FLAGS.train_eval_subset
        )
        train_acc, train_loss = trainer.evaluate(d["tf_x"], d["tf_y"])
        test_acc, test_loss = trainer.evaluate(d["tf_x_test"], d["tf_y_test"])
        wall = time.time() - t0
        self.budget.record(batch, wall)
        return {
            "pair": pair,
            "side": "vr_shuffled" if shuffled else side,
            "batch": batch,
            "peak_lr": lr,
            "seed": seed,
            "epochs": FLAGS.epochs,
            "steps": total,
            "warmup_steps": warmup,
            "replicas": FLAGS.replicas,
            "gamma": FLAGS.gamma if side == "vr" else None,
            "optimizer_config": trainer.optimizer_config,
            "final": {
                "val_acc": curve[-1]["val_acc"],
                "val_loss": curve[-1]["val_loss"],
                "train_acc": round(100 * train_acc, 3),
                "train_loss": round(train_loss, 5),
                "test_acc": round(100 * test_acc, 3),
                "test_loss": round(test_loss, 5),
                "gap": round(100 * (train_acc - test_acc), 3),
                "diverged": not (math.isfinite(train_loss) and math.isfinite(test_loss)),
            },
            "curve": curve,
            "diagnostics": diag,
            "wall_s": round(wall, 1),
            "train_s": round(train_s, 1),
        }


def shuffle_transform(seed_var):
    """The VR-shuffled control's factor transform (``factor_transforms``): a random
    permutation of each variable's factor, new every step, from stateless draws keyed by
    (run seed, step, variable), so every replica applies the same permutation."""
    import tensorflow as tf

    def permute(factor, context):
        n = factor.shape[0]
        key = tf.stack(
            [
                tf.cast(seed_var, tf.int64),
                tf.cast(context.step, tf.int64) * 1009 + context.index,
            ]
        )
        order = tf.argsort(tf.random.stateless_uniform([n], key, alg="philox"))
        return tf.gather(factor, order)

    return permute


# --------------------------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------------------------


def phase_tune(runner, pair, state):
    """Runs the missing tuning runs; returns {batch: {side: best lr}} (partial if cut)."""
    runs = state["runs"]
    seeds = [int(s) for s in FLAGS.tune_seeds]
    center = dict(c.split(":") for c in FLAGS.centers)
    best = {}
    plan = [(FLAGS.small_batch, float(center[pair]))]
    for batch, c in plan:
        while True:
            rates, chosen = es.tune_grid(
                runs,
                pair,
                batch,
                c,
                seeds,
                exponents=[int(e) for e in FLAGS.grid_exponents],
                max_extensions=FLAGS.max_extensions,
            )
            state.setdefault("grids", {})[f"{pair}/b{batch}"] = rates
            if chosen is not None:
                break
            for seed in seeds:
                for lr in rates:
                    for side in ("base", "vr"):
                        key = es.run_key(pair, side, batch, lr, seed)
                        if key in runs:
                            continue
                        logging.info("tune %s", key)
                        runs[key] = runner.run(pair, side, batch, lr, seed)
                        save_phase("tune", state)
                        logging.info(
                            "  val %.2f test %.2f wall %.0fs",
                            runs[key]["final"]["val_acc"],
                            runs[key]["final"]["test_acc"],
                            runs[key]["wall_s"],
                        )
        best[batch] = chosen
        state.setdefault("best", {})[f"{pair}/b{batch}"] = chosen
        save_phase("tune", state)
        if batch == FLAGS.small_batch:
            scaled = chosen["base"] * math.sqrt(FLAGS.large_batch / FLAGS.small_batch)
            state.setdefault("sqrt_scaled", {})[pair] = scaled
            plan.append((FLAGS.large_batch, scaled))
    return best


def tuned(pair):
    """{batch: {side: lr}} and the sqrt-scaled rate from tune.json; raises if not done."""
    state = load_phase("tune")
    out = {}
    for batch in (FLAGS.small_batch, FLAGS.large_batch):
        b = state.get("best", {}).get(f"{pair}/b{batch}")
        if b is None:
            raise OutOfBudget(f"tuning of {pair} at batch {batch} not finished")
        out[batch] = b
    return out, state["sqrt_scaled"][pair]


def run_list(runner, phase, state, specs):
    runs = state["runs"]
    for pair, side, batch, lr, seed, shuffled in specs:
        key = es.run_key(pair, "vr_shuffled" if shuffled else side, batch, lr, seed)
        if key in runs:
            continue
        logging.info("%s %s", phase, key)
        runs[key] = runner.run(pair, side, batch, lr, seed, shuffled=shuffled)
        save_phase(phase, state)
        logging.info("  test %.2f wall %.0fs", runs[key]["final"]["test_acc"], runs[key]["wall_s"])


def phase_final(runner, pair, state):
    best, _ = tuned(pair)
    seeds = [int(s) for s in FLAGS.final_seeds]
    specs = [
        (pair, side, batch, best[batch][side], seed, False)
        for batch in (FLAGS.large_batch, FLAGS.small_batch)
        for seed in seeds
        for side in ("base", "vr")
    ]
    state.setdefault("best", {}).update({f"{pair}/b{b}": best[b] for b in best})
    run_list(runner, "final", state, specs)


def phase_controls(runner, pair, state):
    best, _ = tuned(pair)
    lr = best[FLAGS.large_batch]["vr"]
    state.setdefault("rates", {})[pair] = lr
    specs = [(pair, "vr", FLAGS.large_batch, lr, int(s), True) for s in FLAGS.final_seeds]
    run_list(runner, "controls", state, specs)


def phase_paper(runner, pair, state):
    _, scaled = tuned(pair)
    state.setdefault("rates", {})[pair] = scaled
    specs = [
        (pair, side, FLAGS.large_batch, scaled, int(s), False)
        for s in FLAGS.final_seeds
        for side in ("base", "vr")
    ]
    run_list(runner, "paper", state, specs)


# --------------------------------------------------------------------------------------------


def main(argv):
    del argv
    import studylib

    if FLAGS.quick:
        FLAGS.epochs, FLAGS.warmup_epochs = 2, 1
        FLAGS.tune_seeds, FLAGS.final_seeds = ["1000"], ["0"]
        FLAGS.grid_exponents = ["0", "1", "2"]
        FLAGS.max_extensions = 0
        FLAGS.out_dir = FLAGS.out_dir or os.path.join(HERE, "results", "round2_quick")
    unknown = [p for p in FLAGS.phases if p not in PHASES]
    if unknown:
        raise ValueError(f"--phases: unknown {unknown}; allowed {PHASES}.")
    studylib.setup_devices(FLAGS.replicas)
    budget = Budget(FLAGS.budget_minutes)
    phases = [p for p in PHASES if p in FLAGS.phases]
    if "mechanistic" in phases:
        import evidence_mech

        state = load_phase("mechanistic")
        evidence_mech.run_all(state, FLAGS, lambda: save_phase("mechanistic", state))
        save_phase("mechanistic", state)
        phases.remove("mechanistic")
    if not phases:
        return
    data = studylib.load_fashion_mnist(FLAGS.data_dir)
    if FLAGS.quick:  # smoke test only: 8192 training examples
        data["x"], data["y"] = data["x"][:8192], data["y"][:8192]
    data = studylib.prepare(data)
    runner = Runner(data, budget)
    steps = {"tune": phase_tune, "final": phase_final, "controls": phase_controls}
    steps["paper"] = phase_paper
    try:
        for pair in FLAGS.pairs:
            for phase in phases:
                state = load_phase(phase)
                steps[phase](runner, pair, state)
                save_phase(phase, state)
    except OutOfBudget as e:
        logging.warning("stopped (budget or prerequisite): %s", e)


if __name__ == "__main__":
    app.run(main)
