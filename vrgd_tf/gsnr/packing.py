"""The math of a block (``vrgd_tf.gsnr.layout.Block``) that holds several variables.

A packed block is one flat float32 buffer, its variables' elements one after another
(``sizes``: their counts, in order). Element-wise ops run once over it. What is per variable
takes two forms:

* a per-variable sum (:func:`sums`) is one ``reduce_sum`` over each variable's piece of the
  buffer (one ``Split`` of it): the same reduction, in the same order, as over the variable's
  own tensor, so every value is the unpacked one bit for bit (outside XLA: under XLA,
  ``jit_compile=True`` or a TPU, the order in which a reduction adds depends on how XLA
  fuses it, and ``vrgd_tf.gsnr.reductions`` takes a variable's sums in one variadic
  ``Reduce``, so packed and unpacked values agree to float32 rounding, a few ulp, not
  bit for bit: ``tests/test_packing.py``);
* a per-variable value used element-wise (a mean, a bound, a divisor: ``[v]``) is spread
  over the buffer by :func:`per_element` (one ``Gather`` by each element's variable index,
  made at run time from the ``v`` offsets: the graph holds no constant of the buffer's
  size).

With one variable (``len(sizes) <= 1``) every function is the identity of the unpacked step:
the sums are scalars and the values are used as they are.
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from vrgd_tf.gsnr import reductions

__all__ = ["is_packed", "concat", "pieces", "per_element", "sums", "as_rows"]


def is_packed(sizes: Optional[Sequence[int]]) -> bool:
    """Whether ``sizes`` (None, or the element counts of a block's variables) is a pack."""
    return sizes is not None and len(sizes) > 1


def concat(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """The flat tensors of a block's variables as its buffer (the one tensor itself if
    there is one)."""
    tensors = list(tensors)
    return tensors[0] if len(tensors) == 1 else tf.concat(tensors, 0)


def pieces(buffer: tf.Tensor, sizes: Optional[Sequence[int]]) -> List[tf.Tensor]:
    """``buffer`` cut into its variables' flat pieces (``[buffer]`` unless packed)."""
    if not is_packed(sizes):
        return [buffer]
    return tf.split(buffer, list(sizes))


def per_element(values, sizes: Optional[Sequence[int]]):
    """float32 ``[sum(sizes)]``: each variable's value of ``values`` (``[v]``) on each of
    its elements; ``values`` itself unless packed (a scalar broadcasts)."""
    if not is_packed(sizes):
        return values
    return tf.gather(values, _variable_index(sizes))


def _variable_index(sizes) -> tf.Tensor:
    """int32 ``[sum(sizes)]``: each element's variable, a cumulative sum of the marks at
    the starts of variables 1 .. v-1 (static shapes: XLA, TPU)."""
    starts = np.cumsum(list(sizes))[:-1].astype(np.int32)
    marks = tf.scatter_nd(
        tf.constant(starts[:, None]), tf.ones([len(starts)], tf.int32), [int(sum(sizes))]
    )
    return tf.cumsum(marks)


def sums(
    values: Sequence[tf.Tensor],
    sizes: Optional[Sequence[int]],
    finite_of: Optional[tf.Tensor] = None,
) -> Tuple[List[tf.Tensor], Optional[tf.Tensor]]:
    """Per variable, the float32 sums of ``values`` (flat buffers of one block) and, with
    ``finite_of``, whether all of it is finite (:func:`vrgd_tf.gsnr.reductions.sums`).

    Returns:
      ``(sums, finite)``: one tensor per value, a scalar (unpacked) or ``[v]`` (packed, one
      sum per variable, each that of its piece); a scalar bool, or None.
    """
    if not is_packed(sizes):
        return reductions.sums(values, finite_of=finite_of)
    cut = [pieces(v, sizes) for v in values]
    per_variable = [reductions.sums(list(parts))[0] for parts in zip(*cut)]
    finite = None
    if finite_of is not None:
        finite = tf.reduce_all(tf.math.is_finite(finite_of))
    return [tf.stack(column) for column in zip(*per_variable)], finite


def as_rows(value) -> tf.Tensor:
    """A per-variable value of a block, scalar or ``[v]``, as ``[v]``."""
    return tf.reshape(value, [-1])
