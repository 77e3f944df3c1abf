r"""Does today's library give round 3's runs? (issue 37: the results hold for the frozen
commit f199ea9; the library changed after it.) Reruns the named final runs of
``results/round3/final.json`` with this checkout's code, through round 3's own runner
(``round3.Runner``: the same trainer, data, seeds and schedule), and writes
``results/round3/replicate.json``: per run the frozen and today's final validation and
test accuracy, the largest difference over the validation curve, and both provenances.
Outside the registered protocol: a check of the code, not evidence. Refuses a dirty tree.

Example (from the repository root):
  PYTHONPATH=$PWD python3 studies/evidence/replicate3.py \
      --keys=lamb/vr/lr0.0336359/s0,momentum/vr/lr0.0707107/s0
"""

import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import round3  # noqa: E402  (defines round3's flags; --out_dir is the results directory)

FLAGS = flags.FLAGS
flags.DEFINE_list("keys", [], "Final-phase run keys of final.json to rerun.")
FILE = "replicate.json"


def compare(frozen, today):
    """The record of one rerun beside its frozen run."""
    curve = [abs(a["val_acc"] - b["val_acc"]) for a, b in zip(frozen["curve"], today["curve"])]
    differs = [c["epoch"] for c, d in zip(frozen["curve"], today["curve"]) if c != d]
    return {
        "first_epoch_differing": differs[0] if differs else None,
        "frozen_val_curve": [c["val_acc"] for c in frozen["curve"]],
        "today_val_curve": [c["val_acc"] for c in today["curve"]],
        "frozen": {k: frozen["final"][k] for k in ("val_acc", "test_acc")},
        "today": {k: today["final"][k] for k in ("val_acc", "test_acc")},
        "max_abs_val_curve_diff_pp": max(curve),
        "identical_curve": frozen["curve"] == today["curve"],
        "frozen_commit": frozen["provenance"].get("git_commit"),
        "provenance": today["provenance"],
        "wall_s": today["wall_s"],
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv):
    del argv
    import provenance
    import studylib

    studylib.setup_devices(round3.p3.K)
    import arms  # noqa: F401  (imported before the first provenance snapshot)

    import vrgd_tf  # noqa: F401

    start = provenance.snapshot(ignore=(round3.results_prefix(),))
    if start["dirty"]:
        raise SystemExit(f"refused: the code is not a clean commit ({start['changed']}).")
    frozen = round3.load_phase("final")["runs"]
    path = os.path.join(round3.out_dir(), FILE)
    state = studylib.read_json(path) if os.path.exists(path) else {"runs": {}}
    runner = round3.Runner(round3.load_data(with_test=True), round3.Budget(0), round3.p3.EPOCHS)
    for key in FLAGS.keys:
        old = frozen[key]
        logging.info("replicate %s", key)
        new = runner.run(old["pair"], old["arm"], old["peak_lr"], old["seed"], with_test=True)
        state["runs"][key] = rec = compare(old, new)
        state["command"] = provenance.command_line()
        studylib.write_json(path, state)
        logging.info("  %s", {k: rec[k] for k in ("frozen", "today", "identical_curve")})


if __name__ == "__main__":
    app.run(main)
