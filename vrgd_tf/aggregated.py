"""Which gradients are already summed over the replicas by a GSNR step.

A :class:`vrgd_tf.GSNRAggregator` call returns the variance-reduced SUM over all replicas
(the same tensor value on every replica). Fed to anything that all-reduces again (a Keras 3
optimizer's ``apply`` under more than one replica, a tf_keras optimizer's default
``apply_gradients``, a VRGD optimizer or a second aggregator call) the step would be ``k``
times too long (``k`` replicas), with normal-looking statistics. So every GSNR step marks
what it returns, and those places refuse marked gradients with the fix
(:func:`check_not_aggregated`); the tf_keras VRGD optimizers accept
``experimental_aggregate_gradients=False`` only for marked ones (:func:`all_aggregated`).

The marks are weak, by identity: tensors are unhashable, so each is keyed by ``id`` with a
weak reference that removes the entry when the tensor is freed (and guards against a
reused ``id``). They are Python objects seen while a step is traced (or run eagerly), never
tensors in the step, so the step is unchanged (XLA included). A gradient transformed after
the GSNR step (clipped, cast, unscaled) is a new tensor and carries no mark.
"""

import weakref
from typing import Iterable, Sequence

import tensorflow as tf

__all__ = ["mark_aggregated", "all_aggregated", "any_aggregated", "check_not_aggregated"]

_MARKS = {}


def mark_aggregated(grads: Iterable) -> None:
    """Marks each non-None gradient in ``grads`` as summed over the replicas by VRGD."""
    for g in grads:
        if g is not None:
            key = id(g)
            _MARKS[key] = weakref.ref(g, lambda _, key=key: _MARKS.pop(key, None))


def _is_marked(g) -> bool:
    ref = _MARKS.get(id(g))
    return ref is not None and ref() is g


def all_aggregated(grads: Sequence) -> bool:
    """Whether every non-None gradient in ``grads`` was returned by a GSNR step."""
    return all(g is None or _is_marked(g) for g in grads)


def any_aggregated(grads: Sequence) -> bool:
    """Whether some gradient in ``grads`` was returned by a GSNR step."""
    return any(g is not None and _is_marked(g) for g in grads)


def check_not_aggregated(grads: Sequence, where: str, fix: str) -> None:
    """Raises if ``grads`` holds a GSNR step's output and more than one replica is in sync.

    Args:
      grads: the gradients about to be all-reduced (summed over the replicas) by ``where``.
      where: what would sum them again, for the message (e.g. ``"SGD.apply"``).
      fix: what to do instead, one or more sentences.

    Raises:
      ValueError: naming ``where``, the replica count, the factor it would be off by, and
        ``fix``.
    """
    ctx = tf.distribute.get_replica_context()
    replicas = 1 if ctx is None else ctx.num_replicas_in_sync
    if replicas > 1 and any_aggregated(grads):
        raise ValueError(
            f"{where} received gradients that a vrgd_tf GSNR step (GSNRAggregator or a VRGD "
            f"optimizer) has already summed over the {replicas} replicas, and would sum them "
            f"again: the step would be {replicas} times too long. {fix}"
        )
