r"""Element passes of VRGD's GSNR step, against one copy pass and against LAMB's update.

One process, one CPU device, no strategy (one replica): 44 variables with the shapes of
BERT-tiny's trainable variables (Model Garden ``BertEncoder`` 2 x 128 with its masked-LM
head at sequence length 128, N = 4,384,058 elements, the word embedding 3,906,816 of them),
their gradients and the sums of four micro-batch groups' squares held in variables. Three
steps, each a ``tf.function`` (graph mode, then ``jit_compile=True``):

  pass   one read+write pass over all N elements: ``dst.assign(src + 1.0)`` on one flat
         float32 ``[N]`` buffer (memory bandwidth, no per-variable overhead);
  lamb   ``vrgd_tf.Lamb(1e-4, weight_decay_rate=0.01).apply_gradients`` of the gradients;
  vrgd   ``vrgd_tf.VRGDLamb`` with the same arguments and the VRGD defaults (``gamma=0.1``,
         ``beta_3=0.9``, statistics every step) applying the same gradients as the sum of
         ``m = 4`` groups (``apply_grouped_gradients(..., sq_sums, num_groups=4)``, k = 4).

Timing: every step of both modes is traced and warmed up, then each of ``--reps``
repetitions times all six once (``--steps`` calls each), in an order rotated per repetition.
Reported per mode, from the medians and from the minima over the repetitions:
``lamb_passes = lamb / pass``, ``vrgd_passes = vrgd / pass`` and ``gsnr_passes =
(vrgd - lamb) / pass``, the GSNR part (issue 19's target: at most 24). The numbers are of
this machine and its load (2 cores shared with other work): read the ratios, not the times.
At the end the run checks :data:`BOUNDS` (``benchmarks/bounds.py``): PASS/FAIL per mode, exit
status 1 on a failure (``--quick``: informative only).

Examples:
  python3 benchmarks/passes.py                 # about 5 minutes
  python3 benchmarks/passes.py --cpu_time      # one thread, CPU time: stable under load
  python3 benchmarks/passes.py --quick         # seconds: small shapes, a smoke run
  PYTHONPATH=/tmp/before python3 benchmarks/passes.py --out /tmp/passes_before.json
"""

import argparse
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(HERE))  # this checkout's vrgd_tf, installed or not

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from bert_shapes import BERT_TINY_SHAPES, QUICK_SHAPES  # noqa: E402, F401

import bounds  # noqa: E402
import harness  # noqa: E402

NUM_GROUPS = 4

#: Regression bounds of the full run: the GSNR part from the fastest repetitions, each mode.
BOUNDS = (
    bounds.Bound(
        "gsnr_passes",
        24.0,
        "issue 19: the GSNR part of a VRGDLamb step at most 24 passes per element, in graph "
        "mode and under XLA",
    ),
)


def bound_measurements(rows):
    """The rows of :func:`measure` as :mod:`bounds` measurements (min-based GSNR passes)."""
    for row in rows:
        case = {"jit_compile": row["jit_compile"], "stat": "min"}
        yield bounds.Measurement("gsnr_passes", case, row["min"]["gsnr_passes"])


def _variables(shapes):
    """Weights, gradients and the four groups' summed squares, as variables (fixed)."""
    rng = np.random.default_rng(0)
    weights, grads, squares = [], [], []
    for shape in shapes:
        groups = rng.standard_normal((NUM_GROUPS,) + tuple(shape), np.float32) * 1e-3
        groups += rng.standard_normal(tuple(shape), np.float32) * 1e-3  # a shared signal
        weights.append(rng.standard_normal(shape, np.float32) * 0.02)
        grads.append(tf.Variable(groups.sum(0), trainable=False))
        squares.append(tf.Variable(np.square(groups).sum(0), trainable=False))
    return weights, grads, squares


def _steps(shapes, grads, squares, weights, jit_compile):
    """``{name: tf.function}`` of the three steps of one mode, on fresh variables."""
    import vrgd_tf

    n = int(sum(int(np.prod(s)) for s in shapes))
    src = tf.Variable(tf.zeros([n]), trainable=False)
    dst = tf.Variable(tf.zeros([n]), trainable=False)
    kwargs = dict(learning_rate=1e-4, weight_decay_rate=0.01)
    lamb, vrgd = vrgd_tf.Lamb(**kwargs), vrgd_tf.VRGDLamb(**kwargs)
    lamb_w = [tf.Variable(w) for w in weights]
    vrgd_w = [tf.Variable(w) for w in weights]
    lamb.build(lamb_w)
    vrgd.build(vrgd_w)
    assert vrgd.beta_3 == 0.9 and vrgd.statistics_interval == 1 and vrgd.gamma == 0.1

    def copy():
        dst.assign(src + 1.0)

    def base():
        lamb.apply_gradients(zip([g.read_value() for g in grads], lamb_w))

    def vr():
        vrgd.apply_grouped_gradients(
            list(zip([g.read_value() for g in grads], vrgd_w)),
            [q.read_value() for q in squares],
            num_groups=NUM_GROUPS,
        )

    fns = {"pass": copy, "lamb": base, "vrgd": vr}
    return {k: tf.function(f, jit_compile=jit_compile) for k, f in fns.items()}, vrgd


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _time(fn, steps, clock):
    t0 = clock()
    for _ in range(steps):
        fn()
    return (clock() - t0) / steps


def measure(shapes, reps, steps, log=print, clock=time.perf_counter):
    """Both modes' steps timed interleaved (one repetition times all six); one row per
    mode with the median and minimum times (ms, of ``clock``) and the passes from each."""
    weights, grads, squares = _variables(shapes)
    fns, optimizers = {}, {}
    for jit in (False, True):
        mode_fns, optimizers[jit] = _steps(shapes, grads, squares, weights, jit)
        fns.update({(jit, name): f for name, f in mode_fns.items()})
    keys = list(fns)
    for key in keys:
        fns[key]()  # trace
        _time(fns[key], steps, clock)  # warm up
    times = {key: [] for key in keys}
    for r in range(reps):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            times[key].append(_time(fns[key], steps, clock))
    rows = []
    for jit in (False, True):
        row = {"jit_compile": jit}
        for stat, fn in (("median", np.median), ("min", np.min)):
            t = {name: float(fn(times[(jit, name)])) for name in ("pass", "lamb", "vrgd")}
            row[stat] = {
                "ms": {name: v * 1e3 for name, v in t.items()},
                "lamb_passes": t["lamb"] / t["pass"],
                "vrgd_passes": t["vrgd"] / t["pass"],
                "gsnr_passes": (t["vrgd"] - t["lamb"]) / t["pass"],
            }
        stats = optimizers[jit].vrgd_statistics()
        row["mean_factor"] = float(np.mean([s["mean_factor"] for s in stats.values()]))
        med = row["median"]
        log(
            f"jit_compile={jit}: pass {med['ms']['pass']:.2f} ms, LAMB "
            f"{med['lamb_passes']:.1f} passes, VRGD {med['vrgd_passes']:.1f}, GSNR part "
            f"{med['gsnr_passes']:.1f} (min-based {row['min']['gsnr_passes']:.1f}; mean factor "
            f"{row['mean_factor']:.3f})"
        )
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="Small shapes, few repetitions.")
    parser.add_argument("--reps", type=int, default=None, help="Repetitions (default 21).")
    parser.add_argument("--steps", type=int, default=None, help="Calls per timing (default 5).")
    parser.add_argument(
        "--cpu_time",
        action="store_true",
        help="One TensorFlow thread (intra- and inter-op) and the process's CPU time instead "
        "of the wall clock: the work of each step, insensitive to other load on the machine.",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON written (default benchmarks/results/passes.json; passes_quick.json with "
        "--quick).",
    )
    args = parser.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else BERT_TINY_SHAPES
    reps = args.reps or (2 if args.quick else 21)
    steps = args.steps or (1 if args.quick else 5)
    out = args.out or os.path.join(
        harness.RESULTS_DIR, "passes_quick.json" if args.quick else "passes.json"
    )
    clock = time.perf_counter
    if args.cpu_time:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        clock = _cpu_seconds
    import vrgd_tf

    rows = measure(shapes, reps, steps, clock=clock)
    doc = {
        "kind": "passes",
        "command": harness.command_line(),
        "environment": harness.environment(),
        "vrgd_tf": os.path.dirname(vrgd_tf.__file__),
        "elements": int(sum(int(np.prod(s)) for s in shapes)),
        "variables": len(shapes),
        "num_groups": NUM_GROUPS,
        "clock": "process CPU time, one thread" if args.cpu_time else "wall, default threads",
        "reps": reps,
        "steps": steps,
        "rows": rows,
    }
    doc["bounds"] = bounds.check(BOUNDS, bound_measurements(rows), enforce=not args.quick)
    harness.write_json(out, doc)
    print("->", out)
    return doc


if __name__ == "__main__":
    sys.exit(bounds.exit_status(main()["bounds"]))
