"""The VRGD factor of one variable from its sums over the samples (eqs. 7 to 9), and the
public ``factor_transforms`` slot applied to it. Pure functions, no collective, no state.

In units of ``k``: ``signal = S1**2 / k = k m**2`` and ``noise = S2 - S1**2 / k = k s2``, so
``r = signal / noise``, and ``s2 > rtol * k * mean(x**2)`` is ``noise > rtol * k * S2``
(``rtol``: :data:`~vrgd_tf.gsnr.NOISE_RTOL`, or :data:`~vrgd_tf.gsnr.NOISE_RTOL_BFLOAT16` for
squares all-reduced in bfloat16). The comparison is False for NaN and for an overflowed square
or ``S2`` (noise -Inf, NaN or +Inf > +Inf), so it is also the finiteness test; where it is
False the ratio divides by 1 instead, so no Inf or NaN is ever formed.
"""

from typing import NamedTuple

import tensorflow as tf

from vrgd_tf import naming
from vrgd_tf.gsnr import packing, reductions
from vrgd_tf.gsnr.options import transform_label

__all__ = ["Factor", "FactorContext", "factor", "reapplied", "clip", "transform"]


class Factor(NamedTuple):
    """One variable's (or one packed block's) raw factor and the per-variable values the
    diagnostics reuse.

    Attributes:
      factor: float32 ``[size]``, in ``[gamma, 1]``; exactly 1 where the GSNR is undefined
        and everywhere in a variable with no usable mean.
      mean_ratio: float32 scalar (``[v]`` for a block of ``v`` packed variables),
        ``mean(r)`` over the elements with a defined GSNR; 0 if there is none.
      num_defined: float32, the same shape, the number of those elements.
      finite: scalar bool, whether all of ``S1`` is finite.
    """

    factor: tf.Tensor
    mean_ratio: tf.Tensor
    num_defined: tf.Tensor
    finite: tf.Tensor


def clip(x, low, high=1.0) -> tf.Tensor:
    """``min(max(x, low), high)`` in one kernel (``tf.clip_by_value`` is two): the same
    values for every non-NaN ``x``. ``low``, ``high``: Python floats or scalar tensors."""
    return tf.raw_ops.ClipByValue(
        t=x,
        clip_value_min=tf.cast(low, x.dtype),
        clip_value_max=tf.cast(high, x.dtype),
    )


def factor(s1, s2, k, gamma, threshold, sizes=None) -> Factor:
    """The factor ``clip(r / mean(r), gamma, 1)`` of one variable (eqs. 7 to 9), or of
    each variable of a packed block (``sizes``; ``vrgd_tf.gsnr.packing``: the same values
    bit for bit as each variable alone, outside XLA).

    Args:
      s1: float32 ``[size]``, ``S1 = sum_d x_d`` over the ``k`` samples.
      s2: float32 ``[size]``, ``S2 = sum_d x_d**2``.
      k: the number of samples, a Python number or a float32 scalar tensor (> 0).
      gamma: Python float in (0, 1].
      threshold: float32 scalar (or Python float), ``rtol * k``: an element's GSNR is
        defined where ``S2 - S1**2 / k > threshold * S2``. ``+Inf`` makes none defined
        (factor 1 everywhere: a step without a GSNR).
      sizes: None (one variable), or the element counts of the block's variables, in
        the order of their elements in ``s1`` and ``s2``.

    Returns:
      :class:`Factor`.
    """
    defined, ratio = _ratio(s1, s2, k, threshold)
    (num_defined, total), finite = packing.sums(
        [tf.cast(defined, tf.float32), ratio], sizes, finite_of=s1
    )
    mean_ratio = tf.math.divide_no_nan(total, num_defined)
    safe_mean_ratio, low = _scale(mean_ratio, gamma)
    # Under XLA the mask and the ratio are taken again from S1 and S2 in the loop that
    # applies them (the same values; none of them is written out between the loops).
    b1, b2, safe_mean_ratio, low = reductions.recompute_after(s1, s2, safe_mean_ratio, low)
    if b1 is not s1:
        defined, ratio = _ratio(b1, b2, k, threshold)
    raw = _applied(defined, ratio, safe_mean_ratio, low, sizes)
    return Factor(raw, mean_ratio, num_defined, finite)


def reapplied(s1, s2, k, gamma, threshold, mean_ratio, sizes=None) -> tf.Tensor:
    """:func:`factor`'s ``factor`` taken again from ``S1``, ``S2`` and its ``mean_ratio``
    (the same operations on the same values): for a second consumer under XLA, which
    then recomputes it in its own loop instead of reading it back (``docs/cost_model.md``
    section 6.2).

    Args:
      s1, s2, k, gamma, threshold, sizes: as for :func:`factor`.
      mean_ratio: float32 scalar (``[v]`` for a block of ``v`` packed variables),
        ``factor(...).mean_ratio`` of the same sums.

    Returns:
      float32 ``[size]`` in ``[gamma, 1]``, equal to ``factor(...).factor``.
    """
    safe_mean_ratio, low = _scale(mean_ratio, gamma)
    defined, ratio = _ratio(s1, s2, k, threshold)
    return _applied(defined, ratio, safe_mean_ratio, low, sizes)


def _scale(mean_ratio, gamma):
    """``(safe_mean_ratio, low)``: the divisor and the clip's lower bound; without a usable
    mean (0 or not finite) they are (1, 1): factor 1 for the whole variable."""
    usable = (mean_ratio > 0.0) & tf.math.is_finite(mean_ratio)
    safe_mean_ratio = tf.where(usable, mean_ratio, 1.0)
    return safe_mean_ratio, tf.where(usable, tf.constant(gamma, tf.float32), 1.0)


def _applied(defined, ratio, safe_mean_ratio, low, sizes) -> tf.Tensor:
    """``clip(r / mean(r), low, 1)`` where the GSNR is defined, else 1."""
    safe_mean_ratio = packing.per_element(safe_mean_ratio, sizes)
    low = packing.per_element(low, sizes)
    # A scalar 1.0, not ones_like: no tensor of ones is made.
    return tf.where(defined, clip(ratio / safe_mean_ratio, low), 1.0)


def _ratio(s1, s2, k, threshold):
    """``(defined, ratio)``: where the GSNR is defined, and ``r = signal / noise`` there, 0
    elsewhere."""
    signal = tf.square(s1) * (1.0 / k)
    noise = s2 - signal
    defined = noise > threshold * s2
    # signal / noise where defined (noise > 0 there), 0 elsewhere: a division by 0 is never
    # taken (divide_no_nan gives 0), so no Inf or NaN is formed.
    return defined, tf.math.divide_no_nan(signal, tf.where(defined, noise, 0.0))


class FactorContext(NamedTuple):
    """What a factor transform (``factor_transforms``) knows about one variable's factor.

    Attributes:
      index: int, the variable's position in the gradients handed to the step.
      variable: the trainable variable.
      summed: float32 ``[size]``, ``S1`` (the gradient summed over the ``k`` samples) on
        the factor's elements, flattened in the factor's order.
      summed_squares: float32 ``[size]``, ``S2`` (the sum of the samples' squares) there.
      num_samples: int, ``k``, the GSNR samples of the step (replicas x groups).
      step: None or a scalar int tensor, the steps completed before this one.

    Example: a transform that makes the factor one number per variable, the update norm
    ratio ``||f * S1|| / ||S1||``. Two replicas send ``[1, 1]`` and ``[3, -0.5]``: VRGD's
    factor is ``[1, 0.1]`` on ``S1 = [4, 0.5]``, so the ratio is
    ``||[4, 0.05]|| / ||[4, 0.5]|| = 0.99236``, and the shares' sum is ``0.99236 * S1``:

    >>> import tensorflow as tf
    >>> import vrgd_tf
    >>> from vrgd_tf import devices
    >>> def scalar(factor, context):
    ...     s1 = context.summed
    ...     ratio = tf.math.divide_no_nan(tf.norm(factor * s1), tf.norm(s1))
    ...     ratio = tf.where(tf.norm(s1) > 0, ratio, 1.0)
    ...     return tf.fill(tf.shape(factor), ratio)
    >>> strategy = devices.cpu_strategy(2)
    >>> with strategy.scope():
    ...     w = tf.Variable([0.0, 0.0], name="w")
    ...     aggregator = vrgd_tf.GSNRAggregator(gamma=0.1, factor_transforms=[scalar])
    ...     aggregator.build([w])
    >>> @tf.function
    ... def summed_gradient(inputs):
    ...     shares = strategy.run(lambda x: aggregator([x], [w])[0], args=(inputs,))
    ...     return strategy.reduce("SUM", shares, axis=None)  # the shares' sum
    >>> inputs = strategy.experimental_distribute_values_from_function(
    ...     lambda ctx: tf.constant([[1.0, 1.0], [3.0, -0.5]])[ctx.replica_id_in_sync_group]
    ... )
    >>> print(summed_gradient(inputs).numpy())
    [3.9694214  0.49617767]
    """

    index: int
    variable: object
    summed: tf.Tensor
    summed_squares: tf.Tensor
    num_samples: int
    step: object


def transform(transforms, applied, context: FactorContext) -> tf.Tensor:
    """``applied`` (float32 ``[size]``) after each of ``transforms`` in order; each result
    is cast to float32 and reshaped to ``[size]``.

    Raises (at trace time, naming ``factor_transforms[i]``, the function and the variable):
      TypeError: a transform returned None or a tensor that is not real numbers (float, int
        or bool).
      ValueError: a transform returned a static number of elements other than ``size``
        (e.g. a scalar: ``tf.fill(tf.shape(factor), value)`` gives one value per element).
    """
    size = applied.shape.num_elements()
    for i, fn in enumerate(transforms):
        applied = _checked(fn(applied, context), size, i, fn, context)
    return applied


def _checked(out, size: int, i: int, fn, context: FactorContext) -> tf.Tensor:
    """One transform's result as float32 ``[size]``, or the error naming it (see
    :func:`transform`)."""
    where = f"{transform_label(i, fn)} for variable {naming.variable_name(context.variable)!r}"
    want = f"it must return the factor, float32 of shape [{size}] (one value per element)"
    if out is None:
        raise TypeError(f"{where} returned None; {want}.")
    try:
        out = tf.convert_to_tensor(out)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where} returned {type(out).__name__}, not a tensor; {want}.") from e
    if not (out.dtype.is_floating or out.dtype.is_integer or out.dtype == tf.bool):
        raise TypeError(f"{where} returned dtype {out.dtype.name}; {want}.")
    if out.shape.is_fully_defined() and out.shape.num_elements() != size:
        raise ValueError(
            f"{where} returned shape {out.shape.as_list()}; {want}. For one number per "
            "variable, return `tf.fill(tf.shape(factor), value)`."
        )
    return tf.reshape(tf.cast(out, tf.float32), [size])
