"""The layout of one GSNR step: what each gradient is and where its pieces go.

Built once per trace, in Python, from the gradients' static types and shapes: one
:class:`Entry` per gradient, naming its statistics path, its sizes and its state index. Every
later stage reads the entries instead of index lists.

Paths (spec sections 1 and 4):

* ``DENSE``: a dense gradient; float32 statistics and output ``f * S1``.
* ``FLOAT64``: a dense float64 gradient; float32 statistics, and ``S1`` also summed in
  float64 so the output is ``f * S1`` with the base's own sum.
* ``SPARSE_ROWS``: a ``tf.IndexedSlices`` with exact statistics on the rows some replica
  touched (one all-gather): :func:`rows_apply` holds, the values are not float64, no
  squares were handed over and the option ``sparse_statistics="rows"``.
* ``SPARSE_DENSE``: any other ``tf.IndexedSlices``: the statistics of its dense form, its
  rows summed by the strategy's own sparse SUM.

Blocks: every stage after the collectives works on blocks (:class:`Block`), not on entries (the
collectives carry one tensor per entry, as without blocks). A block is one entry, or the
*pack*: every ``DENSE`` entry of at most ``pack_limit`` elements (biases, normalisation
scales, small kernels), its sums flattened and concatenated in entry order. A stage then
runs its element-wise ops once over the pack instead of once per small variable, and only its
per-variable sums are taken per variable (one ``reduce_sum`` per piece of the pack, the
same values bit for bit as on the variable alone outside XLA: ``vrgd_tf.gsnr.packing``). On a CPU or GPU
each op costs a few microseconds whatever its size, so a model of many small variables paid
mostly for op dispatch (``docs/results.md``).
"""

from typing import NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

# The default ``pack_limit`` (how many elements a packed ``DENSE`` gradient may have) lives
# with the other options, which import no TensorFlow.
from vrgd_tf.gsnr.options import PACK_LIMIT

__all__ = [
    "DENSE",
    "FLOAT64",
    "SPARSE_ROWS",
    "SPARSE_DENSE",
    "PACK_LIMIT",
    "Entry",
    "Block",
    "Layout",
    "build_layout",
]

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
      block: int, the index of its :class:`Block` in ``Layout.blocks``.
      offset: int, where its elements start in its block's flat buffer (0 unless packed).
    """

    position: int
    path: str
    shape: tf.TensorShape
    size: int
    statistics_size: int
    state_index: Optional[int]
    dtype: tf.DType
    block: int = 0
    offset: int = 0


class Block(NamedTuple):
    """The unit the stages work on: one entry, or the pack of small ``DENSE`` entries.

    Attributes:
      entries: tuple of :class:`Entry`, its variables in the order of their elements in
        the block's flat buffer (one entry unless packed).
    """

    entries: Tuple[Entry, ...]

    @property
    def index(self) -> int:
        """Its position in ``Layout.blocks``."""
        return self.entries[0].block

    @property
    def path(self) -> str:
        """The path of its entries (a pack is ``DENSE``)."""
        return self.entries[0].path

    @property
    def packed(self) -> bool:
        """Whether it holds more than one entry."""
        return len(self.entries) > 1

    @property
    def sizes(self) -> Tuple[int, ...]:
        """The elements of each entry's factor, in order."""
        return tuple(e.size for e in self.entries)

    @property
    def size(self) -> int:
        """The elements of its flat buffer."""
        return sum(self.sizes)


class Layout(NamedTuple):
    """The entries of one step, their blocks and its static sample count.

    Attributes:
      entries: tuple of :class:`Entry`, in the order of the step's gradients.
      num_replicas: int, replicas in sync.
      num_groups: int, micro-batch groups per replica.
      blocks: tuple of :class:`Block`, every entry in exactly one, ordered by their first
        entry's position.
    """

    entries: Tuple[Entry, ...]
    num_replicas: int
    num_groups: int
    blocks: Tuple[Block, ...]

    @property
    def num_samples(self) -> int:
        """The static ``k = replicas * groups`` (the count of samples that may contribute)."""
        return self.num_replicas * self.num_groups

    def on(self, *paths) -> Tuple[Entry, ...]:
        """The entries on any of ``paths``, in order."""
        return tuple(e for e in self.entries if e.path in paths)

    def blocks_on(self, *paths) -> Tuple[Block, ...]:
        """The blocks on any of ``paths``, in order."""
        return tuple(b for b in self.blocks if b.path in paths)

    @property
    def block_order(self) -> Tuple[int, ...]:
        """For each entry (in position order), its index among the entries listed block by
        block: how per-variable rows computed block by block are put back in order."""
        listed = [e.position for b in self.blocks for e in b.entries]
        where = {p: i for i, p in enumerate(listed)}
        return tuple(where[e.position] for e in self.entries)


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
        # float64 rows take the dense-statistics path: the exact-rows all-gather carries
        # float32 values, the strategy's own sparse SUM the float64 ones (spec section 1).
        rows = sparse_statistics == "rows" and not squares_given
        rows = rows and grad.values.dtype != tf.float64
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
    pack_limit: int = PACK_LIMIT,
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
      pack_limit: int >= 0: ``DENSE`` entries of at most this many elements form one
        block, if there are at least two of them; 0 packs none.

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
    return _with_blocks(entries, num_replicas, num_groups, pack_limit)


def _with_blocks(entries, num_replicas, num_groups, pack_limit) -> Layout:
    """The layout of ``entries`` with their blocks (see the module) and each entry's block
    index and offset."""
    small = [e.position for e in entries if e.path == DENSE and 0 < e.size <= pack_limit]
    pack = set(small) if len(small) >= 2 else set()
    groups = []
    for e in entries:
        if e.position in pack and e.position != small[0]:
            continue
        groups.append(list(small) if e.position in pack else [e.position])
    placed = {}
    for b, positions in enumerate(groups):
        offset = 0
        for p in positions:
            placed[p] = entries[p]._replace(block=b, offset=offset)
            offset += entries[p].size
    entries = tuple(placed[e.position] for e in entries)
    blocks = tuple(Block(tuple(entries[p] for p in positions)) for positions in groups)
    return Layout(entries, num_replicas, num_groups, blocks)
