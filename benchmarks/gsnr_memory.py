r"""How many ``[N]`` tensors VRGD's step holds at its peak, without XLA, by part.

One process per configuration (peak RSS, ``VmHWM``, cannot be reset): BERT-tiny's variable
sizes (N = 4,384,058 in 44 variables, the word embedding 3,906,816 of them), one replica with
two micro-batch groups (k = 2, so :func:`vrgd_tf.gsnr.variance_reduce` runs its whole path
with no collective in the way), the gradients and sums of squares held in variables. The
step runs three times; reported: (peak RSS - RSS before the first step) / (4 N bytes), for
``beta_3`` in {0, 0.9} with and without the diagnostics, with TensorFlow's default inter-op
parallelism and with one inter-op thread (ops one at a time: the floor of the graph as
written). The 8-replica BERT-tiny measurement is ``overhead.py``'s (docs/results.md). At the
end the run checks :data:`BOUNDS` (``benchmarks/bounds.py``) on the one-thread rows: PASS/FAIL
per configuration, exit status 1 on a failure.

Example:
  python3 benchmarks/gsnr_memory.py            # about a minute
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's vrgd_tf, installed or not

import bounds  # noqa: E402
import harness  # noqa: E402
import peak_memory  # noqa: E402

BERT_TINY_SIZES = [3_906_816] + [11_097] * 42 + [4_384_058 - 3_906_816 - 42 * 11_097]
CONFIGS = [(b3, stats, inter) for inter in (0, 1) for b3 in (0.0, 0.9) for stats in (0, 1)]

#: Regression bounds: with one inter-op thread (the default parallelism varies by 1 to 1.5
#: tensors between runs), no more [N] tensors at the peak than the code of 97b38ac held, before
#: the diagnostics and the factor momentum were changed to hold fewer (its rows are "before"
#: in the committed results/gsnr_memory.json; docs/cost_model.md, memory per replica).
BOUNDS = tuple(
    bounds.Bound(
        "peak_tensors",
        limit,
        "the count before the diagnostics and the factor momentum held fewer [N] tensors",
        {"beta_3": beta_3, "diagnostics": diagnostics, "inter_op_threads": 1},
    )
    for (beta_3, diagnostics), limit in {
        (0.0, False): 5.9,
        (0.0, True): 8.6,
        (0.9, False): 9.1,
        (0.9, True): 13.0,
    }.items()
)


def bound_measurements(rows):
    """The rows as :mod:`bounds` measurements."""
    for row in rows:
        case = {k: row[k] for k in ("beta_3", "diagnostics", "inter_op_threads")}
        yield bounds.Measurement("peak_tensors", case, row["tensors"])


def child(beta_3, stats, inter):
    """One configuration; prints the number of [N] tensors at the peak."""
    import tensorflow as tf

    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    from vrgd_tf import gsnr

    sizes = BERT_TINY_SIZES
    n = sum(sizes)
    rng = tf.random.Generator.from_seed(0)
    variables = [tf.Variable(tf.zeros([s])) for s in sizes]
    grads = [tf.Variable(rng.normal([s])) for s in sizes]
    squares = [tf.Variable(tf.square(g) * 0.6 + 0.1) for g in grads]  # two groups' worth

    def make_variable(kind, index, shape, ref):
        shape = ref.shape if kind == "deficit" else ([] if kind == "correction" else shape)
        return tf.Variable(tf.zeros(shape), trainable=False)

    state = gsnr.VRGDState(make_variable, lambda v: v.ref(), beta_3)
    state.add_variables(variables)

    @tf.function
    def step():
        out = gsnr.variance_reduce(
            [g.read_value() for g in grads],
            variables,
            settings=gsnr.VRGDSettings(beta_3=beta_3),
            state=state,
            record_statistics=bool(stats),
            squares=gsnr.GroupSquares([q.read_value() for q in squares], 2),
        )
        return tf.add_n([tf.reduce_sum(o) for o in out])

    step.get_concrete_function()
    before = peak_memory.rss_kb()
    for _ in range(3):
        step()
    print(json.dumps({"tensors": (peak_memory.peak_kb() - before) * 1024 / (4 * n), "n": n}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        default=os.path.join(harness.RESULTS_DIR, "gsnr_memory.json"),
        help="JSON written with one row per configuration (default: %(default)s).",
    )
    parser.add_argument("--child", nargs=3, type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    rows = []
    for beta_3, stats, inter in CONFIGS:
        cmd = [sys.executable, __file__, "--child", str(beta_3), str(stats), str(inter)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        row = {"beta_3": beta_3, "diagnostics": bool(stats), "inter_op_threads": inter or None}
        row.update(res)
        rows.append(row)
        print(row, flush=True)
    doc = {
        "kind": "gsnr_memory",
        "command": harness.command_line(),
        "environment": harness.environment(),
        "rows": rows,
    }
    doc["bounds"] = bounds.check(BOUNDS, bound_measurements(rows), enforce=True)
    harness.write_json(args.out, doc)
    print("->", args.out)
    return bounds.exit_status(doc["bounds"])


if __name__ == "__main__":
    sys.exit(main())
