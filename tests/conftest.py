"""Test setup: 8 logical CPU devices, made before TensorFlow initialises its runtime."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

NUM_LOGICAL_CPUS = 8

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)
except RuntimeError:  # already initialised by an earlier import: keep what is there
    pass
