"""GSNR statistics across replicas and the VRGD factor: the only place this math lives.

Every VRGD optimizer, Keras 3 (:mod:`vrgd_tf.optimizers`) and tf_keras
(:mod:`vrgd_tf.tf_keras`), reaches :func:`variance_reduce` through its
:class:`vrgd_tf.GSNRAggregator` in the replica context, in place of the plain cross-replica
SUM of the gradients, and hands the result to its unchanged base update rule.

Source: G. Jiang et al., "Accelerating Large Batch Training via Gradient Signal to Noise Ratio
(GSNR)", arXiv 2309.13681, Algorithm 1 and eqs. 7 to 10; GSNR as in J. Liu et al., ICLR 2020,
eq. 2. The project's specification is ``docs/spec.md``.

Per trainable variable, with ``x_d`` the gradient that sample ``d`` of ``k`` hands the
optimizer (Keras divides the loss by the global batch, so ``x_d = c * g_d`` for some unknown
``c``) and all-reduces (SUM) of ``x`` and of ``x * x`` giving ``S1 = sum_d x_d`` and
``S2 = sum_d x_d**2``:

    mean    m   = S1 / k
    var     s2  = S2 / k - m**2                       (biased, over samples, element-wise)
    GSNR    r   = m**2 / s2  = S1**2 / (k * S2 - S1**2)   (eq. 7; ``c`` cancels)
    factor  f   = clip(r / mean(r), gamma, 1)             (eqs. 8, 9)
    output  u   = f * S1                                  (eq. 10: S1 is the base gradient)

With ``beta_3 > 0`` the factor is smoothed per element before use (``smoothing``).
Undefined statistics give factor 1 (spec section 2): a step with fewer than 2 contributing
samples (spec section 1), or with a stray gradient of a sample without examples, or in which
no element of any variable has a defined GSNR, is the base step; elements whose variance is not resolvable in float32
(``s2 <= NOISE_RTOL * k * mean(x**2)``; with ``squares_dtype="bfloat16"`` ``2**-8`` instead
of ``NOISE_RTOL``; including identical and all-zero gradients) or whose statistics are not finite get factor 1 and are left out of ``mean(r)``;
a variable with no defined element, or whose ``mean(r)`` is 0 or not finite, gets factor 1.
The statistics and the factor are float32 whatever the variable dtype; the result has the
gradient's dtype (float64 gradients are also summed in float64, and ``u`` is the float64
``f * S1``).

The step is a composition of small stages, each a module of this package:

* ``options``: :class:`vrgd_tf.settings.VRGDSettings`, the one settings record (gamma, beta_3,
  statistics_interval, squares_dtype, state_dtype, split_half, factor_transforms,
  sparse_statistics, pack_limit), their checks and the noise thresholds;
* ``layout``: one ``layout.Entry`` per gradient (its path: dense, float64, sparse
  rows, sparse as dense; its sizes; its state index) and the blocks the stages work on
  (one entry, or the small dense ones packed into one buffer), built once per trace;
* ``packing``: the per-variable sums and values of a packed block (the unpacked values bit
  for bit);
* ``samples``: what this replica sends (with :class:`GroupSquares`, its micro-batch
  groups' squares), and the sums it gets back per entry;
* ``collectives``: every collective of the step and nothing else;
* ``sparse``: exact statistics of sparse gradients on the rows some replica touched;
* ``factors``, ``smoothing``, ``statistics``: pure math;
* ``halves``: the split-half reliability of the GSNR in the step (a diagnostic; its
  subsample travels in an all-reduce call of its own, its values are computed at recording
  steps); ``reliability``: its math (pure);
* ``state``: :class:`VRGDState` and the one place that reads and commits it;
* ``step``: :func:`variance_reduce`, the composition, returning the gradients with a
  :class:`StepReport`.

The package exports what a caller of the step or an author of ``factor_transforms`` needs
(``__all__``); everything else is in its stage, e.g. ``vrgd_tf.gsnr.statistics.NUM_STATISTICS``.
"""

import importlib as _importlib

# The options (``options``) import no TensorFlow: the settings of both families, including
# the JAX family (``vrgd_tf.keras_jax``), check their values with them. Every other stage
# needs TensorFlow and is imported on first use of one of its names (PEP 562), so that
# ``import vrgd_tf`` under ``KERAS_BACKEND=jax`` imports no TensorFlow module.
from vrgd_tf.gsnr.options import (
    NOISE_RTOL,
    NOISE_RTOL_BFLOAT16,
    PACK_LIMIT,
    noise_rtol,
)
from vrgd_tf.gsnr.options import (
    VRGDSettings as VRGDSettings,  # the step's record; documented in vrgd_tf.settings
)

#: The public names of the TensorFlow stages, each with the stage (module) that defines it.
_LAZY = {
    "FactorContext": "factors",
    "SPLIT_HALF_FIELDS": "halves",
    "GroupSquares": "samples",
    "VRGDState": "state",
    "STATISTICS_FIELDS": "statistics",
    "GSNRStatistics": "statistics",
    "gsnr_factor": "statistics",
    "ReducedGradients": "step",
    "StepReport": "step",
    "variance_reduce": "step",
}
_STAGES = (
    "collectives",
    "factors",
    "halves",
    "layout",
    "options",
    "packing",
    "reductions",
    "reliability",
    "samples",
    "smoothing",
    "sparse",
    "state",
    "statistics",
    "step",
)


def __getattr__(name):
    if name in _LAZY:
        value = getattr(_importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name in _STAGES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_STAGES))


# What a user of the step, or an author of ``factor_transforms``, needs; the rest is in the
# stages (``from vrgd_tf.gsnr import statistics``), for this package and its tests.
__all__ = [
    "variance_reduce",
    "ReducedGradients",
    "StepReport",
    "GroupSquares",
    "VRGDState",
    "FactorContext",
    "GSNRStatistics",
    "gsnr_factor",
    "STATISTICS_FIELDS",
    "SPLIT_HALF_FIELDS",
    "NOISE_RTOL",
    "NOISE_RTOL_BFLOAT16",
    "noise_rtol",
    "PACK_LIMIT",
]
