"""What one replica sends to the GSNR step's collectives, and the sums it gets back, per entry.

Pure functions around ``vrgd_tf.gsnr.collectives``: :func:`local_samples` prepares this
replica's float32 gradients, their squares (or the micro-batch groups' sums of squares), its
sparse rows and its count of contributing samples; :func:`assemble` turns the reduced values
into a :class:`Summed` record, one item per block of the :class:`~vrgd_tf.gsnr.layout.Layout`.
What travels is one tensor per variable, packed or not, so every collective sums exactly what
it sums without the pack (in any strategy's order); a packed block's sums are its variables'
returned sums concatenated, after the collectives.
:class:`GroupSquares` is the step's input record of a replica's micro-batch groups.

Contributing samples (spec section 1): a sample counts when it holds at least one example of
nonzero weight. Where the caller knows it (``GroupSquares.count``: ``use_micro_batches``,
Model Garden's trainer, a custom loop's ``num_contributing=``) this replica's count is given;
otherwise it is inferred: the replica counts its ``m`` samples when some value of its
gradients is nonzero or NaN (:func:`any_nonzero`; the values, not their squares, so a
gradient of 1e-24 counts). A replica whose given count is 0 but whose gradient is nonzero
(a loss term that does not depend on the examples, e.g. a weight regularizer) sent a *stray*
gradient that the sums cannot separate: the step is then the base step. The count and the
stray flag travel as one float32 ``[2]`` tensor beside the squares
(``vrgd_tf.gsnr.collectives``), never beside the gradients.
"""

import itertools
from typing import Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import tensorflow as tf

from vrgd_tf.gsnr import layout as layout_lib
from vrgd_tf.gsnr import packing, sparse

__all__ = [
    "GroupSquares",
    "Local",
    "Summed",
    "any_nonzero",
    "nonzero_or_nan",
    "local_samples",
    "assemble",
]


class GroupSquares(NamedTuple):
    """One replica's micro-batch groups for a GSNR step: their sums of squares and count.

    The replica computed the gradients ``x_j`` of ``m = num_groups`` micro-batches at the
    same weights and hands the step their sum ``sum_j x_j`` as its gradient; this record
    carries the rest: ``k = replicas * m`` samples (``docs/spec.md`` section 1, contributing
    samples). What :func:`vrgd_tf.gsnr.variance_reduce` takes as ``squares=``, and what
    a VRGD optimizer's ``apply_grouped_gradients``
    (:meth:`~vrgd_tf.VRGDLamb.apply_grouped_gradients`) posts to the step through its
    ``SquaresChannel``.

    Attributes:
      sq_sums: this replica's ``sum_j x_j**2`` per gradient, dense tensors of the variables'
        shapes (any float dtype, summed in float32; for a ``tf.IndexedSlices`` gradient,
        the squares of each group's dense form). For the step, a sequence of ``n`` in the
        gradients' order; on its way through the channel, a mapping ``{variable key:
        tensor}`` (the family's ``_vrgd_var_key``; None where the gradient is None), put in
        the order of the gradients by :meth:`in_order`. None: the step squares the
        gradients itself (only with ``num_groups == 1``).
      num_groups: Python int >= 1, the groups ``m`` per replica.
      count: None (inferred from the gradients' values), or this replica's contributing
        samples (``docs/spec.md`` section 1: those holding an example of nonzero weight), a
        Python int in ``[0, num_groups]`` or a scalar int or float tensor (clipped to that
        range).
    """

    sq_sums: Union[Sequence, Mapping, None]
    num_groups: int = 1
    count: object = None

    def in_order(self, keys: Sequence) -> "GroupSquares":
        """This record with ``sq_sums`` the list ``[sq_sums[key] for key in keys]`` (None
        for a key that is None). Raises KeyError for a key not in a mapping ``sq_sums``."""
        ordered = [None if k is None else self.sq_sums[k] for k in keys]
        return GroupSquares(ordered, self.num_groups, self.count)


class Local(NamedTuple):
    """This replica's contribution to one step.

    Attributes:
      gradients: float32 flat ``[size]`` per all-reduced entry (``DENSE``, ``FLOAT64``,
        ``SPARSE_DENSE``, in layout order).
      squares: float32 flat ``[size]``, their squares or the given sums of squares.
      sparse: the ``tf.IndexedSlices`` of the ``SPARSE_DENSE`` entries (the strategy's own
        sparse SUM carries their rows).
      wide: the float64 gradients of the ``FLOAT64`` entries (summed in float64 too).
      rows: ``(indices, packed)`` per ``SPARSE_ROWS`` entry (:func:`sparse.local_rows`).
      count: float32 scalar, this replica's contributing samples (0 to ``m``).
      half: None, or float32 ``[2 M]``: the split-half subsample ``[x, q]`` masked to half
        A (:func:`vrgd_tf.gsnr.halves.local_half`), in an all-reduce call of its own.
      stray: None (0), or float32 scalar: 1 when this replica's given count is 0 and its
        gradient is nonzero (a stray gradient, see the module), else 0.
    """

    gradients: Tuple[tf.Tensor, ...]
    squares: Tuple[tf.Tensor, ...]
    sparse: Tuple[tf.IndexedSlices, ...]
    wide: Tuple[tf.Tensor, ...]
    rows: Tuple[Tuple[tf.Tensor, tf.Tensor], ...]
    count: tf.Tensor
    half: Optional[tf.Tensor] = None
    stray: Optional[tf.Tensor] = None


class Summed(NamedTuple):
    """The sums over all samples, per block of the layout (None where not applicable).

    Attributes:
      s1: float32 flat ``[size]`` per block, ``S1 = sum_d x_d`` (on a ``SPARSE_ROWS``
        block, on its slots).
      s2: float32 flat ``[size]`` per block, ``S2 = sum_d x_d**2``.
      rows: :class:`vrgd_tf.gsnr.sparse.SparseRows` of ``SPARSE_ROWS`` entries.
      sparse: the strategy's SUM of ``SPARSE_DENSE`` entries' ``tf.IndexedSlices``.
      wide: float64 sums of ``FLOAT64`` entries.
      count: float32 scalar, the contributing samples ``k`` of the step.
      half: None, or float32 ``[2 M]``: half A's sums of the split-half subsample
        (``[S1_A, S2_A]``, ``vrgd_tf.gsnr.halves``).
      stray: float32 scalar, the replicas that sent a stray gradient (see the module).
    """

    s1: Tuple[tf.Tensor, ...]
    s2: Tuple[tf.Tensor, ...]
    rows: Tuple[Optional[sparse.SparseRows], ...]
    sparse: Tuple[Optional[object], ...]
    wide: Tuple[Optional[tf.Tensor], ...]
    count: tf.Tensor
    half: Optional[tf.Tensor] = None
    stray: Optional[tf.Tensor] = None


def _dense_float32(grad, entry) -> tf.Tensor:
    if isinstance(grad, tf.IndexedSlices):
        grad = sparse.densify(grad, entry.shape)
    return tf.reshape(tf.cast(grad, tf.float32), [-1])


#: The share of a replica's gradients :func:`any_nonzero` reads first.
_FIRST_SHARE = 1.0 / 16.0


def nonzero_or_nan(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """Whether some element of ``tensors`` is nonzero or NaN (``docs/spec.md`` section 1:
    the inferred test of a contributing sample).

    Args:
      tensors: a list of float tensors (any dtypes and shapes), each read whole and
        compared in its own dtype (:func:`any_nonzero` reads the smallest first).

    Returns:
      A scalar bool tensor; True also where a value is +-Inf, False for an empty list.
    """
    if not tensors:
        return tf.constant(False)
    # The sums of the magnitudes, each compared in its own dtype (a float64 1e-300 is 0 in
    # float32): > 0 exactly where some value is nonzero (a sum that overflows is Inf, still
    # > 0), and NaN where one is (a non-finite gradient counts, so such a step keeps its k
    # and is only told apart by its non-finite sums). Not the max: XLA's CPU max drops NaN,
    # and grappler and XLA rewrite "not <= 0" into "> 0".
    flags = []
    for t in tensors:
        total = tf.reduce_sum(tf.abs(t))
        flags.append((total > 0) | tf.math.is_nan(total))
    return tf.reduce_any(tf.stack(flags))


def any_nonzero(values: Sequence[tf.Tensor]) -> tf.Tensor:
    """Scalar bool: whether some element of ``values`` (float tensors of any sign: this
    replica's gradients, or the values of its sparse rows) is nonzero or NaN, i.e. whether
    the replica contributes when its count is inferred (``docs/spec.md`` section 1). A
    value of 1e-24, whose square is 0 in float32, is nonzero.

    The smallest tensors, about ``_FIRST_SHARE`` of the elements (at least one tensor), are
    read first; the others only in a ``tf.cond`` taken when those are all zero. A replica
    with examples then reads about a sixteenth of its gradients here instead of all of them
    (a memory read of every variable's size saved per step), with the same answer.
    """
    tensors = sorted((t for t in values if t.shape.num_elements()), key=_num_elements)
    if not tensors:
        return tf.constant(False)
    sizes = list(itertools.accumulate(_num_elements(t) for t in tensors))
    first = max(1, sum(1 for n in sizes if n <= _FIRST_SHARE * sizes[-1]))
    head, rest = tensors[:first], tensors[first:]
    if not rest:
        return nonzero_or_nan(head)
    return tf.cond(nonzero_or_nan(head), lambda: tf.constant(True), lambda: nonzero_or_nan(rest))


def _num_elements(tensor) -> int:
    return tensor.shape.num_elements()


def local_samples(layout, grads, sq_sums: Optional[Sequence] = None, count=None) -> Local:
    """This replica's :class:`Local` for the step (pure).

    Args:
      layout: the step's :class:`~vrgd_tf.gsnr.layout.Layout`.
      grads: the ``n`` gradients, in layout order.
      sq_sums: None, or ``n`` dense tensors: the sums over the micro-batch groups of the
        squared gradients (:attr:`GroupSquares.sq_sums`; then the squares are not taken
        here).
      count: None (inferred, see the module), or this replica's contributing samples
        (:attr:`GroupSquares.count`: a Python int or scalar tensor, clipped to
        ``[0, m]``).
    """
    reduced = layout.on(*layout_lib.ALL_REDUCED)
    gradients = tuple(_dense_float32(grads[e.position], e) for e in reduced)
    if sq_sums is None:
        squares = tuple(tf.square(x) for x in gradients)
    else:
        squares = tuple(tf.reshape(tf.cast(sq_sums[e.position], tf.float32), [-1]) for e in reduced)
    rows = tuple(
        sparse.local_rows(grads[e.position], e.shape) for e in layout.on(layout_lib.SPARSE_ROWS)
    )
    # The values, not the squares (a gradient of 1e-24 has squares 0 in float32), and the
    # rows' values as on the dense path (spec section 1), whatever the paths.
    values = list(gradients) + [sparse.packed_values(p) for _, p in rows]
    count, stray = _count_and_stray(values, count, float(layout.num_groups))
    return Local(
        gradients=gradients,
        squares=squares,
        sparse=tuple(grads[e.position] for e in layout.on(layout_lib.SPARSE_DENSE)),
        wide=tuple(grads[e.position] for e in layout.on(layout_lib.FLOAT64)),
        rows=rows,
        count=count,
        stray=stray,
    )


def _count_and_stray(values, count, num_groups: float):
    """float32 scalars ``(count, stray)`` of this replica (see the module): inferred from
    ``values`` when ``count`` is None (stray 0), else ``count`` clipped to
    ``[0, num_groups]`` and stray 1 when it is 0 and some value is nonzero (read only then)."""
    if count is None:
        return tf.cast(any_nonzero(values), tf.float32) * num_groups, tf.constant(0.0)
    count = tf.clip_by_value(tf.cast(count, tf.float32), 0.0, num_groups)
    stray = tf.cond(tf.equal(count, 0.0), lambda: any_nonzero(values), lambda: tf.constant(False))
    return count, tf.cast(stray, tf.float32)


def assemble(layout, grads, reduced) -> Summed:
    """The :class:`Summed` record from what the collectives returned (pure).

    Args:
      layout: the step's layout.
      grads: the ``n`` gradients (for the sparse rows' dtype and dense shape).
      reduced: :class:`vrgd_tf.gsnr.collectives.Reduced`.
    """
    n = len(layout.blocks)
    s1, s2, rows, sums, wide = [None] * n, [None] * n, [None] * n, [None] * n, [None] * n
    entries = layout.on(*layout_lib.ALL_REDUCED)
    sums1 = {e.position: a for e, a in zip(entries, reduced.gradients)}
    sums2 = {e.position: q for e, q in zip(entries, reduced.squares)}
    for b in layout.blocks_on(*layout_lib.ALL_REDUCED):
        s1[b.index] = packing.concat([sums1[e.position] for e in b.entries])
        s2[b.index] = packing.concat([sums2[e.position] for e in b.entries])
    for b, r in zip(layout.blocks_on(layout_lib.SPARSE_DENSE), reduced.sparse):
        sums[b.index] = r
    for b, w in zip(layout.blocks_on(layout_lib.FLOAT64), reduced.wide):
        wide[b.index] = w
    for b, (indices, packed) in zip(layout.blocks_on(layout_lib.SPARSE_ROWS), reduced.rows):
        e = b.entries[0]
        r = sparse.union_rows(grads[e.position], e.shape, indices, packed)
        s1[b.index], s2[b.index], rows[b.index] = r.s1, r.s2, r
    stray = tf.constant(0.0) if reduced.stray is None else reduced.stray
    return Summed(
        tuple(s1),
        tuple(s2),
        tuple(rows),
        tuple(sums),
        tuple(wide),
        reduced.count,
        reduced.half,
        stray,
    )
