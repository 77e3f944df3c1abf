"""Benchmark-only optimizer variants that split VRGD's cost into its parts.

The GSNR math is never re-implemented here: the VR variants are the library's classes.
Only ``sq`` (and ``base_allreduce``) override the base optimizer's cross-replica aggregation
hook (Keras 3: ``TFOptimizer._all_reduce_sum_gradients``; tf_keras:
``OptimizerV2._aggregate_gradients``), the place where the library's VR classes put the
GSNR step.

Variants (``make_keras_variant(name, ...)`` / ``make_tf_keras_variant``):
  base            the base optimizer itself (one all-reduce of the gradients);
  base_allreduce  (tf_keras only) the base with its gradients summed by
                  ``ReplicaContext.all_reduce`` in the replica context, as VRGD does, instead
                  of ``OptimizerV2``'s merge_call path: separates the aggregation path;
  sq              base + the squares, all-reduced as VRGD sends them (the library's
                  collectives, ``vrgd_tf.gsnr.collectives.all_reduce_samples``: the float32
                  gradients, then their squares with the one-scalar count, one tensor per
                  variable in each call), the update from the plain sum;
  vr_nostats      the library's VR class with ``statistics_interval=0`` (no diagnostics):
                  VR minus ``sq`` is the element-wise GSNR math and the factor state;
  vr              the library's VR class with its defaults but diagnostics every step
                  (``statistics_interval=1``; the default records every 100 steps): VR
                  minus ``vr_nostats`` is the diagnostics;
  vr_default      the library's VR class with its defaults (``statistics_interval=100``:
                  the recording branch is in the step and taken on one step in 100): what
                  a user who changes nothing pays (issue 39's targets);
  vr_unclustered  ``vr_default`` with ``xla_cluster="never"``: the GSNR math op by op in
                  graph mode (``vr_default`` minus it is what the XLA cluster saves);
  vr_unpacked     ``vr`` with the aggregator's ``pack_limit=0``: every gradient its own
                  tensor and element-wise ops (VR minus ``vr_unpacked`` is what packing the
                  small variables saves; the values are the same bit for bit);
  vr_dense        ``vr`` with the statistics of ``tf.IndexedSlices`` gradients taken on their
                  dense form (the aggregator's ``sparse_statistics="dense"``): VR minus
                  ``vr_dense`` is what the exact sparse statistics save;
  vr_beta3_0, vr_nostats_beta3_0
                  ``vr`` and ``vr_nostats`` with ``beta_3=0``: no factor momentum, so no
                  per-element state (what the factor state costs in memory);
  sq_bf16, vr_bf16, vr_nostats_bf16
                  the same with ``squares_dtype="bfloat16"``: the squares all-reduced in
                  bfloat16 (6 instead of 8 bytes per parameter).
"""

import tensorflow as tf

from vrgd_tf.gsnr import collectives, samples, sparse

VARIANTS = ("base", "sq", "vr_nostats", "vr")
VR_VARIANTS = {
    "vr": {"statistics_interval": 1},
    "vr_nostats": {"statistics_interval": 0},
    "vr_default": {},
    "vr_unclustered": {"xla_cluster": "never"},
    "vr_bf16": {"statistics_interval": 1, "squares_dtype": "bfloat16"},
    "vr_nostats_bf16": {"statistics_interval": 0, "squares_dtype": "bfloat16"},
    "vr_beta3_0": {"statistics_interval": 1, "beta_3": 0.0},
    "vr_nostats_beta3_0": {"statistics_interval": 0, "beta_3": 0.0},
}


def _sum_as_vrgd(ctx, grads, squares_dtype="float32"):
    """The library's collectives of one step (the gradients, then their squares with this
    replica's count, as the GSNR step sends them for dense gradients; a ``tf.IndexedSlices``
    gradient also as the strategy's sparse SUM, as on the step's dense statistics path);
    returns the plain sums of the gradients, in their dtypes."""
    dense = [sparse.dense_gradient(g) for g in grads]
    flat = tuple(tf.reshape(tf.cast(d, tf.float32), [-1]) for d in dense)
    local = samples.Local(
        gradients=flat,
        squares=tuple(tf.square(x) for x in flat),
        sparse=tuple(g for g in grads if isinstance(g, tf.IndexedSlices)),
        wide=(),
        rows=(),
        count=tf.constant(1.0),
    )
    reduced = collectives.all_reduce_samples(local, ctx, squares_dtype)
    return [tf.cast(tf.reshape(s, d.shape), d.dtype) for s, d in zip(reduced.gradients, dense)]


def _reduce(name, ctx, grads):
    if name == "sq":
        return _sum_as_vrgd(ctx, grads)
    if name == "sq_bf16":
        return _sum_as_vrgd(ctx, grads, "bfloat16")
    if name == "base_allreduce":
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [sparse.dense_gradient(g) for g in grads])
    raise ValueError(f"unknown variant {name!r}")


def _dense_statistics(vr_cls):
    """``vr_cls`` whose GSNR step takes the dense statistics for sparse gradients (the
    setting ``sparse_statistics="dense"``)."""

    class DenseStatistics(vr_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, sparse_statistics="dense", **kwargs)

    DenseStatistics.__name__ = f"{vr_cls.__name__}_dense"
    return DenseStatistics


def _unpacked(vr_cls):
    """``vr_cls`` whose GSNR step packs no variables (the setting ``pack_limit=0``): every
    gradient its own tensor and its own element-wise ops."""

    class Unpacked(vr_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, pack_limit=0, **kwargs)

    Unpacked.__name__ = f"{vr_cls.__name__}_unpacked"
    return Unpacked


def make_keras_variant(name, base_cls, vr_cls, gamma=0.1):
    """``(class, extra kwargs)`` of Keras 3 variant ``name`` of the pair (base_cls, vr_cls)."""
    if name == "base":
        return base_cls, {}
    if name in VR_VARIANTS:
        return vr_cls, dict(VR_VARIANTS[name], gamma=gamma)
    if name == "vr_dense":
        return _dense_statistics(vr_cls), {"gamma": gamma}
    if name == "vr_unpacked":
        return _unpacked(vr_cls), {"gamma": gamma}

    class Variant(base_cls):
        def _all_reduce_sum_gradients(self, grads_and_vars):
            ctx = tf.distribute.get_replica_context()
            pairs = list(grads_and_vars)
            if ctx is None or any(g is None for g, _ in pairs):
                return super()._all_reduce_sum_gradients(pairs)
            out = _reduce(name, ctx, [g for g, _ in pairs])
            return [(o, v) for o, (_, v) in zip(out, pairs)]

    Variant.__name__ = f"{base_cls.__name__}_{name}"
    return Variant, {}


def make_tf_keras_variant(name, base_cls, vr_cls, gamma=0.1):
    """``(class, extra kwargs)`` of tf_keras (OptimizerV2) variant ``name``."""
    if name == "base":
        return base_cls, {}
    if name in VR_VARIANTS:
        return vr_cls, dict(VR_VARIANTS[name], gamma=gamma)
    if name == "vr_unpacked":
        return _unpacked(vr_cls), {"gamma": gamma}

    class Variant(base_cls):
        def _aggregate_gradients(self, grads_and_vars):
            ctx = tf.distribute.get_replica_context()
            pairs = [(g, v) for g, v in grads_and_vars if g is not None]
            out = _reduce(name, ctx, [g for g, _ in pairs])
            return [(o, v) for o, (_, v) in zip(out, pairs)]

    Variant.__name__ = f"{base_cls.__name__}_{name}"
    return Variant, {}
