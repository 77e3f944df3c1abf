"""VRGD's per-variable state, and the one place the GSNR step reads and commits it.

:func:`read` gives the factor momentum's previous values per entry of the step's layout;
:func:`commit` writes the new ones and :func:`record` the diagnostics, each in a ``tf.cond``
on a predicate the step computes (finite sums, a GSNR this step, a recording step). Nothing
else of the step touches a variable.
"""

from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import tensorflow as tf

from vrgd_tf import naming
from vrgd_tf.gsnr import layout as layout_lib
from vrgd_tf.gsnr import packing
from vrgd_tf.gsnr.halves import NUM_SPLIT_HALF, SPLIT_HALF_FIELDS
from vrgd_tf.gsnr.statistics import NUM_STATISTICS, STATISTICS_FIELDS, has_gsnr

__all__ = [
    "VRGDState",
    "Previous",
    "read",
    "commit",
    "record",
    "untouched_statistics",
    "replica_local_variable",
    "variable_dtype",
]


def variable_dtype(kind: str, state_dtype: str = "float32") -> tf.DType:
    """The dtype of the state ``kind``: ``state_dtype`` for ``"deficit"`` (the per-element
    state), float32 for the others (``"statistics"``, ``"correction"``)."""
    return tf.as_dtype(state_dtype) if kind == "deficit" else tf.float32


def replica_local_variable(shape, name, dtype=tf.float32) -> tf.Variable:
    """A zero (float32 by default), non-trainable, ON_READ / ONLY_FIRST_REPLICA
    ``tf.Variable`` of ``shape``, made in the current strategy's scope and tracked by
    nobody."""
    return tf.Variable(
        tf.zeros(shape, dtype),
        trainable=False,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        name=name,
    )


def standalone_variable(kind, index, shape, reference, state_dtype="float32") -> tf.Variable:
    """The default ``make_variable`` of a standalone aggregator (``state_dtype`` bound): a
    zero ON_READ / ONLY_FIRST_REPLICA ``tf.Variable`` named ``vrgd_{kind}_{index}``, of
    :func:`variable_dtype`."""
    del reference
    return replica_local_variable(shape, f"vrgd_{kind}_{index}", variable_dtype(kind, state_dtype))


def default_var_key(variable):
    """``id`` of a variable, of its distributed container under a strategy."""
    v = getattr(variable, "value", variable)  # keras.Variable -> tf.Variable
    if callable(v) and not isinstance(v, tf.Variable):
        v = variable
    container = getattr(v, "_distributed_container", None)
    if container is not None:
        v = container()
    return id(v)


class VRGDState:
    """The per-variable state of VRGD, created by the optimizer's ``build``.

    Per trainable variable: ``deficit`` (float32, or bfloat16 with
    ``state_dtype="bfloat16"``; the variable's shape; only if ``beta_3 > 0``), ``correction`` (float32 scalar; only if ``beta_3 > 0``) and
    ``statistics`` (float32, shape ``[NUM_STATISTICS]``: see
    :class:`vrgd_tf.gsnr.GSNRStatistics`), and ``split_half`` (float32 ``[NUM_SPLIT_HALF]``,
    ``vrgd_tf.gsnr.halves.SPLIT_HALF_FIELDS``: the last recording step's split-half
    reliability).

    ``split_half`` is made by ``replica_local_variable``, not by ``make_variable``: no
    optimizer, module or checkpoint tracks it, so the saved formats (checkpoints, ``.keras``
    files, whose Keras 3 loader refuses a different count of optimizer variables) are those
    of the state without it, and after a restore it reads "undefined" until the next
    recording step (a diagnostic of this process's last recording step, never a restored
    value).

    All of them are replica-local (``synchronization=ON_READ``,
    ``aggregation=ONLY_FIRST_REPLICA``): every replica computes the same values from the
    same all-reduced sums and writes its own copy in the replica context, with no merge call
    or extra communication. Reads in the cross-replica context and checkpoints take the
    first replica's copy; a restore writes every copy.

    Args:
      make_variable: ``fn(kind, index, shape, reference_variable) -> variable`` that creates
        a zero-initialised, non-trainable, ON_READ / ONLY_FIRST_REPLICA variable of
        ``vrgd_tf.gsnr.state.variable_dtype(kind, state_dtype)`` tracked by the optimizer; ``kind`` is
        ``"statistics"``, ``"deficit"`` or ``"correction"`` and ``index`` the variable's
        position. Supplied by each family.
      var_key: ``fn(variable) -> hashable`` identifying a trainable variable, the same key
        the optimizer family uses for its slots.
      beta_3: Python float in [0, 1).
      state_dtype: ``"float32"`` or ``"bfloat16"``, the dtype of the deficits
        (:class:`vrgd_tf.settings.VRGDSettings`); their math is float32 either way
        (``read`` upcasts them, ``commit`` rounds at the write).

    Raises:
      TypeError: from :meth:`add_variables`, a ``make_variable`` that made a deficit of
        another dtype than ``state_dtype`` (it would be stored in that dtype silently).
    """

    def __init__(
        self, make_variable: Callable, var_key: Callable, beta_3: float, state_dtype="float32"
    ):
        self._make_variable = make_variable
        self._var_key = var_key
        self._beta_3 = beta_3
        self._state_dtype = variable_dtype("deficit", state_dtype)
        self._index = {}
        self.deficits: List = []
        self.corrections: List = []
        self.statistics: List = []
        self.split_half: List = []
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
            self.split_half.append(replica_local_variable([NUM_SPLIT_HALF], f"vrgd_split_half_{i}"))
            if self._beta_3 > 0.0:
                self.deficits.append(self._checked_deficit(i, var))
                self.corrections.append(self._make_variable("correction", i, [], var))

    def _checked_deficit(self, index, var):
        """The deficit ``make_variable`` makes for ``var``, of the dtype ``state_dtype``."""
        deficit = self._make_variable("deficit", index, var.shape, var)
        if tf.as_dtype(deficit.dtype) != self._state_dtype:
            raise TypeError(
                f"`state_dtype={self._state_dtype.name!r}`, but `make_variable` made the "
                f"deficit of {naming.variable_name(var)!r} {tf.as_dtype(deficit.dtype).name}. "
                "Make it of vrgd_tf.gsnr.state.variable_dtype(kind, state_dtype), or pass "
                f'`state_dtype="{tf.as_dtype(deficit.dtype).name}"`.'
            )
        return deficit

    def __contains__(self, variable) -> bool:
        """Whether ``variable`` has state here."""
        return self._var_key(variable) in self._index

    def index(self, variable) -> int:
        """Position of ``variable`` in the lists of state; KeyError if unknown."""
        return self._index[self._var_key(variable)]

    def rows(self, split_half: bool) -> Dict[str, Dict]:
        """The recorded diagnostics, ``{display name: row}`` (first replica's copies): the
        floats of ``STATISTICS_FIELDS``, ``has_gsnr`` and, if ``split_half``, the
        ``SPLIT_HALF_FIELDS`` (``reliability_pairs`` an int, ``reliability_defined`` a
        bool). Names: ``vrgd_tf.naming.display_names``."""
        out = {}
        names = naming.display_names(self.variable_names)
        for name, var, half in zip(names, self.statistics, self.split_half):
            row = dict(zip(STATISTICS_FIELDS, (float(x) for x in var.numpy())))
            row["has_gsnr"] = has_gsnr(row)
            if split_half:
                row.update(zip(SPLIT_HALF_FIELDS, (float(x) for x in half.numpy())))
                row["reliability_pairs"] = int(row["reliability_pairs"])
                row["reliability_defined"] = row["reliability_defined"] > 0.0
            out[name] = row
        return out


class Previous(NamedTuple):
    """The factor momentum before this step, per block of the layout: ``deficits`` float32
    ``[size]`` (a sparse entry's slot rows, 0 in empty slots; a pack's variables
    concatenated) and ``corrections`` float32 scalars (``[v]`` for a pack)."""

    deficits: Tuple[tf.Tensor, ...]
    corrections: Tuple[tf.Tensor, ...]


def _float32(value) -> tf.Tensor:
    """``value`` (a deficit or a piece of one, any float dtype) as float32: a bfloat16
    deficit is read into float32 and all its math is float32 (spec section 3)."""
    value = tf.convert_to_tensor(value)
    return value if value.dtype == tf.float32 else tf.cast(value, tf.float32)


def _stored(value, variable) -> tf.Tensor:
    """float32 ``value`` rounded to ``variable``'s dtype, for the write (the only rounding
    of a bfloat16 deficit)."""
    return value if variable.dtype == value.dtype else tf.cast(value, variable.dtype)


def _gather_rows(deficit, rows) -> tf.Tensor:
    """float32 ``[M * width]``: the slots' rows of ``deficit``; 0 in empty slots."""
    got = _float32(tf.gather(deficit, rows.safe_indices()))
    got = tf.reshape(got, [-1, rows.width])
    return tf.reshape(tf.where(rows.valid[:, None], got, 0.0), [-1])


def read(layout, state, rows) -> Previous:
    """The momentum state of every block (``beta_3 > 0``); ``rows`` are the step's
    :class:`vrgd_tf.gsnr.sparse.SparseRows` per block (None on other paths)."""
    deficits, corrections = [], []
    for b, r in zip(layout.blocks, rows):
        if b.path == layout_lib.SPARSE_ROWS:
            deficits.append(_gather_rows(state.deficits[b.entries[0].state_index], r))
        else:
            deficits.append(
                packing.concat(
                    [_float32(tf.reshape(state.deficits[e.state_index], [-1])) for e in b.entries]
                )
            )
        c = [tf.convert_to_tensor(state.corrections[e.state_index]) for e in b.entries]
        corrections.append(tf.stack(c) if b.packed else c[0])
    return Previous(tuple(deficits), tuple(corrections))


def _update_rows(deficit, rows, new_rows, decay) -> None:
    """``deficit *= decay`` (rows no replica touched: ``d_t = beta_3 d_{t-1}``, what the
    dense path's factor 1 gives), then the touched rows set to ``new_rows``.

    The decay is a dense ``assign`` (one transient tensor of the variable's shape per
    replica outside XLA; XLA updates in place). An in-place ``ResourceScatterMul`` of every
    row by the scalar would save that tensor, at the price of a scatter over every row of
    the variable instead of one streaming multiply (slower on CPU), and a lazy per-row
    decay needs a per-row step counter (new state).
    """
    deficit.assign(_stored(_float32(deficit) * decay, deficit))
    new_rows = tf.reshape(new_rows, [-1, rows.width])
    new_rows = tf.where(rows.valid[:, None], new_rows, new_rows[:1])  # empty slots: slot 0
    new_rows = _stored(tf.reshape(new_rows, [-1] + rows.row_shape.as_list()), deficit)
    tf.raw_ops.ResourceScatterUpdate(
        resource=deficit.handle, indices=rows.safe_indices(), updates=new_rows
    )


def commit(layout, state, deficits, corrections, rows, beta_3, predicate) -> None:
    """Writes the new momentum state (``d_t`` and ``c_t`` per block, as
    :class:`Previous` holds them) if ``predicate``.

    A branch, not a select between the new and the old deficit (which would keep a third
    tensor of every variable's size alive). The deficits are written before the
    corrections, in layout order.
    """

    def store():
        for b, r, d in zip(layout.blocks, rows, deficits):
            if b.path == layout_lib.SPARSE_ROWS:
                _update_rows(state.deficits[b.entries[0].state_index], r, d, beta_3)
                continue
            for e, piece in zip(b.entries, packing.pieces(d, b.sizes if b.packed else None)):
                var = state.deficits[e.state_index]
                var.assign(_stored(tf.reshape(piece, var.shape), var))
        for b, c in zip(layout.blocks, corrections):
            values = tf.unstack(c, num=len(b.entries)) if b.packed else [c]
            for e, value in zip(b.entries, values):
                state.corrections[e.state_index].assign(value)
        return tf.constant(True)

    tf.cond(predicate, store, lambda: tf.constant(False))


def untouched_statistics(state, entry, rows, correction) -> tf.Tensor:
    """float32 ``[2]``: what a sparse entry's rows outside its slots add to the count of
    elements at factor 1 and to the sum of the applied factor (the dense path's values for
    them: factor 1, and ``1 - d_t / c_t`` if ``beta_3 > 0``; ``correction`` is ``c_t`` or
    None). Empty slots already count as 1 in both, hence ``num_rows - M`` rows (may be
    negative) and the committed deficit's sums."""
    missing = tf.constant(float(entry.statistics_size - entry.size))
    applied = missing
    if correction is not None:
        deficit = state.deficits[entry.state_index]
        touched = tf.reduce_sum(_gather_rows(deficit, rows))
        untouched = tf.reduce_sum(_float32(deficit)) - touched
        applied = applied - untouched / correction
    return tf.stack([missing, applied])


def record(
    state, indices, make_rows: Callable[[], tf.Tensor], predicate, kind: str = "statistics"
) -> None:
    """Writes ``make_rows()`` (float32 ``[n, NUM_STATISTICS]``, or ``[n, NUM_SPLIT_HALF]``
    for ``kind="split_half"``; run inside the branch) into the state ``kind`` of the ``n``
    state ``indices`` if ``predicate`` (a Python bool or a scalar bool tensor)."""
    targets = getattr(state, kind)

    def write():
        for i, row in zip(indices, tf.unstack(make_rows(), num=len(indices))):
            targets[i].assign(row)
        return tf.constant(True)

    if predicate is True:
        write()
    elif predicate is not False:
        tf.cond(predicate, write, lambda: tf.constant(False))
