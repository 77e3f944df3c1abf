"""The ``tf.distribute`` strategies VRGD runs under, and the refusal of the others.

VRGD's GSNR step (spec ``docs/spec.md``) needs synchronous data parallelism: every replica
takes part in one all-reduce of the gradients and of their squares per step, and keeps the
VRGD state as replica-local variables (``ON_READ``, ``ONLY_FIRST_REPLICA``) that each replica
writes in its own context, some of them under a ``tf.cond`` (the diagnostics on the
``statistics_interval`` steps).

* Default strategy, ``OneDeviceStrategy``: one replica; VRGD steps as its base optimizer
  (with one warning) unless micro-batch groups give it ``k >= 2`` samples.
* ``MirroredStrategy``, ``MultiWorkerMirroredStrategy``, ``TPUStrategy``: synchronous
  replicas with replica-local variables; what VRGD is made for.
* ``CentralStorageStrategy`` (both APIs) keeps one central copy of every variable, including
  the replica-local ones (an ``AggregatingVariable``), so each write from a replica is a
  ``merge_call``, which TensorFlow cannot run inside the ``tf.cond``: the first step fails
  deep in the graph. Refused here, at construction and build.
* ``ParameterServerStrategy`` (both APIs) trains its workers asynchronously (TF2, with a
  ``ClusterCoordinator``), with no all-reduce across them: there is no set of replicas whose
  gradients VRGD could compare. Refused.
"""

import tensorflow as tf

__all__ = ["UNSUPPORTED", "check_strategy"]

#: ``(strategy classes, public name, why)`` for each kind of strategy VRGD refuses.
UNSUPPORTED = (
    (
        (
            tf.distribute.experimental.CentralStorageStrategy,
            tf.compat.v1.distribute.experimental.CentralStorageStrategy,
        ),
        "tf.distribute.experimental.CentralStorageStrategy",
        "keeps one central copy of VRGD's replica-local state, which each replica would "
        "have to write through a merge call inside the step's conditional; TensorFlow "
        "cannot run that",
    ),
    (
        (
            tf.distribute.experimental.ParameterServerStrategy,
            tf.compat.v1.distribute.experimental.ParameterServerStrategy,
        ),
        "tf.distribute.experimental.ParameterServerStrategy",
        "trains its workers asynchronously, with no all-reduce across them, so there are "
        "no replicas in sync whose gradients VRGD could compare",
    ),
)

_INSTEAD = (
    "VRGD needs synchronous replicas: use tf.distribute.MirroredStrategy (several devices "
    "on one machine; vrgd_tf.devices.cpu_strategy splits a CPU), "
    "MultiWorkerMirroredStrategy (several machines) or TPUStrategy, or train on one "
    "device with micro-batch groups (vrgd_tf.use_micro_batches, "
    "`optimizer.apply_grouped_gradients`)."
)


def check_strategy(strategy, owner: str) -> None:
    """Raises if VRGD cannot run under ``strategy``.

    Args:
      strategy: a ``tf.distribute.Strategy`` (e.g. ``tf.distribute.get_strategy()``).
      owner: the name of the optimizer or aggregator, for the message.

    Raises:
      ValueError: ``strategy`` is a ``CentralStorageStrategy`` or a
        ``ParameterServerStrategy`` (either API); the message names it, says why, and what
        works instead.
    """
    for classes, name, why in UNSUPPORTED:
        if isinstance(strategy, classes):
            raise ValueError(f"{owner} cannot run under {name}: it {why}. {_INSTEAD}")
