r"""Element passes of VRGD's GSNR step, against one copy pass and against LAMB's update.

One process, one CPU device, no strategy (one replica): 44 variables with the shapes of
BERT-tiny's trainable variables (Model Garden ``BertEncoder`` 2 x 128 with its masked-LM
head at sequence length 128, N = 4,384,058 elements, the word embedding 3,906,816 of them),
their gradients and the sums of four micro-batch groups' squares held in variables. Three
steps, each a ``tf.function`` (graph mode, then ``jit_compile=True``):

  pass   one read+write pass over all N elements: ``dst.assign(src + 1.0)`` on one flat
         float32 ``[N]`` buffer (memory bandwidth, no per-variable overhead);
  lamb   ``vrgd_tf.Lamb(1e-4, weight_decay_rate=0.01).apply_gradients`` of the gradients;
  vrgd   ``vrgd_tf.VRGDLamb`` with the same arguments, the VRGD defaults (``gamma=0.1``,
         ``beta_3=0.9``) and statistics every step (``statistics_interval=1``; the default is
         100) applying the same gradients as the sum of ``m = 4`` groups
         (``apply_grouped_gradients(..., sq_sums, num_groups=4)``, k = 4);
  vrgd_nostats  the same with ``statistics_interval=0`` (no recording branch);
  vrgd_default  the same with the defaults (``statistics_interval=100``: the recording
         branch is traced and taken on one call in 100);
  floor  the fused floor (issue 39): :func:`floor_step`, the same GSNR math as one minimal
         function per variable (reads ``S1``, ``S2`` and the deficit, one reduction, writes
         the deficit and ``f * S1``), no optimizer;
  cluster_smoothed  ``stage_smoothed`` compiled as an XLA cluster (``jit_compile=True``)
         called from this mode's function: in graph mode, what an XLA cluster around the
         GSNR math would cost (issue 39);
  stage_<s>  the library's GSNR step alone (``vrgd_tf.gsnr``'s stage functions, no
         optimizer), cumulatively up to stage ``s`` of :data:`STAGES` (``sums``, ``factors``,
         ``smoothed``, ``recorded``), and ``stage_library``, ``variance_reduce`` itself; each
         writes its ``f * S1`` into variables, as the floor does.

Timing: every step of both modes is traced and warmed up, then each of ``--reps``
repetitions times all of them once (``--steps`` calls each), in an order rotated per repetition.
Reported per mode, from the medians and from the minima over the repetitions (and, per step,
the median minor page faults a call, ``minor_page_faults``):
``lamb_passes = lamb / pass``, ``vrgd_passes = vrgd / pass`` and ``gsnr_passes =
(vrgd - lamb) / pass``, the GSNR part (issue 19's target: at most 24), the same without the
recording branch (``gsnr_nostats_passes``) and with the defaults (``gsnr_default_passes``,
issue 39's targets: at most 8 under XLA, 10 in graph mode, 0.75 of ``lamb_passes``), ``floor_passes = floor / pass`` and the stage
prefixes' ``stage / pass`` (``stage_passes``). The numbers are of
this machine and its load (2 cores shared with other work): read the ratios, not the times.
At the end the run checks :data:`BOUNDS` (``benchmarks/bounds.py``): PASS/FAIL per mode, exit
status 1 on a failure (``--quick``: informative only).

Allocator (``--malloc``): with glibc's defaults a temporary above the ``mmap`` threshold is
``mmap``ed and zero-filled page by page on every step (XLA's temporary arena of one step is
tens of MB: 8,600-12,900 page faults a step here), and a process settles into one regime or
the other, so an arm's median moves by about 10 passes between processes
(``docs/cost_model.md`` sections 6.3 and 6.4). ``--malloc=heap`` (the default) calls
``mallopt(M_MMAP_MAX, 0)`` and ``mallopt(M_TRIM_THRESHOLD, 2**31 - 1)`` before the
benchmark allocates: every block comes from the heap and is reused, no page faults in the
timed steps, as an accelerator's pooled allocator reuses its buffers. (Section 6.3's
``MALLOC_MMAP_THRESHOLD_=33554432`` still left XLA's arena, above 32 MiB, to ``mmap``.)
``--malloc=default`` leaves glibc as it is. The JSON records which.

Examples:
  python3 benchmarks/passes.py                 # about 5 minutes
  python3 benchmarks/passes.py --cpu_time      # one thread, CPU time: stable under load
  python3 benchmarks/passes.py --quick         # seconds: small shapes, a smoke run
  PYTHONPATH=/tmp/before python3 benchmarks/passes.py --out /tmp/passes_before.json
"""

import argparse
import ctypes
import ctypes.util
import os
import resource
import sys
import time

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
HEAP_TRIM_THRESHOLD = 2**31 - 1


def heap_protocol() -> str:
    """Sets glibc's ``mallopt`` for the heap protocol (module docstring); returns what was
    set, or why nothing was."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD)
    except (OSError, AttributeError, TypeError) as error:
        return f"default (mallopt unavailable: {error})"
    if not ok:
        return "default (mallopt refused)"
    return f"heap (mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD={HEAP_TRIM_THRESHOLD})"


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
    bounds.Bound(
        "gsnr_default_passes",
        8.0,
        "issue 39: the GSNR part of a VRGDLamb step with its defaults at most 8 passes "
        "per element under XLA",
        {"jit_compile": True},
    ),
    bounds.Bound(
        "gsnr_default_passes",
        10.0,
        "issue 39: the GSNR part of a VRGDLamb step with its defaults at most 10 passes "
        "per element in graph mode",
        {"jit_compile": False},
    ),
    bounds.Bound(
        "gsnr_default_over_lamb",
        0.75,
        "issue 39: the GSNR part of a VRGDLamb step with its defaults at most 0.75 of "
        "LAMB's whole update, in both modes",
    ),
)


def bound_measurements(rows):
    """The rows of :func:`measure` as :mod:`bounds` measurements (min-based GSNR passes,
    every step recording and with the defaults, and the latter over LAMB's update)."""
    for row in rows:
        case = {"jit_compile": row["jit_compile"], "stat": "min"}
        m = row["min"]
        yield bounds.Measurement("gsnr_passes", case, m["gsnr_passes"])
        if "gsnr_default_passes" in m:  # rows recorded before issue 39 have none
            yield bounds.Measurement("gsnr_default_passes", case, m["gsnr_default_passes"])
            ratio = m["gsnr_default_passes"] / m["lamb_passes"]
            yield bounds.Measurement("gsnr_default_over_lamb", case, ratio)


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


def _clip(x, low):
    """``min(max(x, low), 1)`` in one kernel (as ``vrgd_tf.gsnr.factors.clip``)."""
    return tf.raw_ops.ClipByValue(t=x, clip_value_min=tf.cast(low, x.dtype), clip_value_max=1.0)


def floor_step(s1s, s2s, deficits, corrections, outputs, k, gamma, beta_3, rtol):
    """The fused floor: the GSNR math of one step (``squares`` of ``k`` samples given, one
    device, ``beta_3 > 0``, a finite step with a GSNR) written as plainly as it goes, per
    variable: read ``S1`` and ``S2`` (variables), ``r = signal / noise`` with the noise
    threshold, one reduction (the count of defined elements and the sum of ``r``), the factor
    ``clip(r / mean(r), gamma, 1)``, the momentum in the deficit form of
    ``vrgd_tf.gsnr.smoothing`` (read and write the deficit and the scalar correction) and one
    write of ``f * S1`` into ``outputs``. No packing, no contributing-samples test, no
    conditional, no statistics: the passes that the math itself needs (about two reads of the
    sums, one read and one write of the deficit, one write of the output).

    Args:
      s1s, s2s, deficits, outputs: float32 variables, one per variable, of its shape.
      corrections: float32 scalar variables, ``c_{t-1}``.
      k: Python int, the samples; gamma, beta_3, rtol: Python floats.
    """
    for v1, v2, d, c, o in zip(s1s, s2s, deficits, corrections, outputs):
        s1, s2 = v1.read_value(), v2.read_value()
        signal = tf.square(s1) * (1.0 / k)
        noise = s2 - signal
        defined = noise > (rtol * k) * s2
        ratio = tf.math.divide_no_nan(signal, tf.where(defined, noise, 0.0))
        num_defined = tf.reduce_sum(tf.cast(defined, tf.float32))
        mean_ratio = tf.math.divide_no_nan(tf.reduce_sum(ratio), num_defined)
        usable = (mean_ratio > 0.0) & tf.math.is_finite(mean_ratio)
        safe = tf.where(usable, mean_ratio, 1.0)
        low = tf.where(usable, tf.constant(gamma, tf.float32), 1.0)
        f = tf.where(defined, _clip(ratio / safe, low), 1.0)
        c_t = beta_3 * c.read_value() + (1.0 - beta_3)
        d_t = beta_3 * d.read_value() + (1.0 - beta_3) * (1.0 - f)
        p_hat = _clip(1.0 - d_t / c_t, gamma)
        d.assign(d_t)
        c.assign(c_t)
        o.assign(p_hat * s1)


def _plain_state(variables, beta_3):
    """A ``VRGDState`` of plain (not replica-local) variables, for one device."""
    from vrgd_tf import gsnr

    state = gsnr.VRGDState(
        lambda kind, i, shape, ref: tf.Variable(tf.zeros(shape), trainable=False), id, beta_3
    )
    state.add_variables(variables)
    return state


#: The library's stages, composed cumulatively from ``vrgd_tf.gsnr.step``'s functions: each
#: prefix ends by writing ``f * S1`` into output variables (``f = 1`` before the factors).
STAGES = ("sums", "factors", "smoothed", "recorded")


def stage_prefix(stage, grads, squares, variables, state, outputs, k, settings):
    """One GSNR step of the library up to and including ``stage`` (of :data:`STAGES`), on one
    device: layout, this replica's samples (with the contributing-samples test), the
    collectives, the sums; then (``factors``) the raw factors and the report; (``smoothed``)
    the momentum, its state read and committed in a ``tf.cond``; (``recorded``) the
    diagnostics in a ``tf.cond``. Writes the step's outputs into ``outputs``. Uses the
    library's private stage functions (measurement only: follows ``variance_reduce``)."""
    from vrgd_tf.gsnr import collectives, halves
    from vrgd_tf.gsnr import layout as layout_lib
    from vrgd_tf.gsnr import samples as samples_lib
    from vrgd_tf.gsnr import step as step_lib

    level = STAGES.index(stage)
    ctx = tf.distribute.get_replica_context()
    layout = layout_lib.build_layout(
        grads,
        variables,
        state,
        num_replicas=1,
        num_groups=k,
        squares_given=True,
        sparse_statistics=settings.sparse_statistics,
        pack_limit=settings.pack_limit,
    )
    plan = halves.plan(layout, settings.split_half_stride)
    local = halves.with_half(plan, samples_lib.local_samples(layout, grads, squares), ctx)
    reduced = collectives.all_reduce_samples(local, ctx, settings.squares_dtype)
    summed = samples_lib.assemble(layout, grads, reduced)
    factors = step_lib._Factors([None] * len(layout.blocks), [1.0] * len(layout.blocks), None)
    if level >= 1:
        raw = step_lib._factors(layout, summed, settings)
        report = step_lib._report(layout, summed, raw, plan, False)
        factors = step_lib._Factors(raw, [f.factor for f in raw], None)
        if level >= 2:
            factors, commit = step_lib._smoothed(layout, state, summed, raw, report, settings)
            factors = step_lib._commit(layout, state, summed, factors, commit, settings)
        if level >= 3:
            again = step_lib._in_branch(layout, state, summed, factors, commit, settings, True)
            rows = step_lib._rows(layout, state, summed, plan, report, settings, again)
            step_lib._record(layout, state, report, True, rows)
    for o, out in zip(outputs, step_lib._outputs(layout, summed, factors)):
        o.assign(out)


def library_step(grads, squares, variables, state, outputs, k, settings, record=True):
    """``vrgd_tf.gsnr.variance_reduce`` on one device, its outputs written into ``outputs``."""
    from vrgd_tf import gsnr

    out = gsnr.variance_reduce(
        grads,
        variables,
        state=state,
        record_statistics=record,
        squares=gsnr.GroupSquares(list(squares), k),
        settings=settings,
    )
    for o, x in zip(outputs, out):
        o.assign(x)


def _steps(shapes, grads, squares, weights, jit_compile):
    """``{name: tf.function}`` of the steps of one mode, on fresh variables."""
    import vrgd_tf
    from vrgd_tf.settings import VRGDSettings

    n = int(sum(int(np.prod(s)) for s in shapes))
    src = tf.Variable(tf.zeros([n]), trainable=False)
    dst = tf.Variable(tf.zeros([n]), trainable=False)
    kwargs = dict(learning_rate=1e-4, weight_decay_rate=0.01)
    # Statistics every step (the default is every 100 steps since issue 39: the
    # ``vrgd_nostats`` arm is then the closer measure of a default step).
    lamb, vrgd = vrgd_tf.Lamb(**kwargs), vrgd_tf.VRGDLamb(statistics_interval=1, **kwargs)
    nostats = vrgd_tf.VRGDLamb(statistics_interval=0, **kwargs)
    default = vrgd_tf.VRGDLamb(**kwargs)
    lamb_w = [tf.Variable(w) for w in weights]
    vrgd_w = [tf.Variable(w) for w in weights]
    nostats_w = [tf.Variable(w) for w in weights]
    default_w = [tf.Variable(w) for w in weights]
    lamb.build(lamb_w)
    vrgd.build(vrgd_w)
    nostats.build(nostats_w)
    default.build(default_w)
    assert vrgd.beta_3 == 0.9 and vrgd.statistics_interval == 1 and vrgd.gamma == 0.1
    settings = VRGDSettings(beta_3=0.9)
    assert settings.gamma == vrgd.gamma
    k = NUM_GROUPS

    def fresh(tensors):
        return [tf.Variable(tf.zeros_like(t), trainable=False) for t in tensors]

    floor_d = fresh(weights)
    floor_c = [tf.Variable(0.0, trainable=False) for _ in weights]
    floor_o = fresh(weights)
    stage_w = [tf.Variable(w) for w in weights]  # only named by the layout (never written)
    stage_states = {s: _plain_state(stage_w, 0.9) for s in STAGES + ("library",)}
    stage_o = {s: fresh(weights) for s in STAGES + ("library",)}

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

    def vr_nostats():
        nostats.apply_grouped_gradients(
            list(zip([g.read_value() for g in grads], nostats_w)),
            [q.read_value() for q in squares],
            num_groups=NUM_GROUPS,
        )

    def vr_default():
        default.apply_grouped_gradients(
            list(zip([g.read_value() for g in grads], default_w)),
            [q.read_value() for q in squares],
            num_groups=NUM_GROUPS,
        )

    def floor():
        floor_step(grads, squares, floor_d, floor_c, floor_o, k, 0.1, 0.9, settings.rtol)

    def prefix_of(stage, key):
        def fn():
            g, q = [x.read_value() for x in grads], [x.read_value() for x in squares]
            o, st = stage_o[key], stage_states[key]
            if stage == "library":
                library_step(g, q, stage_w, st, o, k, settings)
            else:
                stage_prefix(stage, g, q, stage_w, st, o, k, settings)

        return fn

    def prefix(stage):
        return prefix_of(stage, stage)

    fns = {"pass": copy, "lamb": base, "vrgd": vr, "vrgd_nostats": vr_nostats}
    fns.update({"vrgd_default": vr_default, "floor": floor})
    fns.update({f"stage_{s}": prefix(s) for s in STAGES + ("library",)})
    out = {k: tf.function(f, jit_compile=jit_compile) for k, f in fns.items()}
    # The step through the smoothing as an XLA cluster called from this mode's function
    # (issue 39: what a cluster around the GSNR math would cost in graph mode).
    stage_states["cluster"], stage_o["cluster"] = _plain_state(stage_w, 0.9), fresh(weights)
    cluster = tf.function(prefix_of("smoothed", "cluster"), jit_compile=True)
    out["cluster_smoothed"] = tf.function(lambda: cluster(), jit_compile=jit_compile)
    return out, vrgd


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _time(fn, steps, clock, faults=None):
    """Seconds of ``clock`` per call over ``steps`` calls; appends the minor page faults per
    call to ``faults`` (a list) if given."""
    f0, t0 = _minor_faults(), clock()
    for _ in range(steps):
        fn()
    elapsed = (clock() - t0) / steps
    if faults is not None:
        faults.append((_minor_faults() - f0) / steps)
    return elapsed


def measure(shapes, reps, steps, log=print, clock=time.perf_counter):
    """Both modes' steps timed interleaved (one repetition times each once); one row per
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
    faults = {key: [] for key in keys}
    for r in range(reps):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            times[key].append(_time(fns[key], steps, clock, faults[key]))
    rows = []
    for jit in (False, True):
        row = {"jit_compile": jit}
        for stat, fn in (("median", np.median), ("min", np.min)):
            t = {name: float(fn(times[(j, name)])) for j, name in keys if j == jit}
            row[stat] = {
                "ms": {name: v * 1e3 for name, v in t.items()},
                "lamb_passes": t["lamb"] / t["pass"],
                "vrgd_passes": t["vrgd"] / t["pass"],
                "gsnr_passes": (t["vrgd"] - t["lamb"]) / t["pass"],
                "gsnr_nostats_passes": (t["vrgd_nostats"] - t["lamb"]) / t["pass"],
                "gsnr_default_passes": (t["vrgd_default"] - t["lamb"]) / t["pass"],
                "floor_passes": t["floor"] / t["pass"],
                "stage_passes": {s: t[f"stage_{s}"] / t["pass"] for s in STAGES + ("library",)},
                "cluster_smoothed_passes": t["cluster_smoothed"] / t["pass"],
            }
        # Zero-filled fresh pages a call (median): glibc's mmap of large temporaries (--malloc).
        row["minor_page_faults"] = {
            name: float(np.median(faults[(j, name)])) for j, name in keys if j == jit
        }
        stats = optimizers[jit].vrgd_statistics()
        row["mean_factor"] = float(np.mean([s["mean_factor"] for s in stats.values()]))
        med = row["median"]
        log(
            f"jit_compile={jit}: pass {med['ms']['pass']:.2f} ms, LAMB "
            f"{med['lamb_passes']:.1f} passes, VRGD {med['vrgd_passes']:.1f}, GSNR part "
            f"{med['gsnr_passes']:.1f} (min-based {row['min']['gsnr_passes']:.1f}; mean factor "
            f"{row['mean_factor']:.3f}); without statistics {med['gsnr_nostats_passes']:.1f}; "
            f"with the defaults {med['gsnr_default_passes']:.1f}; "
            f"fused floor {med['floor_passes']:.1f}; through the smoothing as an XLA "
            f"cluster {med['cluster_smoothed_passes']:.1f}; library stages (cumulative) "
            + ", ".join(f"{s} {v:.1f}" for s, v in med["stage_passes"].items())
            + "; minor page faults a call: "
            + ", ".join(
                f"{n} {row['minor_page_faults'][n]:.0f}"
                for n in ("pass", "lamb", "vrgd_nostats", "vrgd_default")
            )
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
        "--malloc",
        choices=("heap", "default"),
        default="heap",
        help="heap: glibc mallopt so temporaries come from the heap (steady arms); "
        "default: glibc as it is (module docstring).",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON written (default benchmarks/results/passes.json; passes_quick.json with "
        "--quick).",
    )
    args = parser.parse_args(argv)
    malloc = heap_protocol() if args.malloc == "heap" else "default (glibc as it is)"
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
        "malloc": malloc,
        "malloc_env": {
            k: os.environ[k]
            for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
            if k in os.environ
        },
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
