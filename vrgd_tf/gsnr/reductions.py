"""Per-variable sums of the GSNR step: one ``reduce_sum`` each, or one pass under XLA.

Outside XLA every sum is its own ``tf.reduce_sum`` (Eigen's order: the values, and so a run
restored from a checkpoint, are those of every earlier release bit for bit). Inside an XLA
context (``jit_compile=True``, TPU) a separate reduction re-reads its inputs and, on CPU,
costs one to two element passes each; there the sums of one variable are taken together by
one variadic XLA ``Reduce`` (a single pass over the elements), measured in
``benchmarks/passes.py``. The variadic reduce is TensorFlow's ``XlaVariadicReduceV2`` op
(``tensorflow.compiler.tf2xla``, in every supported TensorFlow); without it the sums fall
back to separate reductions.

XLA on CPU adds a variadic reduce's elements in sequence, so a float32 sum of ``n`` similar
values drifts by up to about ``n`` roundings, all one way (a 262,144-element sum of a factor
mostly at ``gamma`` was 7e-5 off, 1e-3 at 4M elements). Above ``BLOCK`` elements the values
are therefore viewed as ``[n / b, b]`` rows (``b`` a divisor of ``n`` near ``BLOCK``, or
zero padding): the variadic reduce sums each row in the same single pass, and a
``reduce_sum`` (a tree) adds the ``n / b`` row sums (``docs/cost_model.md`` section 6.4).
"""

from typing import List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

try:  # pragma: no cover - present in every supported TensorFlow (vrgd_tf.versions)
    from tensorflow.compiler.tf2xla.python import xla as _xla

    _VARIADIC_REDUCE = getattr(_xla, "variadic_reduce", None)
    _BARRIER = getattr(_xla, "optimization_barrier", None)
except ImportError:  # pragma: no cover
    _VARIADIC_REDUCE = _BARRIER = None

__all__ = ["in_xla", "sums", "recompute_after", "BLOCK"]

#: Elements a variadic reduce adds in sequence under XLA (see the module docstring).
BLOCK = 256

_REDUCERS = {}


def in_xla() -> bool:
    """Whether the op being built goes to XLA (``jit_compile=True``, a TPU function)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def recompute_after(*tensors):
    """``tensors`` themselves, or, inside an XLA context, the same values through one XLA
    ``opt-barrier``: what is computed from them is then not merged (CSE) with what was
    computed from the originals, so XLA recomputes it in the fusion that uses it.

    The GSNR step takes the factor's per-variable sums from ``S1`` and ``S2`` and then
    applies the factor element by element from them again: without the barrier XLA on CPU
    shares the mask, the noise and the ratio between the two loops and writes them out (and
    reads them back); with it, the sums are one fused loop over ``S1`` and ``S2`` and none
    of them is written out (``docs/cost_model.md`` section 6). XLA merges two barriers on
    the same tensors, so a second consumer of the factor passes other tensors with them
    (the step's output: the stored deficit, section 6.2). The values are the same (the
    same operations on the same inputs)."""
    if _BARRIER is None or not in_xla():
        return tensors
    return tuple(_BARRIER(*tensors))


def _reducer(n: int):
    """The scalar function ``(a_1..a_n, b_1..b_n) -> (a_i + b_i)`` for ``n`` float32 sums."""
    if n not in _REDUCERS:

        def add(*args):
            return tuple(a + b for a, b in zip(args[:n], args[n:]))

        spec = [tf.TensorSpec([], tf.float32)] * (2 * n)
        _REDUCERS[n] = tf.function(add, autograph=False).get_concrete_function(*spec)
    return _REDUCERS[n]


def _row_length(n: int) -> int:
    """The row length ``b`` for ``n > BLOCK`` elements: the largest divisor of ``n`` in
    ``[BLOCK / 4, BLOCK]``, else ``BLOCK`` (then the values are padded with zeros: XLA on
    CPU fuses the pad, at some speed)."""
    for b in range(BLOCK, BLOCK // 4 - 1, -1):
        if n % b == 0:
            return b
    return BLOCK


def _variadic_sums(values: List[tf.Tensor]) -> List[tf.Tensor]:
    """The sums of ``values`` (1-D, one size ``n``) by one variadic reduce: over the
    elements if ``n <= BLOCK``, else over rows of ``b`` elements, and the rows' sums by
    ``reduce_sum``. A size unknown when traced is reduced in one sequence."""
    n = values[0].shape[0]
    dimension = 0
    if n is not None and n > BLOCK:
        b = _row_length(n)
        rows = -(-n // b)
        if rows * b != n:
            values = [tf.pad(v, [[0, rows * b - n]]) for v in values]
        values, dimension = [tf.reshape(v, [rows, b]) for v in values], 1
    out = _VARIADIC_REDUCE(
        values,
        [tf.constant(0.0)] * len(values),
        dimensions_to_reduce=[dimension],
        reducer=_reducer(len(values)),
    )
    return [tf.reduce_sum(o) for o in out] if dimension else list(out)


def sums(
    values: Sequence[tf.Tensor], finite_of: Optional[tf.Tensor] = None
) -> Tuple[List[tf.Tensor], Optional[tf.Tensor]]:
    """The float32 sums of ``values`` (1-D float32 tensors of one size) and, if
    ``finite_of`` (float32, that size) is given, whether all of it is finite.

    Returns:
      ``(sums, finite)``: a list of float32 scalars, and a scalar bool (None without
      ``finite_of``).
    """
    values = list(values)
    if _VARIADIC_REDUCE is None or not in_xla():
        finite = None
        if finite_of is not None:
            finite = tf.reduce_all(tf.math.is_finite(finite_of))
        return [tf.reduce_sum(v) for v in values], finite
    if finite_of is not None:
        values.append(finite_of * 0.0)  # 0 where finite, NaN where not: the sum is 0 or NaN
    out = _variadic_sums(values)
    if finite_of is None:
        return list(out), None
    return list(out[:-1]), tf.equal(out[-1], 0.0)
