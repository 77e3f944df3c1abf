"""Test setup: 8 logical CPU devices, made before TensorFlow initialises its runtime; the
examples' folders on ``sys.path`` (they are scripts, not installed: ``examples/README.md``)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from vrgd_tf import devices  # noqa: E402

NUM_LOGICAL_CPUS = 8

devices.split_cpu(NUM_LOGICAL_CPUS, argument="NUM_LOGICAL_CPUS")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _folder in ("digits", "data"):
    sys.path.insert(0, os.path.join(REPO, "examples", _folder))
