"""Step time of the cost benchmarks: a :class:`StepTimer` per variant (a model, its optimizer
and a compiled multi-step function), :func:`time_variants` timing them interleaved (rotating
order, ratios to ``base`` within each repetition) with a check that variants of the same
update end with the same weights, and :func:`summarize` / :func:`state_bytes` for the
records. ``overhead.py``, ``groups.py``, ``loopback.py`` and ``split_half_cost.py`` use it.
Importing it runs no TensorFlow op."""

import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf


def summarize(values):
    """``{"min", "median", "max", "n"}`` of a list of numbers."""
    v = np.asarray(values, np.float64)
    return {
        "min": float(v.min()),
        "median": float(np.median(v)),
        "max": float(v.max()),
        "n": int(v.size),
    }


def state_bytes(opt, model):
    """Exact bytes of optimizer state and of the model, summed over replica copies."""
    variables = opt.variables if not callable(getattr(opt, "variables", None)) else opt.variables()

    def total(vs):
        out = 0
        for v in vs:
            tv = getattr(v, "value", v) if not isinstance(v, tf.Variable) else v
            copies = len(tv.values) if isinstance(tv, tf.distribute.DistributedValues) else 1
            size = int(np.prod(v.shape)) if len(v.shape) else 1
            out += copies * size * tf.as_dtype(v.dtype).size
        return out

    return {
        "optimizer_state_bytes": total(variables),
        "model_bytes": total(model.trainable_variables),
    }


class StepTimer:
    """A model, its optimizer and ``run(n)``, a ``tf.function`` running ``n`` train steps
    (``strategy.run(replica_step)`` in a ``tf.range`` loop). Subclasses build ``model`` and
    ``opt`` and call :meth:`compile_steps` with their replica step."""

    def compile_steps(self, replica_step):
        strategy = self.strategy

        @tf.function
        def run(n):
            for _ in tf.range(n):
                strategy.run(replica_step)
            return n

        self.run = run

    def graph_ops(self):
        """Graph nodes of the traced multi-step function (loop body = one step, all replicas
        unrolled, plus the few loop nodes): a proxy for the per-step fixed cost."""
        gdef = self.run.get_concrete_function(tf.constant(1)).graph.as_graph_def()
        return len(gdef.node) + sum(len(f.node_def) for f in gdef.library.function)

    def time(self, steps):
        """Seconds per step of one call running ``steps`` steps."""
        t0 = time.perf_counter()
        self.run(tf.constant(steps))
        return (time.perf_counter() - t0) / steps

    def weights(self):
        return [w.copy() for w in self.model.get_weights()]

    def state_bytes(self):
        return state_bytes(self.opt, self.model)


#: Default weights check of :func:`time_variants`: variants that must end with the weights
#: of ``base`` (the same update), the others are compared with ``vr``.
_SAME_AS_BASE = ("base", "sq", "sq_bf16", "base_allreduce")


class _Built(NamedTuple):
    """The variants built by :func:`_build`: their timers, optimizer-state bytes, graph ops
    per step and seconds to build and run the first call, by name."""

    timers: dict
    state_bytes: dict
    graph_ops: dict
    build_s: dict


def _build(make_timers, variant_names, steps, log):
    """Builds, traces and warms up every variant (``steps`` steps)."""
    built = _Built({}, {}, {}, {})
    for v in variant_names:
        t0 = time.time()
        timer = built.timers[v] = make_timers(v)
        timer.time(1)  # trace
        built.build_s[v] = round(time.time() - t0, 2)
        timer.time(steps)  # warm-up
        try:
            built.state_bytes[v] = timer.state_bytes()
        except Exception as e:  # pragma: no cover
            built.state_bytes[v] = None
            log(f"state bytes failed for {v}: {e}")
        try:
            built.graph_ops[v] = timer.graph_ops()
        except Exception as e:  # pragma: no cover - op count is informative only
            built.graph_ops[v] = None
            log(f"op count failed for {v}: {e}")
        log(f"  built {v} ({time.time() - t0:.1f}s, {built.graph_ops[v]} graph ops/step)")
    return built


def _timed_reps(timers, variant_names, steps, reps, log):
    """``{variant: [seconds per step, one per repetition]}``: each repetition times every
    variant once, in an order rotated by one per repetition."""
    times = {v: [] for v in variant_names}
    for r in range(reps):
        order = variant_names[r % len(variant_names) :] + variant_names[: r % len(variant_names)]
        for v in order:
            times[v].append(timers[v].time(steps))
        log(
            "  rep %d: %s"
            % (r, ", ".join(f"{v}={times[v][-1] * 1e3:.1f}ms" for v in variant_names))
        )
    return times


def _weights_check(timers, variant_names, checks):
    """``{variant: {"vs", "max_abs_diff_rel"}}``: the final weights of each variant against
    those of the variant ``checks`` names for it (max |difference| / max |weight|)."""
    ref = {}
    diffs = {}
    for v in variant_names:
        target = checks.get(v)
        if target not in timers:
            continue
        if target not in ref:
            ref[target] = timers[target].weights()
        w = timers[v].weights()
        num = max(float(np.max(np.abs(a - b))) for a, b in zip(w, ref[target]))
        den = max(float(np.max(np.abs(b))) for b in ref[target])
        diffs[v] = {"vs": target, "max_abs_diff_rel": num / max(den, 1e-30)}
    return diffs


def _parts_of_base_median(times):
    """VR's extra step time split into parts, each a fraction of the base's median: the
    aggregation path, (a) the all-reduce of the squares, (b) the GSNR math and state, (c)
    the diagnostics every step (those whose variants were timed)."""
    med = {v: float(np.median(t)) for v, t in times.items()}
    base_med = med["base"]
    parts = {}
    if "base_allreduce" in med:
        parts["aggregation_path"] = (med["base_allreduce"] - med["base"]) / base_med
    if "sq" in med:
        sq_ref = med.get("base_allreduce", med["base"])
        parts["a_allreduce_squares"] = (med["sq"] - sq_ref) / base_med
        if "vr_nostats" in med:
            parts["b_gsnr_math_and_state"] = (med["vr_nostats"] - med["sq"]) / base_med
    if "vr_nostats" in med and "vr" in med:
        parts["c_diagnostics_every_step"] = (med["vr"] - med["vr_nostats"]) / base_med
    return parts


def time_variants(make_timers, variant_names, steps, reps, log, checks=None, weights_out=None):
    """Interleaved timing; returns per-variant times and per-rep ratios to ``base``.

    Every variant is built (``make_timers(name)``, a :class:`StepTimer`), traced and warmed
    up; then each of ``reps`` repetitions times every variant once (``steps`` steps), in an
    order rotated by one per repetition, and the ratio variant/base is taken within the
    repetition. ``checks`` maps a variant to the variant whose final weights it must match
    (all ran the same steps from the same weights on the same batch); by default
    base/sq/base_allreduce are compared with base and the rest with vr. A dict
    ``weights_out`` receives every variant's final weights.
    """
    built = _build(make_timers, variant_names, steps, log)
    times = _timed_reps(built.timers, variant_names, steps, reps, log)
    ratios = {v: [t / b for t, b in zip(times[v], times["base"])] for v in variant_names}
    # Equivalence: all variants did the same number of steps from the same weights on the
    # same batch, so base~sq~base_allreduce and vr~vr_nostats up to float summation order.
    if checks is None:
        checks = {v: "base" if v in _SAME_AS_BASE else "vr" for v in variant_names}
    out = {
        "step_ms": {v: summarize([t * 1e3 for t in times[v]]) for v in variant_names},
        "ratio": {v: summarize(ratios[v]) for v in variant_names},
        # Robust to load spikes: the fastest repetition of each variant.
        "ratio_of_min": {v: float(np.min(times[v]) / np.min(times["base"])) for v in variant_names},
        "raw_step_s": times,
        "graph_ops": built.graph_ops,
        "weights_check": _weights_check(built.timers, variant_names, checks),
        "state_bytes": built.state_bytes,
        # Seconds to build the variant and run its first call (tracing, graph optimisation).
        "build_s": built.build_s,
        "parts_of_base_median": _parts_of_base_median(times),
    }
    if weights_out is not None:
        weights_out.update({v: built.timers[v].weights() for v in variant_names})
    return out
