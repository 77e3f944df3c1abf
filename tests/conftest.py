"""Test setup: 8 logical CPU devices, made before TensorFlow initialises its runtime."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from vrgd_tf import devices  # noqa: E402

NUM_LOGICAL_CPUS = 8

devices.split_cpu(NUM_LOGICAL_CPUS, argument="NUM_LOGICAL_CPUS")
