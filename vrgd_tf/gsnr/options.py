"""The options of the GSNR step, their checks and the noise thresholds (spec sections 1-4).

:class:`GSNROptions` is the one record of what the step's math is told: built (and checked)
once, by :class:`vrgd_tf.GSNRAggregator` at construction or by a direct call of
:func:`vrgd_tf.gsnr.variance_reduce`.
"""

import dataclasses
import inspect
import numbers
import sys
from typing import Callable, Mapping, Tuple

import numpy as np

__all__ = [
    "NOISE_RTOL",
    "NOISE_RTOL_BFLOAT16",
    "PACK_LIMIT",
    "SQUARES_DTYPES",
    "SPARSE_STATISTICS",
    "GSNROptions",
    "noise_rtol",
    "validate_gamma",
    "validate_beta_3",
    "validate_squares_dtype",
    "validate_factor_transforms",
    "validate_sparse_statistics",
    "validate_split_half_stride",
    "validate_pack_limit",
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

#: The default ``pack_limit``: ``DENSE`` gradients of at most this many elements share one
#: block (``vrgd_tf.gsnr.layout.Block``). Below it a variable's fixed cost per op
#: outweighs the pack's extra copy (concatenation and split, about two passes over its
#: elements); measured in ``benchmarks/passes.py`` and ``benchmarks/overhead.py``. Defined
#: here, with the other options, so that this module imports no TensorFlow (the JAX family
#: checks its settings with it); :mod:`vrgd_tf.gsnr.layout` uses it.
PACK_LIMIT = 16384

#: Allowed values of ``squares_dtype``: the dtype the squares are all-reduced in.
SQUARES_DTYPES = ("float32", "bfloat16")

#: Allowed values of ``sparse_statistics``, the statistics path of a ``tf.IndexedSlices``
#: gradient (spec section 4): ``"rows"``, exact statistics on the rows some replica touched
#: (one all-gather; where it applies, see :mod:`vrgd_tf.gsnr.layout`), or ``"dense"``, the
#: statistics of its dense form (densified and all-reduced with the dense gradients).
SPARSE_STATISTICS = ("rows", "dense")


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
      TypeError: not a sequence of callables, or a callable that does not take two
        positional arguments ``(factor, context)`` (the message names the argument).
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
    for i, fn in enumerate(transforms):
        signature = _signature(fn)
        if signature is not None and not _binds(signature, 2):
            raise TypeError(
                f"{transform_label(i, fn)} must take two positional arguments "
                "`(factor, context)` (context: a vrgd_tf.gsnr.FactorContext); its signature "
                f"is {signature}."
            )
    return transforms


def transform_label(index: int, fn) -> str:
    """How messages name a factor transform: ``"`factor_transforms[i]` (its name)"``."""
    return f"`factor_transforms[{index}]` ({getattr(fn, '__name__', type(fn).__name__)})"


def _signature(fn):
    """``inspect.signature(fn)``, or None where it cannot be read (some builtins)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _binds(signature, count: int) -> bool:
    """Whether ``signature`` accepts ``count`` positional arguments."""
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def validate_squares_dtype(squares_dtype):
    """Checks ``squares_dtype``, the dtype the squared gradients are all-reduced in.

    Args:
      squares_dtype: ``"float32"`` (default of every VRGD class: the squares travel as
        float32, in a call of their own after the gradients) or ``"bfloat16"`` (they travel
        in bfloat16, half the bytes; the gradient sums stay float32 and exact). A
        ``tf.DType`` of those names is accepted too.

    Returns:
      The name, ``"float32"`` or ``"bfloat16"``.

    Raises:
      TypeError: not a string (or ``tf.DType``).
      ValueError: not one of ``SQUARES_DTYPES``.
    """
    # A tf.DType exists only where TensorFlow is imported: this module imports none.
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(squares_dtype, tf.DType):
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


def validate_sparse_statistics(sparse_statistics) -> str:
    """Checks ``sparse_statistics``, one of ``SPARSE_STATISTICS``.

    Raises:
      ValueError: another value (the message names the argument and the allowed ones).
    """
    if sparse_statistics not in SPARSE_STATISTICS:
        raise ValueError(
            "`sparse_statistics` must be one of "
            f"{', '.join(repr(s) for s in SPARSE_STATISTICS)}; got {sparse_statistics!r}."
        )
    return sparse_statistics


def validate_split_half_stride(split_half_stride) -> int:
    """Checks ``split_half_stride``, the subsample stride of the split-half reliability.

    Args:
      split_half_stride: int >= 0: 0, the reliability is not measured; ``s >= 1``, each
        variable's fixed subsample of about one element in ``s`` (at least
        ``min(size, 64)``) travels in an all-reduce call of its own, masked to half A
        (``vrgd_tf.gsnr.halves``, ``docs/spec.md`` section 4).

    Returns:
      The stride as an int.

    Raises:
      TypeError: not an int (bools refused).
      ValueError: negative.
    """
    return _non_negative_int(split_half_stride, "split_half_stride", "no split-half reliability")


def _non_negative_int(value, name: str, zero: str) -> int:
    """``value`` as an int >= 0, or the TypeError (not an int; bools refused) or ValueError
    (negative) naming ``name`` and what 0 means (``zero``)."""
    want = f"`{name}` must be an int >= 0 (0 = {zero})"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{want}; got {value!r} of type {type(value).__name__}.")
    if value < 0:
        raise ValueError(f"{want}; got {value}.")
    return int(value)


def validate_pack_limit(pack_limit) -> int:
    """Checks ``pack_limit``, the largest gradient (in elements) the step packs with the
    other small dense ones into one buffer (``vrgd_tf.gsnr.layout``).

    Args:
      pack_limit: int >= 0; 0 packs nothing. The step's outputs (factors, scaled
        gradients, statistics) and its state are the same bit for bit whatever it is
        (outside XLA; under XLA to float32 rounding, ``vrgd_tf.gsnr.packing``); only
        its count of ops changes. The weights after the base rule can differ in the last
        bits where the graph optimizer regroups that rule's ops (docs/spec.md, section 1).

    Returns:
      The limit as an int.

    Raises:
      TypeError: not an int (bools refused).
      ValueError: negative.
    """
    return _non_negative_int(pack_limit, "pack_limit", "no packing")


def noise_rtol(squares_dtype="float32") -> float:
    """The per-replica relative noise threshold for squares all-reduced in
    ``squares_dtype``: ``NOISE_RTOL`` (float32) or ``NOISE_RTOL_BFLOAT16``."""
    return NOISE_RTOL_BFLOAT16 if squares_dtype == "bfloat16" else NOISE_RTOL


@dataclasses.dataclass(frozen=True)
class GSNROptions:
    """What the GSNR step's math is told; checked when made (spec sections 1 to 4).

    Attributes:
      gamma: float in (0, 1], the factor's lower bound (eq. 9). Default 0.1.
      beta_3: float in [0, 1), the decay of the factor's momentum (Section 4.2, *our
        reading*); 0 = the raw factor. Default 0.
      squares_dtype: ``"float32"`` or ``"bfloat16"``, the dtype the squares are all-reduced
        in (``SQUARES_DTYPES``). Default ``"float32"``.
      factor_transforms: tuple of callables ``fn(factor, context) -> factor``
        (:class:`vrgd_tf.gsnr.FactorContext`), applied in order to each variable's factor
        after any smoothing. Default none.
      sparse_statistics: ``"rows"`` or ``"dense"`` (``SPARSE_STATISTICS``): the
        statistics path of ``tf.IndexedSlices`` gradients. Default ``"rows"``.
      split_half_stride: int >= 0, the subsample stride of the split-half reliability of
        the GSNR (:func:`validate_split_half_stride`); 0 = not measured. Default 0 (the
        aggregator sets its ``statistics_interval`` when ``split_half=True``).
      pack_limit: int >= 0, dense gradients of at most this many elements share one
        buffer in the step (:data:`vrgd_tf.gsnr.PACK_LIMIT`, the default): fewer
        ops, the same step outputs and state bit for bit outside XLA, to float32
        rounding under XLA (the base rule applied after them may round differently:
        ``docs/spec.md`` section 1); 0 = every gradient on its own.

    Raises:
      TypeError, ValueError: a field outside its range (the message names it).
    """

    gamma: float = 0.1
    beta_3: float = 0.0
    squares_dtype: str = "float32"
    factor_transforms: Tuple[Callable, ...] = ()
    sparse_statistics: str = "rows"
    split_half_stride: int = 0
    pack_limit: int = PACK_LIMIT

    def __post_init__(self):
        checked = {
            "gamma": validate_gamma(self.gamma),
            "beta_3": validate_beta_3(self.beta_3),
            "squares_dtype": validate_squares_dtype(self.squares_dtype),
            "factor_transforms": validate_factor_transforms(self.factor_transforms),
            "sparse_statistics": validate_sparse_statistics(self.sparse_statistics),
            "split_half_stride": validate_split_half_stride(self.split_half_stride),
            "pack_limit": validate_pack_limit(self.pack_limit),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def rtol(self) -> float:
        """The noise threshold of the all-reduced squares, :func:`noise_rtol`."""
        return noise_rtol(self.squares_dtype)

    @classmethod
    def from_keywords(cls, keywords: Mapping) -> "GSNROptions":
        """``GSNROptions(**keywords)``, or ``keywords["options"]`` if that is all there is.

        Raises:
          TypeError: an unknown keyword (named), or ``options`` that is not a
            :class:`GSNROptions` or comes with other keywords.
        """
        keywords = dict(keywords)
        if "options" in keywords:
            options = keywords.pop("options")
            if keywords or not isinstance(options, cls):
                raise TypeError(
                    "`options` must be a vrgd_tf.gsnr.GSNROptions and come alone; got "
                    f"{options!r} with {sorted(keywords)}."
                )
            return options
        unknown = sorted(set(keywords) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(
                f"Unknown GSNR option(s) {', '.join(repr(u) for u in unknown)}; the options "
                f"are {', '.join(f.name for f in dataclasses.fields(cls))}."
            )
        return cls(**keywords)
