"""The arms of the round-3 evidence protocol (studies/evidence/PROTOCOL.md) as factor
transforms for the VRGD classes' public ``factor_transforms=`` argument.

A transform is ``fn(factor, context) -> factor`` (``vrgd_tf.gsnr.FactorContext``): ``factor``
is one variable's flat float32 factor ``f`` (after any smoothing), ``context.summed`` the
variable's ``S1`` on the same elements; the step then uses ``f * S1``. Both controls are
pure functions of ``(f, S1, step, variable index, run seed)`` built from stateless ops, so
every replica computes the same factor and the step stays XLA-compilable.

- scalar-VR: ``f`` replaced by one number per variable and step, VR's own update norm ratio
  ``r = ||f * S1|| / ||S1||`` (``r = 1`` where ``||S1|| = 0``): VR's step size per variable,
  the base's direction.
- norm-matched shuffle: ``f`` permuted at random within the variable (a new permutation
  every step, from stateless draws keyed by the run seed, the step and the variable), then
  multiplied by ``||f * S1|| / ||perm(f) * S1||`` (1 where that is 0/0) so the update norm
  is VR's. The rescaled factor may exceed 1.
"""

import tensorflow as tf
from protocol3 import ARMS


def _norm_ratio(num_vec, den_vec):
    """``||num_vec|| / ||den_vec||``, 1 where ``||den_vec|| = 0`` (float32 scalar)."""
    num = tf.reduce_sum(tf.square(num_vec))
    den = tf.reduce_sum(tf.square(den_vec))
    safe = tf.where(den > 0.0, den, tf.ones_like(den))
    return tf.where(den > 0.0, tf.sqrt(num / safe), tf.ones_like(den))


def update_norm_ratio(factor, summed):
    """VR's update norm ratio ``||factor * summed|| / ||summed||`` (1 if ``summed`` is 0)."""
    return _norm_ratio(factor * summed, summed)


def scalar_vr(factor, context):
    """Factor transform of the scalar-VR arm: ``r * ones`` with ``r`` VR's update norm
    ratio for this variable and step."""
    r = update_norm_ratio(factor, context.summed)
    return tf.fill(tf.shape(factor), r)


def permutation(size, seed, step, index):
    """A permutation of ``range(size)`` (int32) from stateless philox draws keyed by
    ``(seed, step * 1009 + index)``: the same on every replica, new every step."""
    key = tf.stack(
        [tf.cast(seed, tf.int64), tf.cast(step, tf.int64) * 1009 + tf.cast(index, tf.int64)]
    )
    return tf.argsort(tf.random.stateless_uniform([size], key, alg="philox"))


def shuffled_norm_matched(seed_var):
    """Factor transform of the norm-matched shuffle arm; ``seed_var`` is a scalar int
    variable holding the run's seed (assigned before each run)."""

    def transform(factor, context):
        step = tf.zeros([], tf.int64) if context.step is None else context.step
        order = permutation(factor.shape[0], seed_var, step, context.index)
        permuted = tf.gather(factor, order)
        s1 = context.summed
        return permuted * _norm_ratio(factor * s1, permuted * s1)

    return transform


def arm_optimizer_args(arm, seed_var):
    """``(side, factor_transforms)`` of an arm: the optimizer side and its transforms."""
    if arm == "base":
        return "base", ()
    if arm == "vr":
        return "vr", ()
    if arm == "scalar_vr":
        return "vr", (scalar_vr,)
    if arm == "shuffled_nm":
        return "vr", (shuffled_norm_matched(seed_var),)
    raise ValueError(f"unknown arm {arm!r}; one of {ARMS}.")
