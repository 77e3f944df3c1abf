"""Logical CPU devices: data parallelism on a machine without accelerators.

TensorFlow can split its CPU into several logical devices, so that ``MirroredStrategy`` runs
one replica per device and VRGD sees several replicas on a laptop or a CI runner. The split
must be made before TensorFlow initialises its runtime (before the first op, strategy or
device listing). The demo, ``tpu_scripts/train.py``, the benchmarks and the tests all use
:func:`split_cpu`, and :func:`cpu_strategy` for a ``MirroredStrategy`` over those devices.
"""

from typing import List

import tensorflow as tf

__all__ = ["split_cpu", "cpu_strategy", "local_worker_addresses"]


def split_cpu(num_devices: int, *, argument: str = "num_devices") -> List[str]:
    """Makes (if it still can) and returns ``num_devices`` logical CPU device names.

    Splits the first physical CPU into ``num_devices`` logical devices if TensorFlow's
    runtime is not initialised yet and fewer exist; if it is already initialised (e.g. by a
    test's ``conftest.py``) with at least ``num_devices``, the first ``num_devices`` are
    reused.

    Args:
      num_devices: int >= 1.
      argument: the user-facing name of ``num_devices`` (a flag such as ``--replicas``),
        quoted in the error.

    Returns:
      The first ``num_devices`` logical CPU device names, e.g.
      ``['/device:CPU:0', '/device:CPU:1']``.

    Raises:
      ValueError: ``num_devices`` < 1, or TensorFlow was already initialised with fewer
        logical CPUs (the message names ``argument`` and says to configure first).
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"`{argument}` must be an int >= 1; got {num_devices!r}.")
    cpus = tf.config.list_physical_devices("CPU")
    if not cpus:  # pragma: no cover - TensorFlow always has a CPU
        raise ValueError("TensorFlow sees no CPU device.")
    try:
        current = tf.config.get_logical_device_configuration(cpus[0]) or []
        if len(current) < num_devices:
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices
            )
    except RuntimeError:
        pass  # Already initialised: keep what is there.
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < num_devices:
        raise ValueError(
            f"{argument}={num_devices} needs {num_devices} logical CPU devices, but "
            f"TensorFlow was already initialised with {len(logical)}. Split the CPU before "
            "anything else touches TensorFlow (in a fresh process), or use fewer."
        )
    return [d.name for d in logical[:num_devices]]


def cpu_strategy(
    num_replicas: int, *, argument: str = "num_replicas"
) -> tf.distribute.MirroredStrategy:
    """A ``MirroredStrategy`` over the first ``num_replicas`` logical CPUs (:func:`split_cpu`).

    Its all-reduce is ``tf.distribute.ReductionToOneDevice``: on CPU, the collective
    all-reduce keys of several strategies of different sizes in one process can clash; the
    sums are the same.

    Args:
      num_replicas: int >= 1, the replicas in sync.
      argument: the user-facing name of ``num_replicas``, quoted in errors.

    Returns:
      The strategy, ``num_replicas_in_sync == num_replicas``.

    Raises:
      ValueError: as :func:`split_cpu` (``num_replicas`` < 1, or too few logical CPUs).
    """
    return tf.distribute.MirroredStrategy(
        split_cpu(num_replicas, argument=argument),
        cross_device_ops=tf.distribute.ReductionToOneDevice(),
    )


def local_worker_addresses(num_workers: int) -> List[str]:
    """``num_workers`` distinct ``"127.0.0.1:<port>"`` addresses with ports free right now.

    For a ``TF_CONFIG`` cluster of ``MultiWorkerMirroredStrategy`` worker processes on this
    machine (tests, benchmarks): each port is bound by the OS (port 0) and released, so a
    worker started soon after can take it.

    Args:
      num_workers: int >= 1.

    Raises:
      ValueError: ``num_workers`` is not an int >= 1.
    """
    import socket

    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"`num_workers` must be an int >= 1; got {num_workers!r}.")
    socks = [socket.socket() for _ in range(num_workers)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    finally:
        for s in socks:
            s.close()
