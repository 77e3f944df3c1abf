"""The split-half reliability of the GSNR inside the step (``docs/spec.md`` section 4).

A diagnostic: it changes no gradient, factor or weight (outside XLA bit for bit: the
collectives sum every buffer in replica order whatever else reads it,
:func:`vrgd_tf.gsnr.collectives.in_replica_order`; under XLA the step with it is another
program, whose fusions may round a factor differently in its last bits). Half A is the samples of the replicas with id below
``R // 2`` (``k_A = (R // 2) * m`` samples of the ``k = R * m``), half B the others. Each
replica sends, in an all-reduce call of its own (``vrgd_tf.gsnr.collectives``, outside any
``tf.cond``, so on every step: a strategy's replica-context all-reduce cannot sit in a branch
taken only at recording steps), one float32 tensor ``[x_sub * a, q_sub * a]``: ``a = 1`` on
half A's replicas, 0 on the others, ``x_sub`` and ``q_sub`` a fixed strided subsample of
each all-reduced variable's flat float32 gradient and of its squares (with micro-batch
groups: the replica's group sums; float32 whatever ``squares_dtype``). At recording steps
:func:`rows` correlates the two halves' log GSNR on that subsample
(:func:`vrgd_tf.gsnr.reliability.split_half_reliability`).

The subsample of a variable keeps about one element in ``stride`` (the aggregator's
``statistics_interval``), at least ``min(size, 64)`` and at most 4096
(:func:`subsample_stride`). Static plan (:func:`plan`, Python at trace time): nothing travels when the stride is 0, or
a half would have fewer than 2 samples (``R < 4`` with one group; ``R == 1`` always, since
the step only has the groups' sums), or there is no all-reduced variable. Variables on the
exact sparse rows path (``SPARSE_ROWS``) are not measured (undefined rows). Per step it
adds ``8 M`` bytes, ``M`` the subsample size (about ``N / stride``, at most ``4096`` per
variable), and one all-reduce call: beside the gradients or the squares it would change
how ``CollectiveAllReduce`` chunks their sums, and so their last bits.
"""

import math
from typing import NamedTuple, Optional, Tuple

import tensorflow as tf

from vrgd_tf.gsnr import layout as layout_lib
from vrgd_tf.gsnr import reliability

__all__ = [
    "SUBSAMPLE_FLOOR",
    "SUBSAMPLE_CAP",
    "SPLIT_HALF_FIELDS",
    "NUM_SPLIT_HALF",
    "Plan",
    "subsample_stride",
    "plan",
    "local_half",
    "with_half",
    "rows",
]

#: Fewest elements of a variable the subsample keeps (all of them below that).
SUBSAMPLE_FLOOR = 64
#: Most elements of a variable the subsample keeps: the correlation over 4096 pairs has a
#: standard error of about ``1 / 64`` under pure noise, and the cost per step stays below
#: ``8 * 4096`` bytes per variable however large it is.
SUBSAMPLE_CAP = 4096

#: The per-variable values recorded, in storage order: the fields of
#: :class:`vrgd_tf.gsnr.reliability.SplitHalf` as named in ``vrgd_statistics()`` rows.
SPLIT_HALF_FIELDS = (
    "reliability",
    "reliability_correlation",
    "reliability_pairs",
    "reliability_defined",
)
NUM_SPLIT_HALF = len(SPLIT_HALF_FIELDS)


class Plan(NamedTuple):
    """What the split-half subsample of one step carries.

    Attributes:
      entries: the all-reduced :class:`~vrgd_tf.gsnr.layout.Entry` (in the order of
        :class:`vrgd_tf.gsnr.samples.Local`'s gradients).
      strides: one int >= 1 per entry, the subsample stride of its flat gradient.
      sizes: one int per entry, the subsample's length, ``ceil(size / stride)``.
      num_samples: int, ``k``.
      num_samples_a: int, ``k_A``.
      num_replicas_a: int, ``R // 2``: replicas with a lower id are half A.
    """

    entries: Tuple[layout_lib.Entry, ...]
    strides: Tuple[int, ...]
    sizes: Tuple[int, ...]
    num_samples: int
    num_samples_a: int
    num_replicas_a: int


def subsample_stride(shape, stride: int) -> int:
    """The stride of a variable's fixed subsample: about ``stride`` (int >= 1), keeping
    between ``min(size, SUBSAMPLE_FLOOR)`` and ``SUBSAMPLE_CAP`` elements, and coprime with
    every dimension of ``shape`` where one such stride does (so that the subsample of a
    flattened ``[..., d]`` kernel visits every index of each axis instead of one column in
    ``d``). 1 keeps every element."""
    dims = [int(d) for d in shape]
    size = math.prod(dims)
    low, high = min(size, SUBSAMPLE_FLOOR), SUBSAMPLE_CAP
    target = max(1, min(int(stride), size // SUBSAMPLE_FLOOR), -(-size // high))

    def fits(s):
        coprime = all(math.gcd(s, d) == 1 for d in dims if d > 1)
        return coprime and low <= -(-size // s) <= high

    for s in list(range(target, 2 * target + 32)) + list(range(target - 1, 0, -1)):
        if fits(s):
            return s
    return target


def plan(layout, stride: int) -> Optional[Plan]:
    """The step's :class:`Plan`, or None when nothing is measured (see the module).

    Args:
      layout: the step's :class:`~vrgd_tf.gsnr.layout.Layout`.
      stride: int >= 0, ``GSNROptions.split_half_stride``.
    """
    replicas_a = layout.num_replicas // 2
    k, k_a = layout.num_samples, replicas_a * layout.num_groups
    entries = layout.on(*layout_lib.ALL_REDUCED)
    if stride < 1 or k_a < 2 or k - k_a < 2 or not entries:
        return None
    strides = tuple(subsample_stride(e.shape, stride) for e in entries)
    sizes = tuple(-(-e.size // s) for e, s in zip(entries, strides))
    return Plan(entries, strides, sizes, k, k_a, replicas_a)


def _subsample(flats, strides) -> tf.Tensor:
    return tf.concat([x[::s] for x, s in zip(flats, strides)], 0)


def _subsample_blocks(plan_: Plan, blocks) -> tf.Tensor:
    """:func:`_subsample` of the entries' pieces of their blocks' flat buffers (``blocks``:
    one buffer per block of the layout)."""
    flats = [blocks[e.block][e.offset : e.offset + e.size] for e in plan_.entries]
    return _subsample(flats, plan_.strides)


def local_half(plan_: Plan, local, replica_context) -> tf.Tensor:
    """This replica's float32 ``[2 M]``: ``[x_sub, q_sub]`` of ``local`` (a
    :class:`vrgd_tf.gsnr.samples.Local`) times 1 on half A's replicas, 0 on the others."""
    replica = tf.convert_to_tensor(replica_context.replica_id_in_sync_group)
    in_a = tf.cast(replica < plan_.num_replicas_a, tf.float32)
    x = _subsample(local.gradients, plan_.strides)
    q = _subsample(local.squares, plan_.strides)
    return tf.concat([x, q], 0) * in_a


def with_half(plan_: Optional[Plan], local, replica_context):
    """``local`` (a :class:`vrgd_tf.gsnr.samples.Local`) with its ``half`` set to
    :func:`local_half` when there is a plan; unchanged when ``plan_`` is None."""
    if plan_ is None:
        return local
    return local._replace(half=local_half(plan_, local, replica_context))


def rows(plan_: Plan, layout, summed, rtol: float) -> tf.Tensor:
    """float32 ``[n, NUM_SPLIT_HALF]``, one row of :data:`SPLIT_HALF_FIELDS` per entry of
    ``layout`` (zeros, undefined, for the entries not measured), from the step's
    :class:`vrgd_tf.gsnr.samples.Summed` (``summed.half`` set). Pure."""
    s1 = _subsample_blocks(plan_, summed.s1)
    s2 = _subsample_blocks(plan_, summed.s2)
    s1_a, s2_a = tf.split(summed.half, 2)
    result = reliability.split_half_reliability(
        s1, s2, s1_a, s2_a, plan_.num_samples, plan_.num_samples_a, plan_.sizes, rtol=rtol
    )
    measured = tf.stack(
        [
            result.reliability,
            result.correlation,
            result.num_pairs,
            tf.cast(result.defined, tf.float32),
        ],
        axis=1,
    )
    where = {e.position: i for i, e in enumerate(plan_.entries)}
    zeros = tf.zeros([NUM_SPLIT_HALF])
    return tf.stack(
        [measured[where[e.position]] if e.position in where else zeros for e in layout.entries]
    )
