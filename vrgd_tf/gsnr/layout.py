"""The layout of one GSNR step: what each gradient is and where its pieces go.

Built once per trace, in Python, from the gradients' static types and shapes: one
:class:`Entry` per gradient, naming its statistics path, its sizes and its state index. Every
later stage reads the entries instead of index lists.

Paths (spec sections 1 and 4):

* ``DENSE``: a dense gradient; float32 statistics and output ``f * S1``.
* ``FLOAT64``: a dense float64 gradient; float32 statistics, and ``S1`` also summed in
  float64 so the output is ``f * S1`` with the base's own sum.
* ``SPARSE_ROWS``: a ``tf.IndexedSlices`` with exact statistics on the rows some replica
  touched (one all-gather): :func:`rows_apply` holds, no squares were handed over and the
  option ``sparse_statistics="rows"``.
* ``SPARSE_DENSE``: any other ``tf.IndexedSlices``: the statistics of its dense form, its
  rows summed by the strategy's own sparse SUM.
"""

from typing import NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

__all__ = ["DENSE", "FLOAT64", "SPARSE_ROWS", "SPARSE_DENSE", "Entry", "Layout", "build_layout"]

DENSE, FLOAT64, SPARSE_ROWS, SPARSE_DENSE = "dense", "float64", "sparse_rows", "sparse_dense"
#: The paths whose gradients travel in the dense all-reduce calls.
ALL_REDUCED = (DENSE, FLOAT64, SPARSE_DENSE)


class Entry(NamedTuple):
    """One gradient of the step.

    Attributes:
      position: int, its index in the step's gradients (and variables).
      path: one of ``DENSE``, ``FLOAT64``, ``SPARSE_ROWS``, ``SPARSE_DENSE``.
      shape: ``tf.TensorShape``, the variable's (dense) shape, fully defined.
      size: int, the elements of its factor: the dense size, or for ``SPARSE_ROWS`` the
        slots of the gathered rows, ``replicas * rows * width``.
      statistics_size: int, the elements its diagnostics count (the dense size).
      state_index: int or None, its position in :class:`vrgd_tf.gsnr.VRGDState`.
      dtype: ``tf.DType``, the gradient's (of its values, for a ``tf.IndexedSlices``).
    """

    position: int
    path: str
    shape: tf.TensorShape
    size: int
    statistics_size: int
    state_index: Optional[int]
    dtype: tf.DType


class Layout(NamedTuple):
    """The entries of one step and its static sample count.

    Attributes:
      entries: tuple of :class:`Entry`, in the order of the step's gradients.
      num_replicas: int, replicas in sync.
      num_groups: int, micro-batch groups per replica.
    """

    entries: Tuple[Entry, ...]
    num_replicas: int
    num_groups: int

    @property
    def num_samples(self) -> int:
        """The static ``k = replicas * groups`` (the count of samples that may contribute)."""
        return self.num_replicas * self.num_groups

    def on(self, *paths) -> Tuple[Entry, ...]:
        """The entries on any of ``paths``, in order."""
        return tuple(e for e in self.entries if e.path in paths)


def rows_apply(grad, variable) -> bool:
    """Whether ``grad`` can take the exact sparse statistics: a ``tf.IndexedSlices`` with
    a static number (>= 1) of rank-1 indices and a static row shape, for a variable of
    static shape."""
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


def _dense_shape(grad, variable) -> tf.TensorShape:
    shape = tf.TensorShape(variable.shape if isinstance(grad, tf.IndexedSlices) else grad.shape)
    if not shape.is_fully_defined():
        raise ValueError(
            "VRGD needs gradients with static shapes (as XLA and TPUs do); got a gradient "
            f"of shape {shape} for variable {getattr(variable, 'name', variable)!r}."
        )
    return shape


def _path(grad, variable, squares_given, sparse_statistics) -> str:
    if isinstance(grad, tf.IndexedSlices):
        rows = sparse_statistics == "rows" and not squares_given
        return SPARSE_ROWS if rows and rows_apply(grad, variable) else SPARSE_DENSE
    return FLOAT64 if grad.dtype == tf.float64 else DENSE


def build_layout(
    grads: Sequence,
    variables: Sequence,
    state,
    *,
    num_replicas: int,
    num_groups: int,
    squares_given: bool,
    sparse_statistics: str = "rows",
) -> Layout:
    """The :class:`Layout` of a step (Python, at trace time).

    Args:
      grads: the ``n`` gradients (``tf.Tensor`` or ``tf.IndexedSlices``), none None.
      variables: their variables.
      state: the :class:`vrgd_tf.gsnr.VRGDState` holding them, or None.
      num_replicas: int, replicas in sync.
      num_groups: int, micro-batch groups per replica.
      squares_given: whether the caller handed over the squares (micro-batch groups):
        sparse gradients then take the dense statistics.
      sparse_statistics: ``"rows"`` or ``"dense"``, see
        :data:`vrgd_tf.gsnr.options.SPARSE_STATISTICS`.

    Raises:
      ValueError: a gradient or variable without a static shape.
    """
    entries = []
    for i, (g, v) in enumerate(zip(grads, variables)):
        shape = _dense_shape(g, v)
        path = _path(g, v, squares_given, sparse_statistics)
        full = shape.num_elements()
        size = full
        if path == SPARSE_ROWS:
            width = max(int(shape[1:].num_elements()), 1)
            size = num_replicas * int(g.indices.shape[0]) * width
        index = None if state is None else state.index(v)
        dtype = g.values.dtype if isinstance(g, tf.IndexedSlices) else g.dtype
        entries.append(Entry(i, path, shape, size, full, index, dtype))
    return Layout(tuple(entries), num_replicas, num_groups)
