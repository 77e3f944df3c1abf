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

import tensorflow as tf  # noqa: E402

# tf.test.TestCase has a deprecated `test_session` context manager (TF1's
# `with self.test_session():`) that unittest's loader, and so pytest, takes for a test: it
# "skips" once per test class ("Not a test."). pytest's unittest collector honours
# `__test__ = False` on a method, so it is not collected and the summary counts real tests.
tf.test.TestCase.test_session.__test__ = False
