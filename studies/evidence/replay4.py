r"""Is a round-4 run the same when replayed here? (PROTOCOL4.md section 7, 2026-12-07: the
sessions' machines differ, and TensorFlow turns its oneDNN kernels on by default on some
CPUs.) Replays the first ``--epochs`` epochs of recorded tuning runs of
``results/round4/tune.json`` through round 4's own runner (``round4.Runner``: the same
trainer, data, seed and schedule; the warm-up lasts 16 epochs, so the first epochs do not
depend on the run's length) with the code of ``--checkout`` (the frozen commit's worktree,
or this checkout for today's library), on this machine with this process's oneDNN setting
(``TF_ENABLE_ONEDNN_OPTS``), and adds to ``results/round4/replay4.json`` one record per run,
checkout and setting: both curves, whether they are identical and the first epoch that
differs. Outside the registered protocol: a check of the execution, not evidence.

Example (from the repository root; the frozen worktree as in studies/README.md):
  PYTHONPATH=$PWD python3 studies/evidence/replay4.py --checkout=../evidence4 \
      --keys=momentum/base/lr6.4/s1000,momentum/vr/lr3.2/s1000
"""

import json
import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

FLAGS = flags.FLAGS
FILE = "replay4.json"


def define_flags():
    """The command's flags (defined when it runs, so that a test imports :func:`compare`
    beside the studies' other flags)."""
    flags.DEFINE_list("keys", [], "Tuning run keys of tune.json to replay.")
    flags.DEFINE_integer("epochs", 3, "Epochs replayed (at most the warm-up's 16).")
    flags.DEFINE_string("checkout", REPO, "The checkout whose round4.py and vrgd_tf run.")
    flags.DEFINE_string(
        "results", os.path.join(HERE, "results", "round4"), "tune.json's folder; replay4.json's."
    )


def compare(recorded, replayed):
    """The record of one replay beside the recorded run's first epochs."""
    head = recorded["curve"][: len(replayed)]
    differs = [a["epoch"] for a, b in zip(head, replayed) if a != b]
    return {
        "identical": not differs and len(head) == len(replayed),
        "first_epoch_differing": differs[0] if differs else None,
        "recorded": head,
        "replayed": replayed,
        "recorded_started": recorded.get("started"),
    }


def _this_checkouts_shared():
    """This checkout's ``studies/shared.py`` under another module name, so that the replayed
    checkout's own ``shared`` is the one its modules import."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_replay4_shared", os.path.join(REPO, "studies", "shared.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv):
    del argv
    if not 1 <= FLAGS.epochs <= 16:
        raise app.UsageError("--epochs must be 1-16 (the warm-up: the schedule is the run's).")
    here = _this_checkouts_shared()  # the machine facts, without the checkout's modules
    checkout = os.path.abspath(FLAGS.checkout)
    for sub in ("studies", os.path.join("studies", "evidence"), ""):
        sys.path.insert(0, os.path.join(checkout, sub))
    import round4  # the checkout's, now that its folders lead sys.path

    FLAGS.mark_as_parsed()  # round4's flags, defined after parsing: their defaults
    import studylib

    studylib.setup_devices(1)
    import arms  # noqa: F401  (imported before the provenance snapshot)
    import provenance

    import vrgd_tf

    prov = provenance.snapshot(ignore=(round4.results_prefix(),))
    if prov["dirty"]:
        raise SystemExit(f"refused: the checkout is not a clean commit ({prov['changed']}).")
    with open(os.path.join(FLAGS.results, "tune.json")) as f:
        recorded = json.load(f)["runs"]
    path = os.path.join(FLAGS.results, FILE)
    state = studylib.read_json(path) if os.path.exists(path) else {"replays": []}
    setting = {
        "checkout_commit": prov["git_commit"],
        "vrgd_tf": os.path.dirname(vrgd_tf.__file__),
        "tf_onednn": here.tf_onednn(),
        "cpu_model": here.cpu_model(),
    }
    budget = round4.Budget(0.0, round4.p4.PILOT_SECONDS)
    runner = round4.Runner(round4.load_data(with_test=False), budget, FLAGS.epochs)
    for key in FLAGS.keys:
        old = recorded[key]
        new = runner.run(old["pair"], old["arm"], old["peak_lr"], old["seed"], with_test=False)
        rec = dict(compare(old, new["curve"]), key=key, **setting)
        rec["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state["replays"].append(rec)
        state["command"] = here.command_line()
        studylib.write_json(path, state)
        logging.info(
            "%s: identical %s (first differing epoch %s)",
            key,
            rec["identical"],
            rec["first_epoch_differing"],
        )


if __name__ == "__main__":
    define_flags()
    app.run(main)
