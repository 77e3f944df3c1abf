"""GSNR statistics across replicas and the VRGD factor: the only place this math lives.

Every VRGD optimizer, Keras 3 (:mod:`vrgd_tf.optimizers`) and tf_keras
(:mod:`vrgd_tf.tf_keras`), calls :func:`variance_reduce` in the replica context, in place
of the plain cross-replica SUM of the gradients, and hands the result to its unchanged base
update rule.

Source: G. Jiang et al., "Accelerating Large Batch Training via Gradient Signal to Noise Ratio
(GSNR)", arXiv 2309.13681, Algorithm 1 and eqs. 7 to 10; GSNR as in J. Liu et al., ICLR 2020,
eq. 2. The project's specification is ``docs/spec.md``.

Per trainable variable, with ``x_d`` the gradient that replica ``d`` of ``k`` hands the
optimizer (Keras divides the loss by the global batch, so ``x_d = c * g_d`` for some unknown
``c``) and all-reduces (SUM) of ``x`` and of ``x * x`` giving ``S1 = sum_d x_d`` and ``S2 = sum_d x_d**2``:

    mean    m   = S1 / k
    var     s2  = S2 / k - m**2                       (biased, over replicas, element-wise)
    GSNR    r   = m**2 / s2  = S1**2 / (k * S2 - S1**2)   (eq. 7; ``c`` cancels)
    factor  f   = clip(r / mean(r), gamma, 1)             (eqs. 8, 9)
    output  u   = f * S1                                  (eq. 10: S1 is the base gradient)

With ``beta_3 > 0`` the factor is smoothed per element before use (paper Section 4.2 for
VR-Adam/VR-LAMB; the formula is *our reading* of the text):

    p_t = beta_3 * p_{t-1} + (1 - beta_3) * f_t,   p_hat_t = p_t / (1 - beta_3**t),
    u   = p_hat_t * S1.

The state is kept as the *deficit* ``d_t = (1 - beta_3**t) - p_t`` and the bias-correction
denominator ``c_t = 1 - beta_3**t`` (itself the EMA of a constant 1), so that
``p_hat_t = 1 - d_t / c_t``. This is algebraically the formula above, but gives exactly 1 (not
1 - 1 ulp) whenever every factor so far was 1, so a run without a noise estimate reproduces the
base optimizer bit for bit.

Undefined statistics (spec section 2, *our reading* where marked) give factor 1:

* ``k == 1``: no noise estimate; the gradients pass through unchanged (a warning is logged
  once by the caller). With ``k >= 2``, a step in which no element of any variable has a
  defined GSNR (every replica sent the same gradient) is reported to the caller
  (``warn_inert``), which warns once.
* Elements whose variance is not resolvable in float32, i.e.
  ``s2 <= NOISE_RTOL * k * mean(x**2)`` (this includes identical gradients on every replica
  and all-zero gradients), or whose statistics are not finite (overflow of the squares, or
  a NaN/Inf gradient): infinite or unknown GSNR, so factor 1, and they are left out of
  ``mean(r)``. ``NOISE_RTOL * k`` bounds the float32 cancellation error of
  ``S2 / k - (S1 / k)**2`` relative to ``S2 / k`` (*our reading*).
* A variable with no defined element, or whose ``mean(r)`` is 0 or not finite: factor 1.

All arithmetic is float32 whatever the variable dtype; the result has the gradient's dtype.
Precision: the variance comes from one pass over ``S1`` and ``S2``, so its relative error is
about ``k * eps32 * (1 + r)``; an element with a GSNR of 1e3 has ``r`` to about 1e-4. Such
elements are almost always clipped at 1; they move the per-variable ``mean(r)`` slightly.
Nothing here branches in Python on tensor values, and the collectives are two
``ReplicaContext.all_reduce`` calls (the dense gradients, then their squares) and, if there
are sparse gradients, one ``ReplicaContext.all_gather`` call (their rows), outside any
``tf.cond``, so the step compiles with XLA and runs under ``TPUStrategy``.

Sparse gradients (``tf.IndexedSlices``, spec section 4): the statistics are those of the
dense form, taken exactly on the rows some replica touched (``_sparse_statistics``):
each replica's rows with the squares of its per-index sums are gathered, ``S1`` and ``S2``
summed per row of their union, and the GSNR computed there. Untouched rows have an undefined
GSNR on the dense form too (factor 1, out of ``mean(r)``), so nothing of the variable's
dense shape is formed; with ``beta_3 > 0`` their deficit decays by ``beta_3`` in place
(``d_t = beta_3 d_{t-1}``, as a factor of 1 gives), the touched rows are scattered. The
gathered rows and squares are float32 whatever ``squares_dtype``, and so is their noise
threshold (:data:`NOISE_RTOL`).
"""

import dataclasses
import numbers
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from vrgd_tf import naming

__all__ = [
    "NOISE_RTOL",
    "NOISE_RTOL_BFLOAT16",
    "STATISTICS_FIELDS",
    "FactorContext",
    "GSNRStatistics",
    "VRGDState",
    "dense_gradient",
    "gsnr_factor",
    "gsnr_factors_flat",
    "smooth_factor",
    "sum_with_squares",
    "variance_reduce",
    "validate_gamma",
    "validate_beta_3",
    "validate_squares_dtype",
    "validate_factor_transforms",
    "SQUARES_DTYPES",
    "noise_rtol",
]

#: Relative threshold, per replica, below which the variance across replicas counts as zero:
#: an element is "noise free" when ``s2 <= NOISE_RTOL * k * mean(x**2)``. 16 float32 ulps
#: per summed replica.
NOISE_RTOL = 16.0 * float(np.finfo(np.float32).eps)

#: The same threshold when the squares travel in bfloat16 (``squares_dtype="bfloat16"``):
#: the unit roundoff of bfloat16, ``2**-8``, per summed replica. Each square is rounded
#: once (relative error <= 2**-8) and each of the ``k - 1`` additions of the all-reduce
#: rounds once more, so ``S2`` is known to about ``k * 2**-8 * S2`` at worst, and an element
#: counts as noisy only if ``noise > 2**-8 * k * S2``, i.e. its GSNR is below
#: ``1 / (2**-8 * k) - 1`` (127 at k = 2, 31 at k = 8, 3 at k = 64); above that it gets
#: factor 1 and is left out of ``mean(r)``, as in float32 (*our reading*; measured in
#: ``docs/results.md``).
NOISE_RTOL_BFLOAT16 = 2.0**-8

#: Allowed values of ``squares_dtype``: the dtype the squares are all-reduced in.
SQUARES_DTYPES = ("float32", "bfloat16")

#: The names of the diagnostics kept per variable, in storage order (the fields of
#: :class:`GSNRStatistics`), the one definition every reader of the diagnostics uses.
STATISTICS_FIELDS = ("mean_gsnr", "frac_at_gamma", "frac_at_one", "mean_factor", "norm_ratio")

#: Number of diagnostics kept per variable.
NUM_STATISTICS = len(STATISTICS_FIELDS)


def validate_gamma(gamma):
    """Checks ``gamma``, the lower bound of the VRGD factor (spec section 2, eq. 9).

    Args:
      gamma: Python number in (0, 1].

    Returns:
      ``gamma`` as a Python float.

    Raises:
      TypeError: ``gamma`` is not a real number.
      ValueError: ``gamma`` is outside (0, 1].
    """
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(
            f"`gamma` must be a float in (0, 1]; got {gamma!r} of type {type(gamma).__name__}."
        )
    gamma = float(gamma)
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"`gamma` must be in (0, 1]; got {gamma}.")
    return gamma


def validate_beta_3(beta_3):
    """Checks ``beta_3``, the decay of the VRGD factor's momentum (spec section 3).

    Args:
      beta_3: Python number in [0, 1). 0 means the raw per-step factor is used.

    Returns:
      ``beta_3`` as a Python float.

    Raises:
      TypeError: ``beta_3`` is not a real number.
      ValueError: ``beta_3`` is outside [0, 1).
    """
    if isinstance(beta_3, bool) or not isinstance(beta_3, numbers.Real):
        raise TypeError(
            f"`beta_3` must be a float in [0, 1); got {beta_3!r} of type {type(beta_3).__name__}."
        )
    beta_3 = float(beta_3)
    if not 0.0 <= beta_3 < 1.0:
        raise ValueError(f"`beta_3` must be in [0, 1); got {beta_3}.")
    return beta_3


def validate_factor_transforms(factor_transforms) -> tuple:
    """``factor_transforms`` as a tuple of callables; None or empty gives ``()``.

    Raises:
      TypeError: not a sequence of callables (the message names the argument).
    """
    if factor_transforms is None:
        return ()
    if callable(factor_transforms):
        factor_transforms = (factor_transforms,)
    try:
        transforms = tuple(factor_transforms)
    except TypeError:
        transforms = None
    if transforms is None or not all(callable(t) for t in transforms):
        raise TypeError(
            "`factor_transforms` must be a sequence of callables "
            "`fn(factor, context) -> factor`; got "
            f"{factor_transforms!r}."
        )
    return transforms


def validate_squares_dtype(squares_dtype):
    """Checks ``squares_dtype``, the dtype the squared gradients are all-reduced in.

    Args:
      squares_dtype: ``"float32"`` (default of every VRGD class: the squares travel with
        the gradients in one float32 buffer) or ``"bfloat16"`` (they travel in a second,
        bfloat16 buffer of half the bytes; the gradient sums stay float32 and exact). A
        ``tf.DType`` of those names is accepted too.

    Returns:
      The name, ``"float32"`` or ``"bfloat16"``.

    Raises:
      TypeError: not a string (or ``tf.DType``).
      ValueError: not one of :data:`SQUARES_DTYPES`.
    """
    if isinstance(squares_dtype, tf.DType):
        squares_dtype = squares_dtype.name
    if not isinstance(squares_dtype, str):
        raise TypeError(
            f"`squares_dtype` must be one of {', '.join(repr(d) for d in SQUARES_DTYPES)}; "
            f"got {squares_dtype!r} of type {type(squares_dtype).__name__}."
        )
    if squares_dtype not in SQUARES_DTYPES:
        raise ValueError(
            f"`squares_dtype` must be one of {', '.join(repr(d) for d in SQUARES_DTYPES)}; "
            f"got {squares_dtype!r}."
        )
    return squares_dtype


def noise_rtol(squares_dtype="float32") -> float:
    """The per-replica relative noise threshold for squares all-reduced in
    ``squares_dtype``: :data:`NOISE_RTOL` (float32) or :data:`NOISE_RTOL_BFLOAT16`."""
    return NOISE_RTOL_BFLOAT16 if squares_dtype == "bfloat16" else NOISE_RTOL


@dataclasses.dataclass(frozen=True)
class GSNRStatistics:
    """Per-variable diagnostics of one step, all float32 scalars (shape ``[]``).

    Attributes:
      mean_gsnr: mean of the GSNR ``r`` over the elements where it is defined; 0 if none is.
      frac_at_gamma: fraction of all elements whose factor is clipped at ``gamma``.
      frac_at_one: fraction of all elements whose factor is exactly 1 (clipped at 1, or
        undefined statistic).
      mean_factor: mean over all elements of the factor actually applied (after the
        ``beta_3`` smoothing), in [gamma, 1]: the effective scale of this variable's step
        relative to the base optimizer's (1 = no variance reduction).
      norm_ratio: update norm ratio ``||f * S1||_2 / ||S1||_2`` over the variable's
        elements, ``f`` the factor actually applied (after smoothing) and ``S1`` the plain
        summed gradient: the length of the variance-reduced summed gradient relative to
        the base optimizer's, in [gamma, 1] (so in [0, 1]); defined as 1 when
        ``||S1|| = 0``. Unlike ``mean_factor`` it weights each element by its squared
        gradient, so it is the scale of the step the base rule actually receives.

    ``frac_at_gamma`` and ``frac_at_one`` describe this step's raw factor, before smoothing.
    """

    mean_gsnr: tf.Tensor
    frac_at_gamma: tf.Tensor
    frac_at_one: tf.Tensor
    mean_factor: tf.Tensor
    norm_ratio: tf.Tensor

    def stack(self) -> tf.Tensor:
        """Returns the values as a float32 tensor of shape ``[NUM_STATISTICS]``."""
        return tf.stack([getattr(self, f) for f in STATISTICS_FIELDS])


def dense_gradient(grad) -> tf.Tensor:
    """Returns ``grad`` as a dense tensor; ``tf.IndexedSlices`` rows with equal indices are summed.

    The square of a sum is not the sum of squares (spec section 4), so sparse gradients are
    densified before squaring.

    Args:
      grad: ``tf.Tensor`` or ``tf.IndexedSlices`` with a static dense shape.

    Returns:
      A ``tf.Tensor`` of the dense shape and the gradient's dtype.
    """
    if isinstance(grad, tf.IndexedSlices):
        num_rows = grad.dense_shape[0] if grad.dense_shape is not None else None
        if num_rows is None:
            raise ValueError("A sparse gradient needs a `dense_shape` to be made dense.")
        return tf.math.unsorted_segment_sum(grad.values, grad.indices, num_rows)
    return tf.convert_to_tensor(grad)


def _sizes(tensors) -> List[int]:
    sizes = [t.shape.num_elements() for t in tensors]
    if any(n is None for n in sizes):
        raise ValueError(
            "VRGD needs gradients with static shapes (as XLA and TPUs do); got "
            f"shapes {[t.shape for t in tensors]}."
        )
    return sizes


def _sum_per_variable(x: tf.Tensor, sizes: Sequence[int]) -> tf.Tensor:
    """float32 ``[n]``: the sums of the ``n`` consecutive slices of sizes ``sizes`` of the
    flat ``x``.

    Static slices and one reduction each: no ``[N]`` segment-id tensor, which XLA would
    constant-fold at compile time (a minute for 4M elements) and which on CPU makes
    ``unsorted_segment_sum`` and ``gather`` several times slower than slicing.
    """
    return tf.stack([tf.reduce_sum(part) for part in tf.split(x, list(sizes))])


def _per_element(values: tf.Tensor, sizes: Sequence[int]) -> tf.Tensor:
    """``[N]``: ``values[i]`` repeated ``sizes[i]`` times, by static broadcasts."""
    return tf.concat(
        [tf.broadcast_to(v, [size]) for v, size in zip(tf.unstack(values, num=len(sizes)), sizes)],
        0,
    )


def gsnr_factors_flat(
    s1: tf.Tensor,
    s2: tf.Tensor,
    sizes: Sequence[int],
    num_replicas: int,
    gamma: float,
    *,
    squares_dtype: str = "float32",
) -> Tuple[tf.Tensor, tf.Tensor]:
    """The VRGD factors of ``n`` variables packed in one flat buffer (eqs. 7 to 9).

    The element-wise math runs once over all elements; the per-variable means are sums over
    static slices. Pure math, no collective: usable inside
    ``tf.function(jit_compile=True)``.

    Args:
      s1: float32 tensor ``[N]``: ``sum_d x_d`` over the ``num_replicas`` replicas, the
        variables' flattened gradients concatenated, ``N = sum(sizes)``.
      s2: float32 tensor ``[N]``: ``sum_d x_d**2``, packed the same way.
      sizes: Python ints, the number of elements of each of the ``n`` variables.
      num_replicas: Python int >= 2, the number ``k`` of replicas summed.
      gamma: Python float in (0, 1], the lower bound of the factor.
      squares_dtype: ``"float32"`` or ``"bfloat16"``: the dtype ``s2`` was all-reduced in
        (it is float32 here either way); selects the noise threshold,
        :data:`NOISE_RTOL` or :data:`NOISE_RTOL_BFLOAT16`.

    Returns:
      ``(factor, stats)``: ``factor`` is float32 ``[N]`` with values in ``[gamma, 1]`` and
      exactly 1 wherever the GSNR is undefined; ``stats`` is float32
      ``[n, NUM_STATISTICS]``, one :class:`GSNRStatistics` row per variable (its
      ``mean_factor`` is the mean of ``factor`` and its ``norm_ratio``
      ``||factor * s1|| / ||s1||``: no smoothing here).
    """
    factor, _, make_statistics = _factors(
        s1, s2, sizes, num_replicas, gamma, rtol=noise_rtol(validate_squares_dtype(squares_dtype))
    )
    return factor, make_statistics(factor)


def _factors(
    s1, s2, sizes, num_replicas, gamma, *, stat_sizes=None, rtol=NOISE_RTOL
) -> Tuple[tf.Tensor, tf.Tensor, Callable[..., tf.Tensor]]:
    """:func:`gsnr_factors_flat`, with the diagnostics as a callable (for a ``tf.cond``).
    Needs ``s1`` finite (the callers record only steps with a finite ``s1``).

    Returns ``(factor, num_defined, make_statistics)``: ``num_defined`` is float32 ``[n]``,
    the number of elements of each variable with a defined GSNR;
    ``make_statistics(applied, extra=None)`` takes the factor actually applied (``[N]``,
    after any smoothing) and returns the ``[n, NUM_STATISTICS]`` diagnostics. The fractions
    are over ``stat_sizes`` elements per variable (default ``sizes``); ``extra``, float32
    ``[n, 2]``, is added to the per-variable counts of elements at factor 1 and sums of the
    applied factor: the elements a sparse variable's slots do not hold (see
    ``_sparse_statistics``).
    """
    k = float(num_replicas)
    # In units of k: signal = S1**2 / k = k m**2 and noise = S2 - S1**2 / k = k s2, so
    # r = signal / noise, and "s2 > rtol * k * mean(x**2)" is noise > rtol * k * S2 (rtol:
    # NOISE_RTOL, or NOISE_RTOL_BFLOAT16 for squares all-reduced in bfloat16).
    # The comparison is False for NaN and for an overflowed square or S2 (noise -Inf, NaN or
    # +Inf > +Inf), so it is also the finiteness test: one pass fewer per element.
    signal = tf.square(s1) * (1.0 / k)
    noise = s2 - signal
    defined = noise > (rtol * k) * s2
    # Where undefined, divide by 1 instead, so no Inf or NaN is ever formed.
    ratio = tf.where(defined, signal / tf.where(defined, noise, 1.0), 0.0)

    num_defined = _sum_per_variable(tf.cast(defined, tf.float32), sizes)
    mean_ratio = tf.math.divide_no_nan(_sum_per_variable(ratio, sizes), num_defined)
    usable = (mean_ratio > 0.0) & tf.math.is_finite(mean_ratio)
    safe_mean_ratio = tf.where(usable, mean_ratio, tf.ones_like(mean_ratio))

    normalised = ratio / _per_element(safe_mean_ratio, sizes)
    use = defined & _per_element(usable, sizes)
    # A scalar 1.0, not ones_like: no tensor of N ones is made.
    factor = tf.where(use, tf.clip_by_value(normalised, gamma, 1.0), 1.0)

    # make_statistics reads only s1, the factor and per-variable values, so that nothing
    # else of size N (signal, normalised, use) stays alive until the diagnostics run: the
    # caller's smoothing runs in between, and every such tensor costs 4 N bytes per replica
    # at the step's peak (docs/results.md, BERT-tiny memory by part).
    def make_statistics(applied, extra=None):
        full = sizes if stat_sizes is None else stat_sizes
        size_f = tf.constant(np.maximum(np.asarray(full, np.float32), 1.0))
        signal = tf.square(s1) * (1.0 / k)  # as above, recomputed
        at_one_sum = _sum_per_variable(tf.cast(factor >= 1.0, tf.float32), sizes)
        applied_sum = _sum_per_variable(applied, sizes)
        if extra is not None:
            at_one_sum, applied_sum = at_one_sum + extra[:, 0], applied_sum + extra[:, 1]

        # ||applied * S1|| / ||S1|| per variable, from signal = S1**2 / k (k cancels): two
        # passes. Only if a sum overflows (|S1| above ~1e19) or is below 1e-30 (it may have
        # underflowed: |S1| below ~1e-19, or S1 = 0) is S1 first divided by its largest
        # magnitude in the variable (a scale that cancels). A sparse variable's untouched
        # rows have S1 = 0 and add nothing to either norm.
        def scaled_sums():
            peak = tf.stack([tf.reduce_max(tf.abs(part)) for part in tf.split(s1, list(sizes))])
            scaled = s1 / _per_element(tf.where(peak > 0.0, peak, 1.0), sizes)
            return (
                _sum_per_variable(tf.square(scaled), sizes),
                _sum_per_variable(tf.square(applied * scaled), sizes),
            )

        plain = _sum_per_variable(signal, sizes)
        reduced = _sum_per_variable(tf.square(applied) * signal, sizes)
        plain, reduced = tf.cond(
            tf.reduce_all(tf.math.is_finite(plain) & (plain > 1e-30)),
            lambda: (plain, reduced),
            scaled_sums,
        )
        norm_ratio = tf.where(
            plain > 0.0, tf.sqrt(reduced / tf.where(plain > 0.0, plain, 1.0)), 1.0
        )
        # factor <= gamma exactly where use & (normalised <= gamma): the clip gives gamma
        # there, more than gamma elsewhere and 1 where not used (gamma < 1).
        at_gamma = tf.cast(factor <= gamma, tf.float32) if gamma < 1.0 else tf.zeros_like(factor)
        return tf.stack(
            [
                mean_ratio,
                _sum_per_variable(at_gamma, sizes) / size_f,
                at_one_sum / size_f,
                applied_sum / size_f,
                tf.minimum(norm_ratio, 1.0),
            ],
            axis=1,
        )

    return factor, num_defined, make_statistics


def gsnr_factor(
    s1: tf.Tensor, s2: tf.Tensor, num_replicas: int, gamma: float
) -> Tuple[tf.Tensor, GSNRStatistics]:
    """The VRGD factor of one variable from its cross-replica sums (eqs. 7 to 9).

    :func:`gsnr_factors_flat` for a single variable.

    Args:
      s1: float32 tensor, any static shape: ``sum_d x_d`` over the ``num_replicas`` replicas.
      s2: float32 tensor, same shape: ``sum_d x_d**2``.
      num_replicas: Python int >= 2, the number ``k`` of replicas summed.
      gamma: Python float in (0, 1], the lower bound of the factor.

    Returns:
      ``(factor, stats)``: ``factor`` is float32 of the shape of ``s1``, with values in
      ``[gamma, 1]`` and exactly 1 wherever the GSNR is undefined; ``stats`` is a
      :class:`GSNRStatistics`.
    """
    factor, stats = gsnr_factors_flat(
        tf.reshape(s1, [-1]), tf.reshape(s2, [-1]), _sizes([s1]), num_replicas, gamma
    )
    return tf.reshape(factor, tf.shape(s1)), GSNRStatistics(*tf.unstack(stats[0]))


def _next_correction(correction, beta_3):
    """``c_t = beta_3 * c_{t-1} + (1 - beta_3)``, i.e. ``1 - beta_3**t`` (the EMA of 1)."""
    return beta_3 * correction + (1.0 - beta_3)


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
    new_correction = _next_correction(correction, beta_3)
    p_hat, new_deficit = _smooth(factor, deficit, new_correction, beta_3, gamma)
    return p_hat, new_deficit, new_correction


def _smooth(factor, deficit, new_correction, beta_3, gamma):
    """:func:`smooth_factor` given ``c_t`` (``new_correction``, broadcastable to
    ``factor``): returns ``(p_hat_t, d_t)``."""
    new_deficit = beta_3 * deficit + (1.0 - beta_3) * (1.0 - factor)
    p_hat = 1.0 - new_deficit / new_correction
    # p_hat is a weighted mean of values in [gamma, 1]; clipping only removes rounding.
    return tf.clip_by_value(p_hat, gamma, 1.0), new_deficit


class VRGDState:
    """The per-variable state of VRGD, created by the optimizer's ``build``.

    Per trainable variable: ``deficit`` (float32, the variable's shape; only if
    ``beta_3 > 0``), ``correction`` (float32 scalar; only if ``beta_3 > 0``) and
    ``statistics`` (float32, shape ``[NUM_STATISTICS]``: see :class:`GSNRStatistics`).

    All of them are replica-local (``synchronization=ON_READ``,
    ``aggregation=ONLY_FIRST_REPLICA``): every replica computes the same values from the
    same all-reduced sums and writes its own copy in the replica context, with no merge call
    or extra communication. Reads in the cross-replica context and checkpoints take the
    first replica's copy; a restore writes every copy.

    Args:
      make_variable: ``fn(kind, index, shape, reference_variable) -> variable`` that creates
        a float32, zero-initialised, non-trainable, ON_READ / ONLY_FIRST_REPLICA variable
        tracked by the optimizer; ``kind`` is ``"statistics"``, ``"deficit"`` or
        ``"correction"`` and ``index`` the variable's position. Supplied by each family.
      var_key: ``fn(variable) -> hashable`` identifying a trainable variable, the same key
        the optimizer family uses for its slots.
      beta_3: Python float in [0, 1).
    """

    def __init__(self, make_variable: Callable, var_key: Callable, beta_3: float):
        self._make_variable = make_variable
        self._var_key = var_key
        self._beta_3 = beta_3
        self._index = {}
        self.deficits: List = []
        self.corrections: List = []
        self.statistics: List = []
        self.variable_names: List[str] = []

    def add_variables(self, variables: Sequence) -> None:
        """Creates the state of the variables not seen before, in the given order."""
        for var in variables:
            key = self._var_key(var)
            if key in self._index:
                continue
            i = len(self.variable_names)
            self._index[key] = i
            self.variable_names.append(naming.variable_name(var))
            self.statistics.append(self._make_variable("statistics", i, [NUM_STATISTICS], var))
            if self._beta_3 > 0.0:
                self.deficits.append(self._make_variable("deficit", i, var.shape, var))
                self.corrections.append(self._make_variable("correction", i, [], var))

    def __contains__(self, variable) -> bool:
        """Whether ``variable`` has state here."""
        return self._var_key(variable) in self._index

    def index(self, variable) -> int:
        """Position of ``variable`` in the lists of state; KeyError if unknown."""
        return self._index[self._var_key(variable)]


def sum_with_squares(
    grads: Sequence,
    *,
    replica_context,
    sq_sums: Optional[Sequence] = None,
    squares_dtype: str = "float32",
):
    """VRGD's collective: all-reduces (SUM) the packed gradients, then their squares.

    Two ``replica_context.all_reduce`` calls: the first carries the float32 buffer
    ``[x_1 .. x_n]`` of shape ``[N]`` (``x`` the flattened dense gradients, 4 N bytes) and,
    for the ``tf.IndexedSlices`` gradients, the strategy's own sparse SUM of their rows; the
    second the squares ``[q_1 .. q_n]`` (``q = x**2`` or the given ``sq_sums``), in float32
    (4 N bytes) or, with ``squares_dtype="bfloat16"``, rounded to bfloat16 (2 N bytes),
    summed in that dtype and returned as float32. The gradient sums are float32 and as exact
    as without VRGD either way.

    Args:
      grads: list of ``n`` gradients (``tf.Tensor`` or ``tf.IndexedSlices``, static shapes),
        none of them None.
      replica_context: the ``tf.distribute.ReplicaContext`` to all-reduce in.
      sq_sums: None, or ``n`` dense tensors of the gradients' shapes (see
        :func:`variance_reduce`).
      squares_dtype: ``"float32"`` or ``"bfloat16"``, the dtype the squares travel in.

    Returns:
      ``(s1, s2, sizes, dense, sparse_sums)``: float32 ``[N]`` sums of ``x`` and of ``q``;
      the ``n`` element counts; the dense gradients; the all-reduced sparse gradients, in
      the order they appear in ``grads``.

    Raises:
      ValueError: a gradient without a static shape, or ``sq_sums`` of other shapes.
    """
    dense = [dense_gradient(g) for g in grads]
    sizes = _sizes(dense)
    total = sum(sizes)
    flat = tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) for g in dense], 0)
    if sq_sums is None:
        squares = tf.square(flat)
    else:
        squares = tf.concat([tf.reshape(tf.cast(q, tf.float32), [-1]) for q in sq_sums], 0)
        if squares.shape.num_elements() != total:
            raise ValueError(
                f"`sq_sums` must have the gradients' shapes ({total} elements "
                f"in all); got {squares.shape.num_elements()}."
            )
    wire = tf.bfloat16 if validate_squares_dtype(squares_dtype) == "bfloat16" else tf.float32
    sparse = [g for g in grads if isinstance(g, tf.IndexedSlices)]
    if sparse:
        reduced = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, [flat] + sparse)
        sums, sparse_sums = reduced[0], list(reduced[1:])
    else:
        sums, sparse_sums = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, flat), []
    # The squares in a call of their own: MultiWorkerMirroredStrategy concatenates the dense
    # tensors of one call into one buffer (which needs a single dtype), and over its RING
    # collective one 8 N-byte buffer took twice as long as two 4 N-byte calls
    # (docs/results.md, loopback rows). The sums are the same either way.
    sq = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(squares, wire))
    return sums, tf.cast(sq, tf.float32), sizes, dense, sparse_sums


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
    """

    index: int
    variable: object
    summed: tf.Tensor
    summed_squares: tf.Tensor
    num_samples: int
    step: object


def _transform_factors(transforms, factor, s1, s2, sizes, order, variables, k, step):
    """The flat ``[N]`` factor after each variable's part passed through ``transforms``."""
    parts = []
    for j, f, a, b, size in zip(
        order, tf.split(factor, sizes), tf.split(s1, sizes), tf.split(s2, sizes), sizes
    ):
        context = FactorContext(j, variables[j], a, b, k, step)
        for transform in transforms:
            f = tf.reshape(tf.cast(transform(f, context), tf.float32), [size])
        parts.append(f)
    return tf.concat(parts, 0)


def variance_reduce(
    grads: Sequence,
    variables: Sequence,
    *,
    gamma: float,
    beta_3: float,
    state: Optional[VRGDState],
    replica_context: Optional[tf.distribute.ReplicaContext] = None,
    warn_single_replica: Optional[Callable[[], None]] = None,
    warn_inert: Optional[Callable[[tf.Tensor], None]] = None,
    record_statistics=True,
    sq_sums: Optional[Sequence] = None,
    num_groups: int = 1,
    squares_dtype: str = "float32",
    factor_transforms: Sequence[Callable] = (),
    step=None,
) -> List:
    """All-reduces gradients with their squares and returns the variance-reduced gradients.

    Call in the replica context, where the base optimizer would all-reduce (SUM) its
    gradients. Each of the ``R`` replicas in sync may hold ``m = num_groups`` GSNR samples
    (micro-batch groups): ``grads`` is then the sum of its groups' gradients and
    ``sq_sums`` the sum of their element-wise squares, and ``k = R * m``. With ``m = 1``
    (``sq_sums`` None) the squares are taken here. It makes two
    ``replica_context.all_reduce(SUM, ...)`` calls (:func:`sum_with_squares`, if any
    gradient takes them), over the float32 ``[N]`` gradients ``[x_1 .. x_n]`` flattened and
    packed (``N`` = total elements of the dense gradients) and over their squares (float32,
    or bfloat16 with ``squares_dtype="bfloat16"``) and, if ``sq_sums`` is None and there are
    ``tf.IndexedSlices`` gradients with a static number of indices, exactly one
    ``replica_context.all_gather(..., axis=0)`` call over their indices and their rows
    packed with squares (``[R * m_i]`` and ``[R * m_i, 2 w_i]`` float32 for ``m_i`` rows of
    width ``w_i``; ``_sparse_statistics``): their statistics are computed on the union of
    the touched rows only, numerically those of their dense form. Otherwise (micro-batch
    groups, indices of unknown length) a sparse gradient is made dense for the statistics and
    its rows go into the first all-reduce call as the strategy's sparse SUM. float64 dense
    gradients are also all-reduced in float64 (one more call, only if there are any), so
    that the output is ``factor * S1`` with ``S1`` exactly the base's sum. It
    computes the factors of all variables at once (:func:`gsnr_factors_flat`), smooths them
    if ``beta_3 > 0`` (:func:`smooth_factor`), records the diagnostics in ``state`` if
    ``record_statistics`` and returns ``u = factor * S1``. If any summed gradient is not
    finite, the state is left as it was (the loss-scale optimizers skip such a step) and the
    non-finite values pass through to the caller.

    Args:
      grads: list of ``n`` per-replica gradients, ``tf.Tensor`` or ``tf.IndexedSlices``
        (made dense for the statistics, see :func:`dense_gradient`), any float dtype, none
        of them None.
      variables: the ``n`` matching trainable variables.
      gamma: Python float in (0, 1].
      beta_3: Python float in [0, 1).
      state: the optimizer's :class:`VRGDState` (may be None only if ``k == 1``).
      replica_context: defaults to ``tf.distribute.get_replica_context()``.
      warn_single_replica: called (at trace time) when ``k == 1``.
      warn_inert: called (at trace time, ``k >= 2`` only) with a scalar bool tensor that is
        True on a step whose gradients are all finite but where no element of any variable
        has a defined GSNR, i.e. every replica sent the same (or an all-zero) gradient and
        the step equals the base optimizer's. The caller turns it into a warning.
      record_statistics: Python bool or scalar bool tensor: whether this step computes and
        stores the diagnostics (the two extra per-variable reductions run inside a
        ``tf.cond``, so steps that do not record skip them).
      sq_sums: None, or a list of ``n`` dense tensors of the variables' shapes (any float
        dtype, summed in float32): this replica's ``sum_j x_j**2`` over its ``num_groups``
        micro-batch gradients ``x_j`` (``grads`` being ``sum_j x_j``; for a sparse
        gradient, the squares of each group's dense form). Required when
        ``num_groups > 1``.
      num_groups: Python int >= 1, the number ``m`` of micro-batch groups per replica.
      squares_dtype: ``"float32"`` (default) or ``"bfloat16"``: the dtype the squares are
        all-reduced in (see :func:`sum_with_squares`; the gradients are float32 either
        way). bfloat16 saves N * 2 bytes per step on the wire and selects the noise
        threshold :data:`NOISE_RTOL_BFLOAT16`.
      factor_transforms: sequence of ``fn(factor, context) -> factor`` (see
        :class:`FactorContext`), applied in order to each variable's flat float32 factor
        (``[size]``; on the sparse path, its touched rows' slots) after any smoothing,
        before the diagnostics and before it multiplies ``S1``. Each must return float32
        of the same shape and give the same result on every replica (no unseeded random
        ops; e.g. stateless ops seeded by ``context.step``). Default none.
      step: None or a scalar int tensor, the steps completed before this one; handed to
        the factor transforms as ``context.step``.

    Returns:
      List of ``n`` tensors, each of its gradient's dtype and dense shape: the SUM over
      replicas (``k == 1``: the gradients themselves, unchanged) multiplied by the factor.
      A ``tf.IndexedSlices`` gradient gives what MirroredStrategy's own SUM gives for it, an
      ``IndexedSlices`` of every replica's rows in replica order, duplicates kept (the same
      rows on every replica count; on the dense-statistics path, whatever the strategy's SUM
      gives), with each row multiplied by its factor row, so the
      base optimizer applies its own sparse rule whatever the number of replicas, and
      ``gamma=1, beta_3=0`` hands it exactly what it would get without VRGD. The statistics
      of a sparse gradient are those of its dense form (duplicate rows summed per replica).

    Raises:
      RuntimeError: called in a cross-replica context.
      ValueError: a gradient without a static shape, ``num_groups`` < 1, ``sq_sums``
        missing (``num_groups > 1``) or not matching ``grads``, or ``squares_dtype`` not
        one of :data:`SQUARES_DTYPES`.
    """
    ctx = replica_context or tf.distribute.get_replica_context()
    if ctx is None:
        raise RuntimeError(
            "vrgd_tf.gsnr.variance_reduce must be called in a replica context "
            "(inside `strategy.run` or `model.fit`), not in a cross-replica "
            "context."
        )
    grads = list(grads)
    squares_dtype = validate_squares_dtype(squares_dtype)
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ValueError(f"`num_groups` must be an int >= 1; got {num_groups!r}.")
    if num_groups > 1 and sq_sums is None:
        raise ValueError(
            f"`sq_sums` (the sums of squares of the {num_groups} micro-batch "
            "gradients) is required when `num_groups` > 1."
        )
    if sq_sums is not None and len(sq_sums) != len(grads):
        raise ValueError(
            f"`sq_sums` must hold one tensor per gradient: got "
            f"{len(sq_sums)} for {len(grads)} gradients."
        )
    k = ctx.num_replicas_in_sync * num_groups
    if k == 1:
        if warn_single_replica is not None:
            warn_single_replica()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads) if grads else []
    if not grads:
        return []
    n = len(grads)
    on_sparse_path = [
        sq_sums is None and _sparse_path_applies(g, v) for g, v in zip(grads, variables)
    ]
    dense_at = [i for i in range(n) if not on_sparse_path[i]]
    sparse_at = [i for i in range(n) if on_sparse_path[i]]
    order = dense_at + sparse_at  # packing order: dense variables first
    if dense_at:
        s1, s2, sizes, dense, sparse_sums = sum_with_squares(
            [grads[i] for i in dense_at],
            sq_sums=None if sq_sums is None else [sq_sums[i] for i in dense_at],
            replica_context=ctx,
            squares_dtype=squares_dtype,
        )
    else:
        s1 = s2 = tf.zeros([0], tf.float32)
        sizes, dense, sparse_sums = [], [], []
    rows = _sparse_statistics([grads[i] for i in sparse_at], [variables[i] for i in sparse_at], ctx)
    stat_sizes = list(sizes) + [r.full_size for r in rows]
    sizes = list(sizes) + [r.slot_size for r in rows]
    if rows:
        s1 = tf.concat([s1] + [r.s1 for r in rows], 0)
        s2 = tf.concat([s2] + [r.s2 for r in rows], 0)
    sparse_sums = iter(sparse_sums)
    rtol = noise_rtol(squares_dtype)
    if rows and squares_dtype != "float32":  # the gathered rows are float32: their threshold
        rtol = _per_element(
            tf.constant([rtol] * (len(sizes) - len(rows)) + [NOISE_RTOL] * len(rows)), sizes
        )
    factor, num_defined, make_statistics = _factors(
        s1, s2, sizes, k, gamma, stat_sizes=stat_sizes, rtol=rtol
    )

    # A step with a non-finite gradient is skipped by the loss-scale optimizers; the same
    # all-reduced test on every replica keeps the VRGD state untouched on such a step.
    all_finite = tf.reduce_all(tf.math.is_finite(s1))
    if warn_inert is not None:
        warn_inert(tf.logical_and(all_finite, tf.equal(tf.reduce_sum(num_defined), 0.0)))
    index = [state.index(variables[i]) for i in order]
    num_dense = len(dense_at)
    new_correction = None
    if beta_3 > 0.0:
        old_parts = [tf.reshape(state.deficits[j], [-1]) for j in index[:num_dense]]
        old_parts += [r.gather_rows(state.deficits[j]) for r, j in zip(rows, index[num_dense:])]
        old_deficit = tf.concat(old_parts, 0)
        old_correction = tf.stack([tf.convert_to_tensor(state.corrections[j]) for j in index])
        # c_t per variable, then one [N] broadcast of it (the values smooth_factor gives).
        new_correction = _next_correction(old_correction, beta_3)
        factor, new_deficit = _smooth(
            factor, old_deficit, _per_element(new_correction, sizes), beta_3, gamma
        )

        def store():
            parts = tf.split(new_deficit, sizes)
            for j, part in zip(index[:num_dense], parts):
                state.deficits[j].assign(tf.reshape(part, state.deficits[j].shape))
            for r, j, part in zip(rows, index[num_dense:], parts[num_dense:]):
                r.update_rows(state.deficits[j], part, beta_3)
            for j, c in zip(index, tf.unstack(new_correction)):
                state.corrections[j].assign(c)
            return tf.constant(True)

        # Kept as it was on a step with a non-finite sum: a branch, not a select between
        # the new and the old deficit (which would keep a third [N] tensor alive).
        tf.cond(all_finite, store, lambda: tf.constant(False))

    if factor_transforms:
        factor = _transform_factors(
            factor_transforms, factor, s1, s2, sizes, order, variables, k, step
        )

    def record():
        extra = None
        if rows:
            extra = [tf.zeros([2]) for _ in range(num_dense)]
            for i, (r, j) in enumerate(zip(rows, index[num_dense:])):
                if beta_3 > 0.0:
                    extra.append(
                        r.untouched_statistics(state.deficits[j], new_correction[num_dense + i])
                    )
                else:
                    extra.append(r.untouched_statistics(None, None))
            extra = tf.stack(extra)
        stats = make_statistics(factor, extra)
        for j, row in zip(index, tf.unstack(stats, num=len(index))):
            state.statistics[j].assign(row)
        return tf.constant(True)

    if record_statistics is True:
        tf.cond(all_finite, record, lambda: tf.constant(False))
    elif record_statistics is not False:
        tf.cond(tf.logical_and(all_finite, record_statistics), record, lambda: tf.constant(False))

    out = [None] * n
    factors, s1_parts = tf.split(factor, sizes), tf.split(s1, sizes)
    # float64 gradients are also summed in float64, so that S1 is exactly the base's sum (a
    # finite float64 value beyond float32's range stays finite); the factor comes from the
    # float32 statistics.
    wide = [
        i
        for i, (g, d) in enumerate(zip([grads[j] for j in dense_at], dense))
        if not isinstance(g, tf.IndexedSlices) and d.dtype == tf.float64
    ]
    wide_sums = {}
    if wide:
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [dense[i] for i in wide])
        wide_sums = dict(zip(wide, reduced))
    for i, (pos, g, d, f, part) in enumerate(
        zip(dense_at, [grads[j] for j in dense_at], dense, factors, s1_parts)
    ):
        f = tf.reshape(f, tf.shape(d))
        if isinstance(g, tf.IndexedSlices):
            out[pos] = _scale_rows(next(sparse_sums), f)
        elif i in wide_sums:
            out[pos] = tf.cast(f, tf.float64) * wide_sums[i]
        else:
            out[pos] = tf.cast(f * tf.reshape(part, tf.shape(d)), d.dtype)
    for pos, r, f in zip(sparse_at, rows, factors[num_dense:]):
        out[pos] = r.output(f)
    return out


def _sparse_path_applies(grad, variable) -> bool:
    """Whether ``grad`` takes the sparse statistics (``_sparse_statistics``): a
    ``tf.IndexedSlices`` with a static number (>= 1) of rank-1 indices and static row
    shape, for a variable of static shape."""
    if not isinstance(grad, tf.IndexedSlices):
        return False
    shape = tf.TensorShape(variable.shape)
    return (
        shape.rank is not None
        and shape.rank >= 1
        and shape.is_fully_defined()
        and grad.indices.shape.rank == 1
        and grad.indices.shape[0] is not None
        and grad.indices.shape[0] >= 1
        and grad.values.shape[1:].is_fully_defined()
        and grad.values.shape[1:].num_elements() == shape[1:].num_elements()
    )


def _unique_rows(indices, values, sentinel):
    """Sums the rows of ``values`` with equal ``indices``, static shapes throughout.

    Args:
      indices: int tensor ``[m]`` (static ``m``), values in ``[0, sentinel)``.
      values: float32 ``[m, w]``.
      sentinel: Python int, the index that marks an empty slot.

    Returns:
      ``(unique, summed, slot, first)``: ``unique`` ``[m]`` and ``summed`` ``[m, w]``: slot
      ``s`` holds the ``s``-th smallest distinct index and the sum of its rows, in the order
      they appear in ``indices`` (``unsorted_segment_sum``), and the slots after the last
      distinct index hold ``sentinel`` and zeros; ``slot`` ``[m]`` int32, the slot of each
      input row; ``first`` ``[m]`` bool, whether the row is its index's first occurrence. A
      stable sort and a cumulative sum instead of ``tf.unique``, so that no shape depends on
      the data (XLA, TPU).
    """
    m = indices.shape[0]
    order = tf.argsort(indices, stable=True)
    in_order = tf.gather(indices, order)
    first_in_order = tf.concat([tf.ones([1], tf.bool), in_order[1:] != in_order[:-1]], 0)
    slot_in_order = tf.cumsum(tf.cast(first_in_order, tf.int32)) - 1
    slot = tf.scatter_nd(order[:, None], slot_in_order, [m])
    first = tf.scatter_nd(order[:, None], tf.cast(first_in_order, tf.int32), [m]) > 0
    summed = tf.math.unsorted_segment_sum(values, slot, m)
    unique = tf.math.unsorted_segment_max(in_order, slot_in_order, m)
    used = tf.range(m) <= slot_in_order[-1]
    unique = tf.where(used, unique, tf.constant(sentinel, indices.dtype))
    return unique, summed, slot, first


@dataclasses.dataclass
class _SparseRows:
    """The cross-replica statistics of one sparse gradient on the union of its rows.

    ``indices`` ``[M]`` (``M = R * m``: replicas times the static rows per replica) holds
    the rows touched on any replica, ascending, then ``num_rows`` in empty slots; ``s1``,
    ``s2`` are float32 ``[M * width]``: the sums over replicas of each replica's row
    (duplicates summed per replica) and of its square, zero in empty slots (undefined GSNR,
    factor 1, as rows no replica touched on the dense path). ``gathered_indices`` ``[M]``,
    ``gathered_values`` float32 ``[M, width]`` and ``gathered_slot`` ``[M]`` are every
    replica's rows as the replicas sent them (what the strategy's sparse SUM gathers) and
    the slot of each.
    """

    indices: tf.Tensor
    s1: tf.Tensor
    s2: tf.Tensor
    gathered_indices: tf.Tensor
    gathered_values: tf.Tensor
    gathered_slot: tf.Tensor
    width: int
    num_rows: int
    row_shape: tf.TensorShape
    dtype: tf.DType
    dense_shape: object

    @property
    def slot_size(self) -> int:
        return int(self.indices.shape[0]) * self.width

    @property
    def full_size(self) -> int:
        return self.num_rows * self.width

    @property
    def valid(self) -> tf.Tensor:
        return self.indices < self.num_rows

    def _safe_indices(self):
        """The indices with empty slots pointing at slot 0's row (always a touched row)."""
        return tf.where(self.valid, self.indices, self.indices[0])

    def gather_rows(self, deficit) -> tf.Tensor:
        """float32 ``[M * width]``: the slots' rows of ``deficit``; 0 in empty slots."""
        got = tf.reshape(tf.gather(deficit, self._safe_indices()), [-1, self.width])
        return tf.reshape(tf.where(self.valid[:, None], got, 0.0), [-1])

    def update_rows(self, deficit, new_rows, decay) -> None:
        """``deficit *= decay`` (rows no replica touched: ``d_t = beta_3 d_{t-1}``, what the
        dense path's factor 1 gives), then the touched rows set to ``new_rows``.

        The decay is a dense ``assign`` (one transient tensor of the variable's shape per
        replica outside XLA; XLA updates in place). An in-place ``ResourceScatterMul`` of
        every row by the scalar saves that tensor but was 3 to 5 times slower on CPU (1M x
        32 rows: 115-140 ms against 21-93 ms, peak RSS 884 against 984 MB), and a lazy
        per-row decay needs a per-row step counter (new state); see the benchmark notes.
        """
        deficit.assign(deficit * decay)
        rows = tf.reshape(new_rows, [-1, self.width])
        rows = tf.where(self.valid[:, None], rows, rows[:1])  # empty slots repeat slot 0
        rows = tf.reshape(rows, [-1] + self.row_shape.as_list())
        tf.raw_ops.ResourceScatterUpdate(
            resource=deficit.handle, indices=self._safe_indices(), updates=rows
        )

    def untouched_statistics(self, deficit, correction) -> tf.Tensor:
        """float32 ``[2]``: what the rows outside the slots add to the count of elements at
        factor 1 and to the sum of the applied factor (the dense path's values for them:
        factor 1, and ``1 - d_t / c_t`` if ``beta_3 > 0``). Empty slots already count as 1
        in both, hence ``num_rows - M`` rows (may be negative) and the deficit sums."""
        missing = tf.constant(float(self.full_size - self.slot_size))
        applied = missing
        if deficit is not None:
            touched = tf.reduce_sum(self.gather_rows(deficit))
            untouched = tf.reduce_sum(tf.convert_to_tensor(deficit)) - touched
            applied = applied - untouched / correction
        return tf.stack([missing, applied])

    def output(self, factor) -> tf.IndexedSlices:
        """Every replica's rows, as the strategy's sparse SUM gathers them, each times its
        row's factor (``factor``: float32 ``[M * width]``, per slot), in the gradient's
        dtype. With factor 1 it is exactly what the base optimizer gets without VRGD."""
        rows = tf.gather(tf.reshape(factor, [-1, self.width]), self.gathered_slot)
        values = tf.cast(self.gathered_values * rows, self.dtype)
        values = tf.reshape(values, [-1] + self.row_shape.as_list())
        return tf.IndexedSlices(values, self.gathered_indices, self.dense_shape)


def _sparse_statistics(grads, variables, replica_context) -> List[_SparseRows]:
    """Exact GSNR sums of sparse gradients on the rows some replica touched.

    Per replica, each row keeps its values and carries the square of its index's summed
    rows at the index's first occurrence (zeros at the others; :func:`_unique_rows`). One
    ``replica_context.all_gather`` call (axis 0) gathers, for all of ``grads`` at once, the
    indices ``[R * m]`` and the float32 rows packed with those squares ``[R * m, 2 width]``
    (``m`` the static rows per replica); the union of the indices (another
    :func:`_unique_rows`) sums them per row. Rows no replica touched never appear: nothing
    of the variable's dense shape is formed. These are the dense path's ``S1`` and ``S2``
    on those rows (float32 sums in the same order).

    Args:
      grads: ``tf.IndexedSlices`` for which :func:`_sparse_path_applies` holds.
      variables: their variables.
      replica_context: the ``tf.distribute.ReplicaContext``.

    Returns:
      One :class:`_SparseRows` per gradient.
    """
    if not grads:
        return []
    local = []
    metas = []
    for g, v in zip(grads, variables):
        shape = tf.TensorShape(v.shape)
        num_rows, row_shape = int(shape[0]), shape[1:]
        width = max(int(row_shape.num_elements()), 1)
        values = tf.reshape(tf.cast(g.values, tf.float32), [-1, width])
        _, summed, slot, first = _unique_rows(g.indices, values, num_rows)
        squares = tf.where(first[:, None], tf.gather(tf.square(summed), slot), 0.0)
        local += [g.indices, tf.concat([values, squares], 1)]
        dense_shape = g.dense_shape if g.dense_shape is not None else shape.as_list()
        metas.append((width, num_rows, row_shape, g.values.dtype, dense_shape))
    gathered = replica_context.all_gather(local, axis=0)
    out = []
    for i, (width, num_rows, row_shape, dtype, dense_shape) in enumerate(metas):
        indices, packed = gathered[2 * i], gathered[2 * i + 1]
        unique, summed, slot, _ = _unique_rows(indices, packed, num_rows)
        out.append(
            _SparseRows(
                indices=unique,
                s1=tf.reshape(summed[:, :width], [-1]),
                s2=tf.reshape(summed[:, width:], [-1]),
                gathered_indices=indices,
                gathered_values=packed[:, :width],
                gathered_slot=slot,
                width=width,
                num_rows=num_rows,
                row_shape=row_shape,
                dtype=dtype,
                dense_shape=dense_shape,
            )
        )
    return out


def _scale_rows(summed, factor):
    """``factor * summed`` for the all-reduced sum of a sparse gradient.

    Args:
      summed: what the strategy's SUM of a ``tf.IndexedSlices`` gave: ``tf.IndexedSlices``
        (MirroredStrategy gathers every replica's rows, duplicates kept) or a dense tensor.
      factor: float32, the variable's dense shape.

    Returns:
      The same kind as ``summed``, its dtype; every row multiplied by its factor row.
    """
    if isinstance(summed, tf.IndexedSlices):
        rows = tf.gather(factor, summed.indices)
        values = tf.cast(tf.cast(summed.values, tf.float32) * rows, summed.values.dtype)
        return tf.IndexedSlices(values, summed.indices, summed.dense_shape)
    return tf.cast(factor * tf.cast(summed, tf.float32), summed.dtype)
