"""The factor's momentum with bias correction (spec section 3, *our reading*): pure math.

    p_t = beta_3 * p_{t-1} + (1 - beta_3) * f_t,   p_hat_t = p_t / (1 - beta_3**t).

The state is kept as the *deficit* ``d_t = (1 - beta_3**t) - p_t`` and the bias-correction
denominator ``c_t = 1 - beta_3**t`` (itself the EMA of a constant 1), so that
``p_hat_t = 1 - d_t / c_t``. This is algebraically the formula above, but gives exactly 1 (not
1 - 1 ulp) whenever every factor so far was 1, so a run without a noise estimate reproduces the
base optimizer bit for bit. The caller reads and commits the state
(:mod:`vrgd_tf.gsnr.state`).
"""

from typing import Tuple

import tensorflow as tf

from vrgd_tf.gsnr.factors import clip

__all__ = ["next_correction", "smooth", "corrected", "smooth_factor"]


def next_correction(correction, beta_3):
    """``c_t = beta_3 * c_{t-1} + (1 - beta_3)``, i.e. ``1 - beta_3**t`` (the EMA of 1)."""
    return beta_3 * correction + (1.0 - beta_3)


def smooth(factor, deficit, divisor, beta_3, gamma) -> Tuple[tf.Tensor, tf.Tensor]:
    """``(p_hat_t, d_t)`` from ``f_t`` (``factor``), ``d_{t-1}`` (``deficit``, the same
    shape) and ``divisor``, ``c_t`` (broadcastable; ``+Inf`` gives ``p_hat = 1`` exactly: a
    step without a GSNR, whose ``d_t`` is then not committed)."""
    new_deficit = beta_3 * deficit + (1.0 - beta_3) * (1.0 - factor)
    return corrected(new_deficit, divisor, gamma), new_deficit


def corrected(deficit, divisor, gamma) -> tf.Tensor:
    """``p_hat_t = clip(1 - d_t / c_t, gamma, 1)`` from ``d_t`` (``deficit``) and ``c_t``
    (``divisor``). p_hat is a weighted mean of values in [gamma, 1]; clipping only removes
    rounding."""
    return clip(1.0 - deficit / divisor, gamma)


def smooth_factor(
    factor: tf.Tensor, deficit: tf.Tensor, correction: tf.Tensor, beta_3: float, gamma: float
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """One step of the factor momentum; returns ``(p_hat, new_deficit, new_correction)``.

    Implements ``p_t = beta_3 p_{t-1} + (1 - beta_3) f_t``, ``p_hat = p_t / (1 - beta_3**t)``
    (spec section 3, *our reading*) in the deficit form described in the module docstring.
    Pure math: the caller reads and writes the state.

    Args:
      factor: float32 tensor ``f_t``, values in [gamma, 1].
      deficit: float32 tensor of the same shape, ``d_{t-1}``.
      correction: float32 tensor broadcastable to it, ``c_{t-1} = 1 - beta_3**(t-1)``.
      beta_3: Python float in (0, 1).
      gamma: Python float in (0, 1], the lower bound of ``factor``.

    Returns:
      ``p_hat_t`` (values in [gamma, 1]), ``d_t`` and ``c_t``, float32.
    """
    new_correction = next_correction(correction, beta_3)
    p_hat, new_deficit = smooth(factor, deficit, new_correction, beta_3, gamma)
    return p_hat, new_deficit, new_correction
