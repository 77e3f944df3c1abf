"""Split-half reliability of the GSNR: is a step's per-element GSNR a property of the
elements, or noise? (``docs/spec.md``, section 4, "Split-half reliability of the GSNR".)

VRGD scales each element's step by a function of its GSNR. That is only useful if the GSNR
measured from the step's k samples (replicas x micro-batch groups) says something stable
about the elements. The test: split the k samples into two fixed halves A (``k_a``
samples) and B (``k - k_a``), compute each half's GSNR per element from its own sums, and
correlate the two halves over the elements of each variable. Two disjoint halves share
nothing but what the elements themselves carry, so under pure noise (every element's mean
gradient 0) the correlation is near 0 (within about ``1 / sqrt(elements)``); where each
element has its own, fixed signal-to-noise ratio it approaches 1 as the halves' estimates
get precise. The Spearman-Brown correction turns the halves' correlation ``rho`` into the
reliability of the full-k measurement, ``2 rho / (1 + rho)``.

Inputs are the cross-sample sums the step already has (spec section 1): the totals
``S1 = sum_j x_j`` and ``S2 = sum_j x_j**2`` over all k samples and half A's ``S1_A``,
``S2_A`` (one extra masked all-reduce of ``[x, x*x]``); half B is the total minus A. Per
element and half ``h`` with ``k_h`` samples (``S1_B = S1 - S1_A``, ``S2_B = S2 - S2_A``):

    signal_h = S1_h**2 / k_h,   noise_h = S2_h - signal_h        (k_h x mean**2, k_h x var)
    defined_h:  noise_h > rtol * k * S2  and  signal_h > 0        (both finite)
    y_h = log(signal_h) - log(noise_h)                            (log GSNR, eq. 7 on the half)

and per variable, over its elements where both halves are defined (``n`` pairs):

    rho = Pearson correlation of (y_A, y_B)
    reliability = 2 rho / (1 + |rho|)       (Spearman-Brown for rho >= 0; sign kept below 0)

undefined (reported as 0 with ``defined`` False) when ``n < min_pairs``, when either half's
``y`` has (relative) zero variance over the pairs, or when a half has fewer than 2 samples
(``k < 4``). Why the log GSNR and Pearson, the threshold, the sign rule and the cost: see
the spec. Pure functions of tensors with static shapes, no collective and no Python
branching on values: they compile with XLA (``tf.function(jit_compile=True)``).
"""

from typing import List, NamedTuple, Sequence, Tuple

import tensorflow as tf

from vrgd_tf.gsnr.options import NOISE_RTOL

__all__ = [
    "MIN_PAIRS",
    "ZERO_VARIANCE_RTOL",
    "SplitHalf",
    "half_log_gsnr",
    "spearman_brown",
    "split_half_reliability",
]

#: Fewest element pairs (both halves defined) for a variable's correlation to be reported:
#: with 2 pairs a Pearson correlation is always +-1.
MIN_PAIRS = 3

#: A half's log GSNR counts as constant over a variable's pairs (correlation undefined) when
#: its centred sum of squares is at most this fraction of its raw sum of squares, i.e. its
#: standard deviation is below about 0.3% of its root mean square: the float32 one-pass sums
#: do not resolve a spread that small.
ZERO_VARIANCE_RTOL = 1e-5


class SplitHalf(NamedTuple):
    """Per-variable split-half reliability of the GSNR; each field float32 (``defined``
    bool) of shape ``[n]``, one entry per variable.

    Attributes:
      reliability: ``2 rho / (1 + |rho|)``, in [-1, 1]: the Spearman-Brown reliability of the
        full-k GSNR for ``rho >= 0``; 0 where not ``defined``.
      correlation: ``rho``, the Pearson correlation over the variable's elements of the two
        halves' log GSNR, in [-1, 1]; 0 where not ``defined``.
      num_pairs: the number of elements where both halves' GSNR is defined and positive.
      defined: whether ``reliability`` and ``correlation`` are defined (see the module).
    """

    reliability: tf.Tensor
    correlation: tf.Tensor
    num_pairs: tf.Tensor
    defined: tf.Tensor


def half_log_gsnr(s1, s2, num_samples: int, threshold) -> Tuple[tf.Tensor, tf.Tensor]:
    """The log GSNR per element of one half from its sums (eq. 7 on ``num_samples`` samples).

    Args:
      s1: float32 ``[N]``, the half's ``sum_j x_j``.
      s2: float32 ``[N]``, the half's ``sum_j x_j**2``.
      num_samples: Python int >= 2, the half's number of samples ``k_h``.
      threshold: float32 ``[N]`` (or a scalar) >= 0: the noise ``s2 - s1**2 / k_h`` must
        exceed it (the caller passes ``rtol * k * S2`` of the total).

    Returns:
      ``(y, defined)``: float32 ``[N]`` ``log(r)`` (0 where not defined) and bool ``[N]``,
      where the noise exceeds ``threshold`` and the signal ``s1**2 / k_h`` is positive,
      both finite (NaN and Inf compare False). No Inf or NaN is formed.
    """
    signal = tf.square(s1) * (1.0 / float(num_samples))
    noise = s2 - signal
    defined = (noise > threshold) & (signal > 0.0) & tf.math.is_finite(signal)
    y = tf.math.log(tf.where(defined, signal, 1.0)) - tf.math.log(tf.where(defined, noise, 1.0))
    return y, defined


def spearman_brown(rho):
    """``2 rho / (1 + |rho|)``: the Spearman-Brown reliability of a measurement twice as
    long as the halves whose correlation is ``rho`` (``2 rho / (1 + rho)`` for ``rho >= 0``);
    for ``rho < 0`` (halves that disagree: no reliability) the sign is kept and the value
    stays in [-1, 0] instead of diverging at ``rho = -1``.

    Args:
      rho: float32 tensor, values in [-1, 1].

    Returns:
      float32 tensor of the same shape, values in [-1, 1].
    """
    return 2.0 * rho / (1.0 + tf.abs(rho))


def _sums(columns: Sequence[tf.Tensor], sizes: Sequence[int]) -> List[tf.Tensor]:
    """Per-variable sums ``[n]`` of each flat ``[N]`` column, over static slices."""
    return [tf.stack([tf.reduce_sum(part) for part in tf.split(c, list(sizes))]) for c in columns]


def _pearson(x, y, pair, sizes, min_pairs):
    """``(rho, num_pairs, defined)`` per variable: the one-pass Pearson correlation of
    ``x`` and ``y`` over the elements where ``pair``. float32 throughout; rounding costs about
    ``eps * mean**2 / variance`` of relative accuracy (log GSNRs: means of a few units,
    variances of order 1)."""
    m = tf.cast(pair, tf.float32)
    x, y = x * m, y * m
    n, sx, sy, sxx, syy, sxy = _sums([m, x, y, x * x, y * y, x * y], sizes)
    inv_n = tf.math.divide_no_nan(1.0, n)
    vx = sxx - sx * sx * inv_n
    vy = syy - sy * sy * inv_n
    cov = sxy - sx * sy * inv_n
    defined = (
        (n >= float(min_pairs)) & (vx > ZERO_VARIANCE_RTOL * sxx) & (vy > ZERO_VARIANCE_RTOL * syy)
    )
    scale = tf.sqrt(tf.where(defined, vx, 1.0) * tf.where(defined, vy, 1.0))
    rho = tf.where(defined, tf.clip_by_value(cov / scale, -1.0, 1.0), 0.0)
    return rho, n, defined


def split_half_reliability(
    s1,
    s2,
    s1_a,
    s2_a,
    num_samples: int,
    num_samples_a: int,
    sizes: Sequence[int],
    *,
    rtol: float = NOISE_RTOL,
    min_pairs: int = MIN_PAIRS,
) -> SplitHalf:
    """The split-half reliability of the GSNR of ``n`` variables packed in flat buffers.

    Pure math, no collective: usable inside ``tf.function(jit_compile=True)``. Source:
    ``docs/spec.md`` section 4 (ours; the paper has no such diagnostic).

    Args:
      s1: float32 ``[N]``, ``S1 = sum_j x_j`` over all ``num_samples`` samples, the
        variables' flattened elements concatenated, ``N = sum(sizes)``.
      s2: float32 ``[N]``, ``S2 = sum_j x_j**2``, packed the same way.
      s1_a: float32 ``[N]``, half A's ``sum_j x_j`` (over its ``num_samples_a`` samples).
      s2_a: float32 ``[N]``, half A's ``sum_j x_j**2``.
      num_samples: Python int >= 2, ``k``.
      num_samples_a: Python int in [1, k - 1], ``k_a``; half B has ``k - k_a``.
      sizes: Python ints >= 0, the number of elements of each variable (all of them, or the
        fixed subsample the step carries).
      rtol: Python float > 0, the relative noise threshold per sample (``NOISE_RTOL``,
        or ``vrgd_tf.gsnr.NOISE_RTOL_BFLOAT16`` when the squares travel in bfloat16).
      min_pairs: Python int >= 2, see :data:`MIN_PAIRS`.

    Returns:
      A :class:`SplitHalf` of ``[n]`` tensors; all undefined when a half has fewer than
      2 samples.

    Raises:
      ValueError: ``num_samples_a`` outside [1, k - 1], ``min_pairs`` < 2, or ``sizes``
        not adding up to the buffers' length.
    """
    k, k_a, sizes = int(num_samples), int(num_samples_a), [int(s) for s in sizes]
    s1, s2, s1_a, s2_a = (tf.convert_to_tensor(t, tf.float32) for t in (s1, s2, s1_a, s2_a))
    if not 1 <= k_a < k:
        raise ValueError(f"`num_samples_a` must be in [1, {k - 1}]; got {num_samples_a}.")
    if min_pairs < 2:
        raise ValueError(f"`min_pairs` must be >= 2; got {min_pairs}.")
    if s1.shape.num_elements() != sum(sizes):
        raise ValueError(
            f"`sizes` add up to {sum(sizes)} elements; the buffers have {s1.shape.num_elements()}."
        )
    zeros = tf.zeros([len(sizes)], tf.float32)
    if not sizes or k_a < 2 or k - k_a < 2:
        return SplitHalf(zeros, zeros, zeros, tf.zeros([len(sizes)], tf.bool))
    threshold = (float(rtol) * k) * s2
    y_a, defined_a = half_log_gsnr(s1_a, s2_a, k_a, threshold)
    y_b, defined_b = half_log_gsnr(s1 - s1_a, s2 - s2_a, k - k_a, threshold)
    rho, num_pairs, defined = _pearson(y_a, y_b, defined_a & defined_b, sizes, min_pairs)
    return SplitHalf(spearman_brown(rho), rho, num_pairs, defined)
