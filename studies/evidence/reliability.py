r"""Is the GSNR informative in the Fashion-MNIST study? The split-half reliability of the
GSNR (``split_half=True``, ``docs/spec.md`` section 4) on the study's setting: a diagnostic
run OUTSIDE the registered protocol (studies/evidence/PROTOCOL.md registers no such
measurement and none of its results depend on this one).

The setting is round 3's, from its own modules: Fashion-MNIST 55k/5k (``studylib``), the
CNN (``studylib.fashion_cnn``), batch 4096 in k = 8 GSNR samples of 512 examples, 30 epochs,
3 warm-up epochs then cosine (``studylib.make_schedule`` with ``protocol3``'s constants),
gamma 0.1, library defaults otherwise, one seed, one rate per VR optimizer:

- ``momentum``: VRGDSGD (momentum 0.9) at 0.05, the centre of round 3's registered grid;
- ``lamb``: VRGDLamb (weight decay 0.01, bias excluded, beta_3 0.9) at 0.02, the centre of
  the registered LAMB grid (PROTOCOL.md section 6; no tuned LAMB rate exists yet).

Layout: 8 replicas of one 512-example shard each (``--layout=replicas``, round 3's
runner's alternative layout: the same shards, the same weights up to float rounding, as the
layout pilot measured). The registered layout, 1 device x 8 micro-batch groups, hands VRGD
only the groups' sums, so no split into halves exists there (the library records the
reliability as undefined: ``--layout=groups`` shows it). Half A is replicas 0-3 (k_A = 4),
half B replicas 4-7.

Recorded per epoch (the epoch's last step, as round 3 records its diagnostics): every
field of ``vrgd_statistics()`` per variable, so the mean factor next to ``reliability``
(Spearman-Brown), ``reliability_correlation`` (the halves' Pearson correlation),
``reliability_pairs`` and ``reliability_defined``. Validation only (the test set is not
loaded).

Then the demo (``--demo_optimizers``): ``examples/digits/digits_large_batch.py`` with its
defaults (8 replicas, batch 1024, 40 epochs; it sets ``split_half=True`` on 4 replicas or
more) for its VR optimizers, in a subprocess of its own; its per-epoch median reliability
over variables and its last step's per-variable rows are copied from the demo's
``results.json``.

``results/round3/reliability.json`` is rewritten atomically after each run;
rerunning skips the finished runs.

Example (from the repository root):
  PYTHONPATH=$PWD setsid nohup python3 studies/evidence/reliability.py \
      > /tmp/reliability.log 2>&1 &
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

FLAGS = flags.FLAGS
#: pair -> (peak learning rate, why): see the module docstring.
RATES = {
    "momentum": (0.05, "centre of round 3's registered Momentum grid"),
    "lamb": (0.02, "centre of round 3's registered LAMB grid (no tuned LAMB rate yet)"),
}
SEED = 0
WHAT = (
    "split-half reliability of the GSNR on the round-3 setting: a diagnostic outside the "
    "registered protocol (studies/evidence/PROTOCOL.md)"
)


def define_flags():
    """The runner's flags, defined only when it runs as a script (so that a test importing
    this module next to another runner does not define ``--quick`` twice)."""
    flags.DEFINE_list("pairs", ["momentum", "lamb"], f"VR optimizers, of {sorted(RATES)}.")
    flags.DEFINE_integer("epochs", p3.EPOCHS, "Epochs per run (registered setting: 30).")
    flags.DEFINE_enum("layout", "replicas", ["replicas", "groups"], "See the module docstring.")
    flags.DEFINE_string("data_dir", None, "Fashion-MNIST IDX directory (default: Debian's).")
    flags.DEFINE_string("out", None, "JSON file (default results/round3/reliability.json).")
    flags.DEFINE_list(
        "demo_optimizers", ["vrgd_lamb", "vrgd_lars"], "The digits demo's VR runs ('' = none)."
    )
    flags.DEFINE_bool("quick", False, "Smoke test: 1 epoch of 8k examples, own file.")


def out_path():
    default = "reliability_quick.json" if FLAGS.quick else "reliability.json"
    return FLAGS.out or os.path.join(HERE, "results", "round3", default)


def epochs():
    return 1 if FLAGS.quick else FLAGS.epochs


def load_state():
    import studylib

    if os.path.exists(out_path()):
        return studylib.read_json(out_path())
    return {"what": WHAT, "runs": {}}


def save_state(state):
    import studylib

    state["command"] = provenance.command_line()
    state["environment"] = provenance.environment()
    state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    studylib.write_json(out_path(), state)


def make_trainer(pair):
    """The study's trainer of ``pair``'s VR optimizer with ``split_half=True``."""
    import studylib

    groups = p3.K if FLAGS.layout == "groups" else 1
    strategy = studylib.strategy_for(1 if groups > 1 else p3.K)

    def make_opt(schedule):
        return studylib.make_optimizer(pair, "vr", schedule, gamma=p3.GAMMA, split_half=True)

    return studylib.Trainer(strategy, studylib.fashion_cnn, make_opt, groups=groups)


def run(pair, data):
    """One run of ``pair``'s VR optimizer at its rate of :data:`RATES`; its record."""
    import studylib

    lr, why = RATES[pair]
    trainer = make_trainer(pair)
    steps = data["x"].shape[0] // p3.BATCH
    weights = studylib.init_weights(studylib.fashion_cnn, SEED)
    trainer.reset(weights, lr, steps * p3.WARMUP_EPOCHS, steps * epochs())
    t0 = time.time()
    curve, diag, train_s = studylib.train_epochs(
        trainer, data, SEED, p3.BATCH, epochs(), p3.TRAIN_EVAL_SUBSET
    )
    return {
        "pair": pair,
        "arm": "vr",
        "peak_lr": lr,
        "lr_choice": why,
        "seed": SEED,
        "batch": p3.BATCH,
        "samples": p3.K,
        "layout": FLAGS.layout,
        "epochs": epochs(),
        "steps": steps * epochs(),
        "warmup_steps": steps * p3.WARMUP_EPOCHS,
        "gamma": p3.GAMMA,
        "optimizer_config": trainer.optimizer_config,
        "curve": curve,
        "diagnostics": diag,
        "train_s": round(train_s, 1),
        "wall_s": round(time.time() - t0, 1),
        "load_average": list(os.getloadavg()),
        "provenance": provenance.snapshot(ignore=(results_prefix(),)),
    }


def demo_command(optimizers, output_dir):
    """The digits demo's command line (its defaults but ``optimizers``)."""
    script = os.path.join(provenance.REPO, "examples", "digits", "digits_large_batch.py")
    args = [sys.executable, script, f"--optimizers={','.join(optimizers)}"]
    args += [f"--output_dir={output_dir}", "--keras_verbose=0"]
    return args + (["--epochs=2", "--warmup_epochs=1"] if FLAGS.quick else [])


#: The per-variable fields kept from the demo's last step.
DEMO_FIELDS = (
    "mean_factor",
    "reliability",
    "reliability_correlation",
    "reliability_pairs",
    "reliability_defined",
)


def demo_record(results):
    """``{"config", "runs"}``: the demo's config and VR runs of its ``results.json`` (a
    dict), as recorded here (per run the rate, the per-epoch median reliability and test
    accuracy, the last step's :data:`DEMO_FIELDS` per variable)."""
    runs = {}
    for name, r in results["runs"].items():
        stats = r.get("vrgd_statistics") or {}
        runs[name] = {
            "peak_lr": r["peak_learning_rate"],
            "median_reliability": r["curves"].get("reliability", []),
            "test_accuracy": r["curves"].get("test_accuracy", []),
            "last_step": {
                v: {f: row.get(f) for f in DEMO_FIELDS}
                for v, row in stats.get("per_variable", {}).items()
            },
        }
    return {"config": results["config"], "runs": runs}


def run_demo(optimizers):
    """Runs the digits demo for ``optimizers`` in a subprocess: :func:`demo_record` with the
    command, wall time, load and provenance."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        command = demo_command(optimizers, tmp)
        env = dict(os.environ, PYTHONPATH=provenance.REPO)
        t0 = time.time()
        subprocess.run(command, check=True, env=env, cwd=provenance.REPO)
        with open(os.path.join(tmp, "results.json")) as f:
            results = json.load(f)
    shown = [
        a if not a.startswith("--output_dir=") else "--output_dir=<temporary>" for a in command
    ]
    return dict(
        demo_record(results),
        command=" ".join([os.path.relpath(shown[1], provenance.REPO)] + shown[2:]),
        wall_s=round(time.time() - t0, 1),
        load_average=list(os.getloadavg()),
        provenance=provenance.snapshot(ignore=(results_prefix(),)),
    )


def results_prefix():
    return os.path.relpath(os.path.dirname(out_path()), provenance.REPO) + os.sep


def load_data():
    import studylib

    data = studylib.load_fashion_mnist(FLAGS.data_dir)
    del data["x_test"], data["y_test"]
    if FLAGS.quick:
        data["x"], data["y"] = data["x"][:8192], data["y"][:8192]
    return studylib.prepare(data, with_test=False)


def main(argv):
    del argv
    import studylib

    unknown = [p for p in FLAGS.pairs if p not in RATES]
    if unknown:
        raise ValueError(f"--pairs: unknown {unknown}; allowed {sorted(RATES)}.")
    studylib.setup_devices(p3.K)
    import vrgd_tf  # noqa: F401

    logging.info("provenance at start: %s", provenance.snapshot(ignore=(results_prefix(),)))
    data = load_data()
    state = load_state()
    for pair in FLAGS.pairs:
        key = f"{pair}/{FLAGS.layout}/lr{RATES[pair][0]:.6g}/s{SEED}/e{epochs()}"
        if key in state["runs"]:
            logging.info("done already: %s", key)
            continue
        logging.info("run %s", key)
        state["runs"][key] = run(pair, data)
        save_state(state)
        r = state["runs"][key]
        logging.info("  val %.2f wall %.0fs", r["curve"][-1]["val_acc"], r["wall_s"])
    todo = [o for o in FLAGS.demo_optimizers if o not in state.get("demo", {}).get("runs", {})]
    if todo:
        logging.info("demo %s", todo)
        record = run_demo(todo)
        done = state.get("demo", {}).get("runs", {})
        state["demo"] = dict(record, runs=dict(done, **record["runs"]))
        save_state(state)


if __name__ == "__main__":
    define_flags()
    app.run(main)
