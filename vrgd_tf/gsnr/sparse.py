"""Exact GSNR sums of a sparse gradient on the rows some replica touched (spec section 4).

Pure functions, no collective and no state: :func:`local_rows` is what one replica sends
(its rows, and at each index's first occurrence the square of that index's summed rows), and
:func:`union_rows` turns what every replica sent (gathered along axis 0) into a
:class:`SparseRows`: ``S1`` and ``S2`` on the union of the touched rows, ascending, and the
gathered rows themselves for the output. Rows no replica touched never appear, so nothing of
the variable's dense shape is formed. Static shapes throughout (XLA, TPU).
"""

import dataclasses

import tensorflow as tf

__all__ = ["SparseRows", "local_rows", "union_rows", "scale_rows", "densify", "dense_gradient"]


def densify(grad, shape) -> tf.Tensor:
    """A ``tf.IndexedSlices`` as a dense tensor of ``shape`` (rows of equal index summed):
    the square of a sum is not the sum of squares, so sparse gradients are densified before
    squaring."""
    dense = tf.math.unsorted_segment_sum(grad.values, grad.indices, int(shape[0]))
    return tf.reshape(dense, shape)


def unique_rows(indices, values, sentinel):
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
      the data.
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


def _width(shape) -> int:
    return max(int(tf.TensorShape(shape)[1:].num_elements()), 1)


def local_rows(grad, shape):
    """What one replica sends for a sparse gradient of a variable of ``shape``.

    Returns:
      ``(indices, packed)``: the indices ``[m]`` as given and float32 ``[m, 2 width]``: each
      row's values, then at the first occurrence of its index the square of that index's
      summed rows (zeros at the others).
    """
    width = _width(shape)
    values = tf.reshape(tf.cast(grad.values, tf.float32), [-1, width])
    _, summed, slot, first = unique_rows(grad.indices, values, int(shape[0]))
    squares = tf.where(first[:, None], tf.gather(tf.square(summed), slot), 0.0)
    return grad.indices, tf.concat([values, squares], 1)


def packed_values(packed) -> tf.Tensor:
    """The values half of a :func:`local_rows` ``packed`` buffer: float32 ``[m, width]``."""
    return packed[:, : packed.shape[1] // 2]


def packed_squares(packed) -> tf.Tensor:
    """The squares half of a :func:`local_rows` ``packed`` buffer: float32 ``[m, width]``."""
    return packed[:, packed.shape[1] // 2 :]


@dataclasses.dataclass
class SparseRows:
    """The cross-replica sums of one sparse gradient on the union of its rows.

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
    def valid(self) -> tf.Tensor:
        """bool ``[M]``: the slots that hold a touched row."""
        return self.indices < self.num_rows

    def safe_indices(self) -> tf.Tensor:
        """The indices with empty slots pointing at slot 0's row (always a touched row)."""
        return tf.where(self.valid, self.indices, self.indices[0])

    def output(self, factor) -> tf.IndexedSlices:
        """Every replica's rows, as the strategy's sparse SUM gathers them, each times its
        row's factor (``factor``: float32 ``[M * width]``, per slot), in the gradient's
        dtype. With factor 1 it is exactly what the base optimizer gets without VRGD."""
        rows = tf.gather(tf.reshape(factor, [-1, self.width]), self.gathered_slot)
        values = tf.cast(self.gathered_values * rows, self.dtype)
        values = tf.reshape(values, [-1] + self.row_shape.as_list())
        return tf.IndexedSlices(values, self.gathered_indices, self.dense_shape)


def union_rows(grad, shape, indices, packed) -> SparseRows:
    """The :class:`SparseRows` of ``grad`` from every replica's :func:`local_rows`,
    gathered along axis 0 (``indices`` ``[R m]``, ``packed`` ``[R m, 2 width]``): the dense
    path's ``S1`` and ``S2`` on the touched rows (float32 sums in the same order)."""
    shape = tf.TensorShape(shape)
    width = _width(shape)
    unique, summed, slot, _ = unique_rows(indices, packed, int(shape[0]))
    return SparseRows(
        indices=unique,
        s1=tf.reshape(summed[:, :width], [-1]),
        s2=tf.reshape(summed[:, width:], [-1]),
        gathered_indices=indices,
        gathered_values=packed[:, :width],
        gathered_slot=slot,
        width=width,
        num_rows=int(shape[0]),
        row_shape=shape[1:],
        dtype=grad.values.dtype,
        dense_shape=grad.dense_shape if grad.dense_shape is not None else shape.as_list(),
    )


def scale_rows(summed, factor):
    """``factor * summed`` for the strategy's SUM of a sparse gradient.

    Args:
      summed: what the strategy's SUM of a ``tf.IndexedSlices`` gave: ``tf.IndexedSlices``
        (MirroredStrategy gathers every replica's rows, duplicates kept) or a dense tensor.
      factor: float32, the variable's dense shape.

    Returns:
      The same kind as ``summed``, its dtype; every row multiplied by its factor row (in
      float64 for float64 values, so that factor 1 hands them over exactly; else float32).
    """
    if isinstance(summed, tf.IndexedSlices):
        rows = tf.gather(factor, summed.indices)
        values = _scaled(summed.values, rows)
        return tf.IndexedSlices(values, summed.indices, summed.dense_shape)
    return _scaled(summed, factor)


def _scaled(values, factor):
    """``factor * values`` in ``values``' dtype, computed in float64 for float64 values and
    in float32 otherwise."""
    if values.dtype == tf.float64:
        return tf.cast(factor, tf.float64) * values
    return tf.cast(factor * tf.cast(values, tf.float32), values.dtype)


def dense_gradient(grad) -> tf.Tensor:
    """Returns ``grad`` as a dense tensor; ``tf.IndexedSlices`` rows with equal indices are summed.

    The square of a sum is not the sum of squares (spec section 4), so sparse gradients are
    densified before squaring.

    Args:
      grad: ``tf.Tensor`` or ``tf.IndexedSlices`` with a static dense shape.

    Returns:
      A ``tf.Tensor`` of the dense shape and the gradient's dtype.

    Raises:
      ValueError: a ``tf.IndexedSlices`` without ``dense_shape``.
    """
    if isinstance(grad, tf.IndexedSlices):
        num_rows = grad.dense_shape[0] if grad.dense_shape is not None else None
        if num_rows is None:
            raise ValueError("A sparse gradient needs a `dense_shape` to be made dense.")
        return tf.math.unsorted_segment_sum(grad.values, grad.indices, num_rows)
    return tf.convert_to_tensor(grad)
