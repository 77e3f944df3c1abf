"""The per-variable diagnostics of a step (spec section 4), and the factor with its
diagnostics for callers that hold the sums themselves (:func:`gsnr_factor`,
:func:`gsnr_factors_flat`). Pure functions.

``statistics`` reads only ``S1``, the raw factor, the applied factor and per-variable
values, so that nothing else of a variable's size (the signal, the normalised ratio) has to
stay alive until the diagnostics run after the smoothing: each such tensor costs 4 bytes per
element and replica at the step's peak (``docs/results.md``, BERT-tiny memory by part).
"""

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from vrgd_tf.gsnr import factors as factors_lib
from vrgd_tf.gsnr import options as options_lib
from vrgd_tf.gsnr import packing
from vrgd_tf.gsnr.fields import STATISTICS_FIELDS, has_gsnr

__all__ = [
    "STATISTICS_FIELDS",
    "NUM_STATISTICS",
    "GSNRStatistics",
    "statistics",
    "gsnr_factor",
    "gsnr_factors_flat",
    "has_gsnr",
]

#: Number of diagnostics kept per variable.
NUM_STATISTICS = len(STATISTICS_FIELDS)


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
    A recording step without a GSNR (one sample, or fewer than 2 contributing samples) stores
    zeros in every field.
    """

    mean_gsnr: tf.Tensor
    frac_at_gamma: tf.Tensor
    frac_at_one: tf.Tensor
    mean_factor: tf.Tensor
    norm_ratio: tf.Tensor

    def stack(self) -> tf.Tensor:
        """Returns the values as a float32 tensor of shape ``[NUM_STATISTICS]``."""
        return tf.stack([getattr(self, f) for f in STATISTICS_FIELDS])


def _variable_sums(s1, factor, applied, k, gamma, sizes=None) -> List[tf.Tensor]:
    """One variable's (or each variable of a pack's, ``sizes``) sums: elements at factor 1
    (``floor`` of a factor in [gamma, 1]), at ``gamma``, of the applied factor, of
    ``signal = S1**2 / k`` and of ``applied**2 * signal``."""
    signal = tf.square(s1) * (1.0 / k)
    values = [tf.floor(factor.factor), applied, signal, tf.square(applied) * signal]
    if gamma < 1.0:  # factor <= gamma exactly where the clip gave gamma
        values.append(tf.cast(factor.factor <= gamma, tf.float32))
    out, _ = packing.sums(values, sizes)
    out = [packing.as_rows(x) for x in out]
    return out if gamma < 1.0 else out + [tf.zeros_like(out[0])]


def _scaled_norm_sums(summed, applied, pieces) -> Tuple[tf.Tensor, tf.Tensor]:
    """``(sum S1**2, sum (f S1)**2)`` per variable with S1 first divided by its largest
    magnitude in the variable (a scale that cancels in their ratio)."""
    plain, reduced = [], []
    for s_block, a_block, sizes in zip(summed, applied, pieces):
        for s, a in zip(packing.pieces(s_block, sizes), packing.pieces(a_block, sizes)):
            p = tf.reduce_max(tf.abs(s))
            s = s / tf.where(p > 0.0, p, 1.0)
            plain.append(tf.reduce_sum(tf.square(s)))
            reduced.append(tf.reduce_sum(tf.square(a * s)))
    return tf.stack(plain), tf.stack(reduced)


def _reorder(order):
    """A function putting per-variable ``[n]`` tensors in ``order`` (the identity when
    ``order`` is None or already in order)."""
    if order is None or tuple(order) == tuple(range(len(order))):
        return lambda *columns: columns
    return lambda *columns: tuple(tf.gather(c, list(order)) for c in columns)


def statistics(
    summed: Sequence[tf.Tensor],
    factors: Sequence[factors_lib.Factor],
    applied: Sequence[tf.Tensor],
    *,
    k,
    gamma: float,
    sizes: Sequence[int],
    extra: Optional[tf.Tensor] = None,
    pieces: Optional[Sequence[Optional[Sequence[int]]]] = None,
    order: Optional[Sequence[int]] = None,
) -> tf.Tensor:
    """The diagnostics of ``n`` variables: float32 ``[n, NUM_STATISTICS]``, one
    :class:`GSNRStatistics` row each. Needs ``summed`` finite (the step records only steps
    with finite sums).

    ``summed``, ``factors`` and ``applied`` hold one item per variable, or, with
    ``pieces``, one per block (``vrgd_tf.gsnr.layout.Block``): a packed block's item is its
    flat buffer and its ``pieces`` entry its variables' element counts, and ``order`` puts
    the blocks' variables back in the order of the rows (the step's variables). The
    per-variable sums are put in that order before any division, so each row's values do
    not depend on the packing, bit for bit (a division by the constant sizes is folded into
    a product with their vectorised reciprocal, whose last bit depends on the position).

    The update norm ratio comes from ``signal = S1**2 / k`` (k cancels): two passes. Only
    if a sum overflows (|S1| above ~1e19) or is below 1e-30 (it may have underflowed: |S1|
    below ~1e-19, or S1 = 0) is S1 first divided by its largest magnitude in the variable.
    A sparse variable's untouched rows have S1 = 0 and add nothing to either norm.

    Args:
      summed: ``n`` float32 ``[size_i]``, ``S1``.
      factors: ``n`` :class:`vrgd_tf.gsnr.factors.Factor` of them.
      applied: ``n`` float32 ``[size_i]``, the factor actually applied (after smoothing and
        factor transforms).
      k: the samples of the step, a Python number or float32 scalar (as for the factor).
      gamma: Python float in (0, 1].
      sizes: ``n`` ints, the elements each variable's fractions count (its dense size; a
        sparse variable's slots hold fewer).
      extra: None, or float32 ``[n, 2]`` added to the per-variable count of elements at
        factor 1 and sum of the applied factor: the elements a sparse variable's slots do
        not hold (:func:`vrgd_tf.gsnr.state.untouched_statistics`).
      pieces: None (one variable per item), or per item None or its variables' element
        counts (``vrgd_tf.gsnr.packing``).
      order: None, or for each row the index of its variable among the items' variables
        listed item by item (``vrgd_tf.gsnr.layout.Layout.block_order``). ``sizes`` and
        ``extra`` are in the rows' order.
    """
    pieces = [None] * len(summed) if pieces is None else list(pieces)
    size_f = tf.constant(np.maximum(np.asarray(sizes, np.float32), 1.0))
    rows = [
        _variable_sums(s, f, a, k, gamma, p) for s, f, a, p in zip(summed, factors, applied, pieces)
    ]
    columns = [tf.concat(c, 0) for c in zip(*rows)]
    columns.append(tf.concat([packing.as_rows(f.mean_ratio) for f in factors], 0))
    in_order = _reorder(order)
    at_one, applied_sum, plain, reduced, at_gamma, mean_ratio = in_order(*columns)
    if extra is not None:
        at_one, applied_sum = at_one + extra[:, 0], applied_sum + extra[:, 1]
    plain, reduced = tf.cond(
        tf.reduce_all(tf.math.is_finite(plain) & (plain > 1e-30)),
        lambda: (plain, reduced),
        lambda: in_order(*_scaled_norm_sums(summed, applied, pieces)),
    )
    norm_ratio = tf.where(plain > 0.0, tf.sqrt(reduced / tf.where(plain > 0.0, plain, 1.0)), 1.0)
    return tf.stack(
        [
            mean_ratio,
            _per_element(at_gamma, size_f),
            _per_element(at_one, size_f),
            _per_element(applied_sum, size_f),
            tf.minimum(norm_ratio, 1.0),
        ],
        axis=1,
    )


def _per_element(total, size_f) -> tf.Tensor:
    """``total / size_f``, exactly 1 where ``total == size_f`` (every element at factor 1:
    the reader's inert check compares with 1; the division, folded into a product with
    the sizes' vectorised reciprocal, may miss it by one ulp)."""
    return tf.where(tf.equal(total, size_f), 1.0, total / size_f)


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

    Pure math, no collective: usable inside ``tf.function(jit_compile=True)``.

    Args:
      s1: float32 tensor ``[N]``: ``sum_d x_d`` over the ``num_replicas`` replicas, the
        variables' flattened gradients concatenated, ``N = sum(sizes)``.
      s2: float32 tensor ``[N]``: ``sum_d x_d**2``, packed the same way.
      sizes: Python ints, the number of elements of each of the ``n`` variables.
      num_replicas: Python int >= 2, the number ``k`` of replicas summed.
      gamma: Python float in (0, 1], the lower bound of the factor.
      squares_dtype: ``"float32"`` or ``"bfloat16"``: the dtype ``s2`` was all-reduced in
        (it is float32 here either way); selects the noise threshold,
        :data:`~vrgd_tf.gsnr.NOISE_RTOL` or :data:`~vrgd_tf.gsnr.NOISE_RTOL_BFLOAT16`.

    Returns:
      ``(factor, stats)``: ``factor`` is float32 ``[N]`` with values in ``[gamma, 1]`` and
      exactly 1 wherever the GSNR is undefined; ``stats`` is float32
      ``[n, NUM_STATISTICS]``, one :class:`GSNRStatistics` row per variable (its
      ``mean_factor`` is the mean of ``factor`` and its ``norm_ratio``
      ``||factor * s1|| / ||s1||``: no smoothing here).
    """
    k = float(num_replicas)
    threshold = options_lib.noise_rtol(options_lib.validate_squares_dtype(squares_dtype)) * k
    sizes = [int(n) for n in sizes]
    parts1, parts2 = tf.split(s1, sizes), tf.split(s2, sizes)
    factors = [factors_lib.factor(a, b, k, gamma, threshold) for a, b in zip(parts1, parts2)]
    raw = [f.factor for f in factors]
    stats = statistics(parts1, factors, raw, k=k, gamma=gamma, sizes=sizes)
    return tf.concat(raw, 0), stats


def gsnr_factor(
    s1: tf.Tensor, s2: tf.Tensor, num_replicas: int, gamma: float
) -> Tuple[tf.Tensor, GSNRStatistics]:
    """The VRGD factor of one variable from its cross-replica sums (eqs. 7 to 9).

    ``vrgd_tf.gsnr.statistics.gsnr_factors_flat`` (the packed form) for a single variable.

    Args:
      s1: float32 tensor, any static shape: ``sum_d x_d`` over the ``num_replicas`` replicas.
      s2: float32 tensor, same shape: ``sum_d x_d**2``.
      num_replicas: Python int >= 2, the number ``k`` of replicas summed.
      gamma: Python float in (0, 1], the lower bound of the factor.

    Returns:
      ``(factor, stats)``: ``factor`` is float32 of the shape of ``s1``, with values in
      ``[gamma, 1]`` and exactly 1 wherever the GSNR is undefined; ``stats`` is a
      :class:`GSNRStatistics`.

    Raises:
      ValueError: ``s1`` without a static shape.
    """
    size = s1.shape.num_elements()
    if size is None:
        raise ValueError(
            f"VRGD needs gradients with static shapes (as XLA and TPUs do); got {s1.shape}."
        )
    factor, stats = gsnr_factors_flat(
        tf.reshape(s1, [-1]), tf.reshape(s2, [-1]), [size], num_replicas, gamma
    )
    return tf.reshape(factor, tf.shape(s1)), GSNRStatistics(*tf.unstack(stats[0]))
