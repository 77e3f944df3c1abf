"""The GSNR math of the JAX path (``docs/spec.md`` sections 1 to 3 and 4's diagnostics), in
``jax.numpy``: pure functions of the sums over the ``k`` samples, no collective, no state.

Per variable, with ``S1 = sum_d x_d`` and ``S2 = sum_d x_d**2`` over the ``k`` samples that
contributed (spec section 1; ``x_d = c * g_d`` for any ``c``, which cancels):

    signal  = S1**2 / k,  noise = S2 - signal          (k * m**2 and k * s2)
    defined = noise > rtol * k * S2                    (False for NaN/Inf: also finiteness)
    r       = signal / noise  where defined, else 0    (eq. 7)
    f       = clip(r / mean(r), gamma, 1) where defined, else 1       (eqs. 8, 9)

with factor 1 for the whole variable when ``mean(r)`` over its defined elements is 0 or not
finite (section 2). The factor momentum (section 3, *our reading*) is kept in the deficit
form ``d_t = (1 - beta_3**t) - p_t`` with ``c_t = 1 - beta_3**t``, so that
``p_hat = 1 - d_t / c_t`` is exactly 1 while every factor so far was 1: ``gamma = 1`` with
any ``beta_3`` is the base step bit for bit. The TensorFlow path has its own definition
(:mod:`vrgd_tf.gsnr`, see ``docs/spec.md``); both are tested against
``tests/numpy_reference.py``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "NOISE_RTOL",
    "Factor",
    "corrected",
    "factor",
    "reapplied",
    "smooth",
    "statistics",
    "sums",
]

#: An element has no noise estimate when ``s2 <= NOISE_RTOL * k * mean(x**2)`` (16 float32
#: ulps per sample; the value of ``vrgd_tf.gsnr.NOISE_RTOL``, written here so that this
#: path needs no TensorFlow).
NOISE_RTOL = 16.0 * float(np.finfo(np.float32).eps)

#: The layout of :func:`sums`: ``LANES`` sums side by side, each adding ``ROWS`` elements
#: in sequence.
ROWS, LANES = 16, 16


class Factor(NamedTuple):
    """One variable's raw factor and what the diagnostics reuse (float32).

    Attributes:
      factor: the variable's shape, in ``[gamma, 1]``; 1 where the GSNR is undefined.
      mean_ratio: scalar, ``mean(r)`` over the defined elements; 0 if there is none.
      num_defined: scalar, the number of those elements.
      finite: scalar bool, whether all of ``S1`` is finite.
    """

    factor: jnp.ndarray
    mean_ratio: jnp.ndarray
    num_defined: jnp.ndarray
    finite: jnp.ndarray


def factor(s1, s2, k, gamma: float, rtol: float = NOISE_RTOL) -> Factor:
    """The raw factor of one variable (spec sections 1 and 2).

    Args:
      s1, s2: float32 arrays of the variable's shape, ``S1`` and ``S2``.
      k: float32 scalar (traced), the contributing samples; below 2 nothing is defined.
      gamma: Python float in (0, 1].
      rtol: the noise threshold per sample.

    Returns:
      :class:`Factor`; no Inf or NaN is formed from finite sums.
    """
    threshold = _threshold(k, rtol)

    def parts(s1, s2):  # 0 * S1 is 0, or NaN where S1 is not finite
        defined, ratio = _ratio(s1, s2, k, threshold)
        return ratio, defined.astype(jnp.float32), s1 * 0.0

    sum_ratio, num_defined, not_finite = sums(parts, (s1, s2))
    mean_ratio = jnp.where(num_defined > 0, sum_ratio / jnp.maximum(num_defined, 1.0), 0.0)
    finite = not_finite == 0.0
    # The mask and the ratio taken again from S1 and S2 behind a barrier, in the loop that
    # applies them: XLA then does not write them out between the sums and that loop (the
    # same values; vrgd_tf.gsnr.reductions.recompute_after).
    s1, s2, after = jax.lax.optimization_barrier((s1, s2, mean_ratio))
    return Factor(reapplied(s1, s2, k, gamma, after, rtol), mean_ratio, num_defined, finite)


def reapplied(s1, s2, k, gamma: float, mean_ratio, rtol: float = NOISE_RTOL):
    """:func:`factor`'s ``factor`` taken again from ``S1``, ``S2`` and its ``mean_ratio``
    (the same operations on the same values): for a consumer that recomputes it in its own
    loop (behind an ``optimization_barrier``) instead of reading it back.

    Args:
      s1, s2, k, gamma, rtol: as for :func:`factor`.
      mean_ratio: float32 scalar, ``factor(s1, s2, k, gamma, rtol).mean_ratio``.

    Returns:
      float32, the shape of ``s1``, in ``[gamma, 1]``: equal to ``factor(...).factor``.
    """
    usable = (mean_ratio > 0.0) & jnp.isfinite(mean_ratio)
    safe = jnp.where(usable, mean_ratio, 1.0)
    low = jnp.where(usable, jnp.float32(gamma), 1.0)
    defined, ratio = _ratio(s1, s2, k, _threshold(k, rtol))
    return jnp.where(defined, jnp.clip(ratio / safe, low, 1.0), 1.0)


def _threshold(k, rtol):
    """The noise threshold per unit of ``S2``: ``rtol * k``, or Inf below 2 samples."""
    return jnp.where(k >= 2.0, rtol * k, jnp.inf)


def _ratio(s1, s2, k, threshold):
    """``(defined, r)``: where the GSNR is defined, and ``signal / noise`` there, else 0."""
    signal = jnp.square(s1) * (1.0 / jnp.maximum(k, 1.0))
    noise = s2 - signal
    defined = noise > threshold * s2
    return defined, jnp.where(defined, signal / jnp.where(defined, noise, 1.0), 0.0)


def smooth(raw, deficit, correction, beta_3: float, gamma: float):
    """One step of the factor momentum (spec section 3) in the deficit form.

    Args:
      raw: float32, the step's factor ``f_t``.
      deficit: float32, the same shape, ``d_{t-1}``.
      correction: float32 scalar, ``c_{t-1} = 1 - beta_3**(t-1)``.
      beta_3: Python float in (0, 1).
      gamma: Python float in (0, 1].

    Returns:
      ``(p_hat_t, d_t, c_t)``; ``p_hat_t`` in ``[gamma, 1]``.
    """
    new_correction = beta_3 * correction + (1.0 - beta_3)
    new_deficit = beta_3 * deficit + (1.0 - beta_3) * (1.0 - raw)
    return corrected(new_deficit, new_correction, gamma), new_deficit, new_correction


def corrected(deficit, correction, gamma: float):
    """The smoothed factor ``p_hat = clip(1 - d / c, gamma, 1)`` of a deficit ``d``
    (float32 array) and its correction ``c = 1 - beta_3**t`` (float32 scalar, > 0); exactly
    1 where ``d`` is 0 (spec section 3)."""
    return jnp.clip(1.0 - deficit / correction, gamma, 1.0)


def statistics(s1, raw: Factor, applied, k, gamma: float) -> jnp.ndarray:
    """The diagnostics of one variable (spec section 4), float32 ``[5]``: mean GSNR, fraction
    of the raw factor at ``gamma`` and at 1, mean applied factor, ``||f S1|| / ||S1||``
    (1 when ``||S1|| = 0``); the fields of ``vrgd_tf.gsnr.STATISTICS_FIELDS``."""
    size = float(max(int(np.prod(s1.shape)), 1))

    def parts(f, a, s1):
        at_gamma = (f <= gamma) if gamma < 1.0 else jnp.zeros_like(f, jnp.bool_)
        as_float = [at_gamma, f >= 1.0]
        return [x.astype(jnp.float32) for x in as_float] + [a, s1 * s1, jnp.square(a * s1)]

    at_gamma, at_one, total, plain, scaled = sums(parts, (raw.factor, applied, s1))
    ratio = jnp.where(plain > 0, jnp.sqrt(scaled / jnp.where(plain > 0, plain, 1.0)), 1.0)
    return jnp.stack([raw.mean_ratio, at_gamma / size, at_one / size, total / size, ratio]).astype(
        jnp.float32
    )


def sums(parts, inputs):
    """The float32 sums over the elements of ``parts(*inputs)``, by one variadic reduce.

    XLA on CPU adds a reduce's elements in sequence and, reducing the minor dimension,
    one element at a time; a separate ``jnp.sum`` per value writes the values out and reads
    them back. Here the first ``n - n % (ROWS * LANES)`` elements are viewed as
    ``[-1, ROWS, LANES]`` and reduced over ``ROWS`` (``LANES`` sums side by side, vector
    code, ``ROWS`` roundings in sequence), the ``n / ROWS`` partial sums added by
    ``jnp.sum``, and the rest (under ``ROWS * LANES`` elements) by a second reduce;
    ``parts`` runs inside each loop, so no value is written out (``docs/cost_model.md``
    section 6.5).

    Args:
      parts: function of arrays of one shape to a list of float32 arrays of that shape,
        element-wise (it is called on pieces of the inputs).
      inputs: a tuple of arrays of one shape (any rank).

    Returns:
      A list of float32 scalars, one per value of ``parts``.
    """
    flat = [jnp.reshape(x, (-1,)) for x in inputs]
    n, block = flat[0].shape[0], ROWS * LANES
    main = n - n % block
    out = None
    if main:
        pieces = [x[:main].reshape(main // block, ROWS, LANES) for x in flat]
        out = [jnp.sum(s) for s in _reduced(parts(*pieces), 1)]
    if main < n or not main:
        rest = _reduced(parts(*[x[main:] for x in flat]), 0)
        out = rest if out is None else [a + b for a, b in zip(out, rest)]
    return out


def _reduced(values, axis):
    """The sums of ``values`` (float32 arrays of one shape) over ``axis``, one reduce."""
    values = tuple(jnp.asarray(v, jnp.float32) for v in values)
    zeros = tuple(jnp.float32(0) for _ in values)
    return list(jax.lax.reduce(values, zeros, lambda a, b: tuple(map(jnp.add, a, b)), (axis,)))
