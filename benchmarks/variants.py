"""Benchmark-only optimizer variants that split VRGD's cost into its parts.

Nothing here changes the library: each variant subclasses a *base* optimizer and overrides
the cross-replica aggregation hook (Keras 3: ``TFOptimizer._all_reduce_sum_gradients``;
tf_keras: ``OptimizerV2._aggregate_gradients``), which is where the library's VR classes put
the GSNR step. The re-implementations below are self-contained (they use only
``gsnr.NOISE_RTOL`` and ``gsnr.dense_gradient`` from the library), so they stay the same
while the library changes; ``overhead.py`` checks that they reach the same weights as the
library's VR class.

Variants (``make_keras_variant(name, ...)``):
  base         the base optimizer itself (one all-reduce of the gradients);
  sq           base + the squares: one all-reduce of ``[x, x*x]`` (float32) in one packed
               buffer, as VRGD sends it, the squares' sums kept alive by a control
               dependency, the update from the plain sum. VR minus this is the element-wise
               GSNR math, the factor state and the diagnostics;
  vr           the library's VR class, whatever its current implementation;
  vr_unpacked  a per-variable design (the library's first one): one all-reduce of the list
               of 2n tensors, the GSNR math, factor momentum, diagnostics and finite test
               per variable;
  vr_fix       the library's packed design (one flat buffer) with the same outputs,
               diagnostics and finite test, but with the segment ids built in NumPy at trace
               time (a graph constant) instead of ``tf.repeat`` at run time, sorted
               ``segment_sum`` instead of ``unsorted_segment_sum``, and one scalar factor-
               momentum correction (it is the same for every variable) instead of a
               ``tf.repeat`` of per-variable ones: a proposal for the library;
  vr_nodiag    ``vr_fix`` without the per-step diagnostics and without the all-finite test.
"""

import numpy as np
import tensorflow as tf

from vrgd_tf import gsnr

VARIANTS = ("base", "sq", "vr", "vr_fix", "vr_nodiag", "vr_unpacked")


# --------------------------------------------------------------------------------------------
# Framework-independent reductions (replica context)
# --------------------------------------------------------------------------------------------

def _sum_with_squares(ctx, grads):
    """(a) only: all-reduce the packed [x, x*x]; returns the plain sums of x."""
    dense = [gsnr.dense_gradient(g) for g in grads]
    sizes = [int(np.prod(g.shape)) for g in dense]
    flat = tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in dense], 0)
    sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.concat([flat, tf.square(flat)], 0))
    total = sum(sizes)
    with tf.control_dependencies([sums]):
        s1 = tf.identity(sums[:total])
    return [tf.cast(tf.reshape(p, g.shape), g.dtype) for p, g in zip(tf.split(s1, sizes), dense)]


def _factor_one(s1, s2, k, gamma):
    """Per-variable GSNR factor and [mean_gsnr, frac_at_gamma, frac_at_one] (eqs. 7-9)."""
    mean = s1 / k
    mean_sq = s2 / k
    variance = mean_sq - tf.square(mean)
    finite = tf.math.is_finite(mean) & tf.math.is_finite(mean_sq)
    defined = finite & (variance > (gsnr.NOISE_RTOL * k) * mean_sq)
    safe = tf.where(defined, variance, tf.ones_like(variance))
    ratio = tf.where(defined, tf.square(mean) / safe, tf.zeros_like(variance))
    mean_ratio = tf.math.divide_no_nan(tf.reduce_sum(ratio),
                                       tf.reduce_sum(tf.cast(defined, tf.float32)))
    usable = (mean_ratio > 0.0) & tf.math.is_finite(mean_ratio)
    normalised = ratio / tf.where(usable, mean_ratio, 1.0)
    use = defined & usable
    factor = tf.where(use, tf.clip_by_value(normalised, gamma, 1.0), tf.ones_like(normalised))
    size = tf.cast(tf.size(factor), tf.float32)
    at_gamma = use & (normalised <= gamma) if gamma < 1.0 else tf.zeros_like(use)
    stats = tf.stack([mean_ratio,
                      tf.reduce_sum(tf.cast(at_gamma, tf.float32)) / size,
                      tf.reduce_sum(tf.cast(factor >= 1.0, tf.float32)) / size])
    return factor, stats


def _smooth(factor, deficit, correction, beta_3, gamma):
    new_deficit = beta_3 * deficit + (1.0 - beta_3) * (1.0 - factor)
    new_correction = beta_3 * correction + (1.0 - beta_3)
    return (tf.clip_by_value(1.0 - new_deficit / new_correction, gamma, 1.0), new_deficit,
            new_correction)


def _unpacked_reduce(ctx, grads, state, gamma, beta_3):
    """Per-variable design: list all-reduce, math, state and diagnostics per variable."""
    k = float(ctx.num_replicas_in_sync)
    dense = [gsnr.dense_gradient(g) for g in grads]
    x32 = [tf.cast(g, tf.float32) for g in dense]
    sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM, x32 + [tf.square(x) for x in x32])
    n = len(x32)
    keep = tf.logical_not(tf.reduce_all(tf.stack(
        [tf.reduce_all(tf.math.is_finite(s)) for s in sums[:n]])))
    out = []
    for i, g in enumerate(dense):
        factor, stats = _factor_one(sums[i], sums[n + i], k, gamma)
        if beta_3 > 0.0:
            d_old = tf.convert_to_tensor(state["deficit"][i])
            c_old = tf.convert_to_tensor(state["correction"][i])
            factor, d_new, c_new = _smooth(factor, d_old, c_old, beta_3, gamma)
            state["deficit"][i].assign(tf.where(keep, d_old, d_new))
            state["correction"][i].assign(tf.where(keep, c_old, c_new))
        st_old = tf.convert_to_tensor(state["stats"][i])
        state["stats"][i].assign(tf.where(keep, st_old, stats))
        out.append(tf.cast(factor * sums[i], g.dtype))
    return out


def _packed_reduce(ctx, grads, state, gamma, beta_3, diagnostics=True):
    """Packed design with trace-time segment ids (vr_fix; vr_nodiag without diagnostics)."""
    k = float(ctx.num_replicas_in_sync)
    dense = [gsnr.dense_gradient(g) for g in grads]
    sizes = [int(np.prod(g.shape)) for g in dense]
    n, total = len(sizes), sum(sizes)
    flat = tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in dense], 0)
    sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.concat([flat, tf.square(flat)], 0))
    s1, s2 = sums[:total], sums[total:]
    seg = tf.constant(np.repeat(np.arange(n, dtype=np.int32), sizes))  # trace-time constant
    size_f = tf.constant(np.maximum(np.asarray(sizes, np.float32), 1.0))
    mean = s1 / k
    mean_sq = s2 / k
    variance = mean_sq - tf.square(mean)
    finite = tf.math.is_finite(mean) & tf.math.is_finite(mean_sq)
    defined = finite & (variance > (gsnr.NOISE_RTOL * k) * mean_sq)
    ratio = tf.where(defined, tf.square(mean) / tf.where(defined, variance, 1.0), 0.0)
    mean_ratio = tf.math.divide_no_nan(tf.math.segment_sum(ratio, seg),
                                       tf.math.segment_sum(tf.cast(defined, tf.float32), seg))
    usable = (mean_ratio > 0.0) & tf.math.is_finite(mean_ratio)
    normalised = ratio / tf.gather(tf.where(usable, mean_ratio, 1.0), seg)
    use = defined & tf.gather(usable, seg)
    factor = tf.where(use, tf.clip_by_value(normalised, gamma, 1.0), 1.0)
    keep = tf.logical_not(tf.reduce_all(tf.math.is_finite(s1))) if diagnostics else None
    if diagnostics:
        at_gamma = (tf.cast(use & (normalised <= gamma), tf.float32) if gamma < 1.0
                    else tf.zeros_like(factor))
        stats = tf.stack([mean_ratio, tf.math.segment_sum(at_gamma, seg) / size_f,
                          tf.math.segment_sum(tf.cast(factor >= 1.0, tf.float32), seg) / size_f],
                         axis=1)
        old = tf.convert_to_tensor(state["stats"])
        state["stats"].assign(tf.where(keep, old, stats))
    if beta_3 > 0.0:
        d_old = tf.convert_to_tensor(state["flat_deficit"])
        c_old = tf.convert_to_tensor(state["flat_correction"])
        factor, d_new, c_new = _smooth(factor, d_old, c_old, beta_3, gamma)
        if diagnostics:
            d_new, c_new = tf.where(keep, d_old, d_new), tf.where(keep, c_old, c_new)
        state["flat_deficit"].assign(d_new)
        state["flat_correction"].assign(c_new)
    u = factor * s1
    return [tf.cast(tf.reshape(p, g.shape), g.dtype) for p, g in zip(tf.split(u, sizes), dense)]


def _make_state(name, variables, make, beta_3):
    """The benchmark variants' replica-local state; ``make(kind, shape)`` creates a variable."""
    state = {}
    if name == "vr_unpacked":
        state["stats"] = [make(f"stats_{i}", (3,)) for i in range(len(variables))]
        if beta_3 > 0:
            state["deficit"] = [make(f"deficit_{i}", tuple(v.shape))
                                for i, v in enumerate(variables)]
            state["correction"] = [make(f"correction_{i}", ()) for i in range(len(variables))]
    elif name in ("vr_fix", "vr_nodiag"):
        if name == "vr_fix":
            state["stats"] = make("stats", (len(variables), 3))
        if beta_3 > 0:
            total = int(sum(np.prod(v.shape) for v in variables))
            state["flat_deficit"] = make("flat_deficit", (total,))
            state["flat_correction"] = make("flat_correction", ())
    return state


def _reduce(name, ctx, grads, state, gamma, beta_3):
    if name == "sq":
        return _sum_with_squares(ctx, grads)
    if name == "base_allreduce":
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                              [gsnr.dense_gradient(g) for g in grads])
    if name == "vr_unpacked":
        return _unpacked_reduce(ctx, grads, state, gamma, beta_3)
    if name == "vr_fix":
        return _packed_reduce(ctx, grads, state, gamma, beta_3, diagnostics=True)
    if name == "vr_nodiag":
        return _packed_reduce(ctx, grads, state, gamma, beta_3, diagnostics=False)
    raise ValueError(f"unknown variant {name!r}")


# --------------------------------------------------------------------------------------------
# Keras 3 classes
# --------------------------------------------------------------------------------------------

def _keras_var_maker(opt):
    import keras
    from keras.src import backend

    def make(kind, shape):
        with backend.name_scope(opt.name, caller=opt):
            var = backend.Variable(
                initializer=keras.initializers.Zeros(), shape=tuple(shape), dtype="float32",
                trainable=False, synchronization="on_read",
                aggregation="only_first_replica", name=f"bench_{kind}")
        opt._track_variable(var)
        return var
    return make


def make_keras_variant(name, base_cls, vr_cls, gamma=0.1, beta_3=None):
    """A Keras 3 optimizer class for variant ``name`` of the pair (base_cls, vr_cls)."""
    beta_3 = vr_cls._vrgd_default_beta_3 if beta_3 is None else beta_3
    if name == "base":
        return base_cls, {}
    if name == "vr":
        return vr_cls, {"gamma": gamma}

    class Variant(base_cls):
        def build(self, variables):
            if self.built:
                return
            super().build(variables)
            self._bench_state = _make_state(name, variables, _keras_var_maker(self), beta_3)

        def _all_reduce_sum_gradients(self, grads_and_vars):
            ctx = tf.distribute.get_replica_context()
            pairs = list(grads_and_vars)
            if ctx is None or any(g is None for g, _ in pairs):
                return super()._all_reduce_sum_gradients(pairs)
            out = _reduce(name, ctx, [g for g, _ in pairs], self._bench_state, gamma, beta_3)
            return [(o, v) for o, (_, v) in zip(out, pairs)]

    Variant.__name__ = f"{base_cls.__name__}_{name}"
    return Variant, {}


# --------------------------------------------------------------------------------------------
# tf_keras (OptimizerV2) classes
# --------------------------------------------------------------------------------------------

def make_tf_keras_variant(name, base_cls, vr_cls, gamma=0.1, beta_3=None):
    """A tf_keras OptimizerV2 class for variant ``name``.

    Besides the variants above, ``base_allreduce``: the base with its gradients summed by
    ``ReplicaContext.all_reduce`` in the replica context (the call VRGD makes) instead of
    ``OptimizerV2``'s default aggregation (``merge_call`` + ``batch_reduce_to``), to separate
    the effect of the aggregation path from that of the squares.
    """
    beta_3 = vr_cls._vrgd_default_beta_3 if beta_3 is None else beta_3
    if name == "base":
        return base_cls, {}
    if name == "vr":
        return vr_cls, {"gamma": gamma}

    class Variant(base_cls):
        def _create_slots(self, var_list):
            super()._create_slots(var_list)
            if getattr(self, "_bench_state", None) is not None:
                return
            strategy = tf.distribute.get_strategy()

            def make(kind, shape):
                with strategy.extended.colocate_vars_with(var_list[0]):
                    var = self.add_weight(
                        name=f"bench_{kind}", shape=shape, dtype=tf.float32,
                        initializer="zeros", trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                self._weights.append(var)  # listed by variables(), as the library does
                return var
            self._bench_state = _make_state(name, var_list, make, beta_3)

        def _aggregate_gradients(self, grads_and_vars):
            ctx = tf.distribute.get_replica_context()
            pairs = [(g, v) for g, v in grads_and_vars if g is not None]
            out = _reduce(name, ctx, [g for g, _ in pairs], getattr(self, "_bench_state", {}),
                          gamma, beta_3)
            return [(o, v) for o, (_, v) in zip(out, pairs)]

    Variant.__name__ = f"{base_cls.__name__}_{name}"
    return Variant, {}
