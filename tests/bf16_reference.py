"""NumPy models of a bfloat16-stored factor momentum (``state_dtype="bfloat16"``), for the
tests of both backends (no TensorFlow, no Keras).

The factor momentum (docs/spec.md section 3) in the deficit form
``d_t = beta_3 d_{t-1} + (1 - beta_3)(1 - f_t)``, ``c_t = beta_3 c_{t-1} + (1 - beta_3)``,
``p_hat_t = 1 - d_t / c_t``; with ``state_dtype="bfloat16"`` only the stored ``d_t`` is
rounded (to nearest even, 8 significant bits: relative error at most ``U = 2**-8``), the
math is float32. :class:`DeficitMomentum` is that rule (float64 math, optionally rounding
the stored deficit as bfloat16 does), and :func:`sgd_weight_bound` the first-order bound on
how far plain SGD's weights move from the exact (float64) reference because of that
rounding.
"""

import ml_dtypes
import numpy as np

import numpy_reference as ref

#: Unit roundoff of bfloat16 (8-bit significand, round to nearest).
U = 2.0**-8


def bf16(x):
    """float64 values of ``x`` rounded to float32, then to bfloat16 (as the step: float32
    math, rounded at the write)."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


class DeficitMomentum:
    """``p_hat_t`` of the factor momentum, called like ``numpy_reference.FactorMomentum``;
    ``stored="bfloat16"`` rounds the stored deficit at each write."""

    def __init__(self, beta_3, gamma, stored="float64"):
        self.beta_3, self.gamma, self.stored = beta_3, gamma, stored
        self.d, self.c = None, 0.0

    def __call__(self, factor):
        b = self.beta_3
        if self.d is None:
            self.d = np.zeros_like(factor)
        self.c = b * self.c + (1.0 - b)
        d = b * self.d + (1.0 - b) * (1.0 - factor)
        self.d = bf16(d) if self.stored == "bfloat16" else d
        return np.clip(1.0 - d / self.c, self.gamma, 1.0)


def vrgd_with(base, gamma, beta_3, names, stored):
    """``numpy_reference.VRGD`` whose factor momentum of each of ``names`` is a
    :class:`DeficitMomentum` storing its deficit as ``stored``."""
    vr = ref.VRGD(base, gamma, beta_3)
    for n in names:
        vr.mom[n] = DeficitMomentum(beta_3, gamma, stored)
    return vr


def factor_error_bounds(grads, gamma, beta_3):
    """Per step ``t``, the first-order bound on ``|p_hat_t - exact p_hat_t|`` when the
    deficit is stored in bfloat16, and ``S1_t``.

    Each write rounds ``d_j`` by at most ``U |d_j|``; the error then decays by ``beta_3``
    per step: the stored deficit is off by at most ``B_j = beta_3 B_{j-1} + U |d_j|``.
    ``p_hat_t`` uses the unrounded ``d_t``, whose only error is ``beta_3 B_{t-1}``, divided
    by ``c_t`` (clipping cannot widen it). The raw factors come from the gradients alone
    (given data), so no error feeds back.

    Args:
      grads: float array ``[steps, k, ...]``, what each replica hands the optimizer.

    Returns:
      ``[(bound_t, S1_t)]``, float64 arrays of the variable's shape.
    """
    out, d, c, b_prev = [], None, 0.0, 0.0
    for xs in np.asarray(grads, np.float64):
        factor, s1 = ref.gsnr_factor(xs, gamma)
        d = np.zeros_like(factor) if d is None else d
        c = beta_3 * c + (1.0 - beta_3)
        d = beta_3 * d + (1.0 - beta_3) * (1.0 - factor)
        out.append((beta_3 * b_prev / c, s1))
        b_prev = beta_3 * b_prev + U * np.abs(d)
    return out


def sgd_weight_bound(grads, learning_rate, gamma, beta_3):
    """The first-order bound on ``|w_T - exact w_T|`` of plain SGD (no momentum) after the
    steps of ``grads`` (``[steps, k, ...]``): ``lr * sum_t bound_t |S1_t|``."""
    return learning_rate * sum(
        e * np.abs(s1) for e, s1 in factor_error_bounds(grads, gamma, beta_3)
    )


def ref_run(vr, init, grads):
    """The reference ``vr`` (a ``numpy_reference.VRGD``) over ``grads`` (``{name: [steps,
    k, ...]}``) from ``init``, as ``util.numpy_run`` (which needs TensorFlow)."""
    w = {n: np.asarray(v, np.float64) for n, v in init.items()}
    for i in range(next(iter(grads.values())).shape[0]):
        for n in init:
            w[n] = vr.step(n, w[n], np.asarray(grads[n][i], np.float64))
    return w
