"""Every collective of the GSNR step, and nothing else (spec section 1).

A step makes, in this order and outside any ``tf.cond`` (so it compiles with XLA and runs
under ``TPUStrategy``), the same calls on every replica:

1. one ``all_reduce(SUM)`` of the gradients alone: the float32 gradients of the
   all-reduced entries (one tensor per variable, in the variables' order) and the
   ``tf.IndexedSlices`` of the sparse gradients on the dense path (the strategy's own sparse
   SUM). For float32 variables this is the base optimizer's own call (Keras 3's
   ``_all_reduce_sum_gradients``, tf_keras' ``_aggregate_gradients``): the same dense tensors
   in the same order, and nothing else, since ``CollectiveAllReduce`` (``MirroredStrategy``'s
   default, ``MultiWorkerMirroredStrategy``) concatenates a call's dense tensors into one
   buffer and sums it in chunks whose order depends on the offsets: a tensor summed beside
   others can differ in its last bits from the same tensor summed alone. So every strategy
   sums each gradient element exactly as it sums the base's (spec section 1);
2. one ``all_reduce(SUM)`` of their squares, float32 or bfloat16 (``squares_dtype``), and,
   beside float32 squares, this replica's count of contributing samples and its stray flag
   (one float32 ``[2]`` tensor, ``vrgd_tf.gsnr.samples``): a call of their own, since ``MultiWorkerMirroredStrategy`` concatenates a call's
   dense tensors into one buffer of one dtype, and one buffer of gradients and squares took
   twice as long as two calls over its RING collective (``docs/results.md``);
3. if not empty, one ``all_reduce(SUM)`` of float32 extras: the count and stray flag
   (beside bfloat16 squares, which cannot carry it exactly), then, with the split-half reliability on
   (``split_half_stride``), the subsample ``[x, q]`` masked to half A (one float32 tensor,
   ``vrgd_tf.gsnr.halves``). The subsample has a call of its own so that calls 1 and 2 are
   the same with it and without it;
4. if there are float64 gradients, one ``all_reduce(SUM)`` of them in float64 (for float64
   variables the base's own call, as call 1 is for float32 ones);
5. if there are sparse gradients on the exact rows path, one ``all_gather(axis=0)`` of their
   indices and rows packed with squares (and of the count and stray flag, if no call 1
   carries gradients).

Calls 1 to 3 exist when some gradient is all-reduced (an entry on a dense path).

Summation order: every dense tensor a call sums is first made a buffer that only the
all-reduce holds (:func:`in_replica_order`), so that ``ReductionToOneDevice``
(``vrgd_tf.devices``' strategies) sums it in replica order on every step, whatever else reads
the gradients and when: the sums, and with them every factor and weight, are the same bit
for bit from run to run and with the split-half reliability on or off (spec section 4).

With one sample per step there is no GSNR: :func:`sum_plain` is the base's own all-reduce.
:func:`all_replicas_finite` is the loss-scale optimizers' all-reduced finiteness flag.
"""

from typing import NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from vrgd_tf.gsnr.samples import Local

__all__ = [
    "Reduced",
    "in_replica_order",
    "all_reduce_samples",
    "sum_plain",
    "all_replicas_finite",
]

_SUM = tf.distribute.ReduceOp.SUM


class Reduced(NamedTuple):
    """What the collectives of one step returned (fields as in
    :class:`vrgd_tf.gsnr.samples.Local`, summed over the replicas; ``rows`` gathered)."""

    gradients: Tuple[tf.Tensor, ...]
    squares: Tuple[tf.Tensor, ...]
    sparse: Tuple[object, ...]
    wide: Tuple[tf.Tensor, ...]
    rows: Tuple[Tuple[tf.Tensor, tf.Tensor], ...]
    count: Optional[tf.Tensor]
    half: Optional[tf.Tensor] = None
    stray: Optional[tf.Tensor] = None


def all_reduce_samples(local: Local, replica_context, squares_dtype="float32") -> Reduced:
    """The collectives of one GSNR step (see the module docstring), in their fixed order.

    Args:
      local: this replica's :class:`vrgd_tf.gsnr.samples.Local`.
      replica_context: the ``tf.distribute.ReplicaContext``.
      squares_dtype: ``"float32"`` or ``"bfloat16"``, the dtype the squares travel in
        (returned as float32).
    """
    ctx = replica_context
    stray = tf.constant(0.0) if local.stray is None else local.stray
    gradients, squares, sparse, count, half = (), (), (), tf.stack([local.count, stray]), None
    # The other readers of the summed buffers: the squares read the gradients, the count
    # and the split-half subsample the squares (and the gradients).
    readers = list(local.squares) + [count] + ([] if local.half is None else [local.half])
    if local.gradients:
        # Call 1: the gradients alone, as the base optimizer sends them (see the module).
        n = len(local.gradients)
        first = ctx.all_reduce(
            _SUM, in_replica_order(local.gradients, readers) + list(local.sparse)
        )
        gradients, sparse = tuple(first[:n]), tuple(first[n:])
        # Call 2: the squares, with the count when they are float32; call 3 (if not empty):
        # the count beside bfloat16 squares, and the split-half subsample.
        count_with_squares = squares_dtype != "bfloat16"
        wire = tf.float32 if count_with_squares else tf.bfloat16
        second = [tf.cast(q, wire) for q in local.squares] + [count] * count_with_squares
        third = [count] * (not count_with_squares) + ([] if local.half is None else [local.half])
        sq = ctx.all_reduce(_SUM, in_replica_order(second, readers))
        extra = ctx.all_reduce(_SUM, in_replica_order(third, readers)) if third else []
        squares = tuple(tf.cast(q, tf.float32) for q in sq[: len(local.squares)])
        scalars = list(sq[len(local.squares) :]) + list(extra)  # [count] + [half]
        count, half = scalars[0], (None if local.half is None else scalars[1])  # [2]
    wide = ()
    if local.wide:
        wide = tuple(ctx.all_reduce(_SUM, in_replica_order(local.wide, local.gradients)))
    rows = ()
    if local.rows:
        flat = [t for pair in local.rows for t in pair]
        if not local.gradients:
            flat.append(count)
        gathered = ctx.all_gather(flat, axis=0)
        # CollectiveAllReduce's gather of int64 indices loses the static length; restore it.
        r = ctx.num_replicas_in_sync
        for g, t in zip(gathered, flat):
            g.set_shape([r * t.shape[0]] + t.shape[1:].as_list())
        pairs = gathered[: 2 * len(local.rows)]
        rows = tuple(zip(pairs[0::2], pairs[1::2]))
        if not local.gradients:
            count = tf.reduce_sum(tf.reshape(gathered[-1], [-1, 2]), axis=0)
    return Reduced(gradients, squares, sparse, wide, rows, count[0], half, count[1])


def in_replica_order(tensors: Sequence[tf.Tensor], readers: Sequence = ()) -> list:
    """``tensors`` (dense) as the operands of an all-reduce that sums them in replica order.

    TensorFlow's CPU ``AddN``, the sum of ``tf.distribute.ReductionToOneDevice``, accumulates
    in place into the first operand whose buffer no other op holds, and adds that operand
    first. Which one that is depends on which of the other readers of the operands' buffers
    (the squares, the count, the split-half subsample, the caller's ops) have run yet: a race
    that reorders a float32 sum, and changes its last bits, from one step to the next and
    between the step with and without the split-half reliability. Each operand here is a
    ``Snapshot`` taken after ``readers`` (this replica's other readers of those buffers): the
    buffer itself when nothing else holds it, else a copy. Only the all-reduce holds it, so
    replica 0's operand is the one accumulated into and the sum is ``x_0 + x_1 + ...`` in
    replica order. The snapshots are named by replica (``vrgd_sum_operands/replica_00000/``
    ...), since graph rewrites order an ``AddN``'s operands by name: the order then does not
    depend on the optimizer's name. The identity under XLA.

    Args:
      tensors: the dense tensors of one all-reduce call.
      readers: tensors computed from the same buffers that must exist first.

    Returns:
      A list of ``len(tensors)`` tensors of the same values.
    """
    with tf.control_dependencies(list(readers)), tf.name_scope(_operand_scope()):
        return [tf.raw_ops.Snapshot(input=t) for t in tensors]


def _operand_scope() -> str:
    # An absolute name scope that sorts by replica: graph rewrites order an AddN's operands
    # by their node names, and MirroredStrategy names replica d > 0's ops "replica_d/...",
    # replica 0's without a prefix, so under the optimizer's own name scope replica 0's
    # operand went last whenever that name sorted after "replica_" (any name from "s" on:
    # Keras' default "sgd", "vrgd_lamb"), and the sum left the base's order.
    context = tf.distribute.get_replica_context()
    replica = None if context is None else tf.get_static_value(context.replica_id_in_sync_group)
    return "" if replica is None else f"vrgd_sum_operands/replica_{int(replica):05d}/"


def sum_plain(grads, replica_context):
    """The base optimizer's all-reduce (SUM) of ``grads`` (a list), for a step without a
    GSNR (one sample)."""
    return replica_context.all_reduce(_SUM, list(grads)) if grads else []


def all_replicas_finite(finite, replica_context) -> tf.Tensor:
    """Whether ``finite`` (this replica's scalar bool) holds on every replica: one scalar
    all-reduce, or ``finite`` itself on one replica."""
    if replica_context is None or replica_context.num_replicas_in_sync == 1:
        return finite
    not_finite = replica_context.all_reduce(_SUM, 1.0 - tf.cast(finite, tf.float32))
    return tf.equal(not_finite, 0.0)
