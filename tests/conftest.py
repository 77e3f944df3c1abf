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

# The slowest files first, longest first (seconds on 2 idle cores, the suite of 2026-12-05):
# each file runs in one worker (``--dist loadfile``, in collection order with
# ``--no-loadscope-reorder``), and a long file started last leaves the other worker idle at
# the end. The order changes no result, only the suite's wall time; the rest keep theirs.
SLOWEST_FIRST = (
    "test_model_garden_e2e.py",  # 100
    "test_jax_backend.py",  # 95
    "test_micro_batches.py",  # 87
    "test_aggregator_contract.py",  # 83
    "test_state_dtype.py",  # 72
    "test_packing.py",  # 70
    "test_tf_keras_save.py",  # 65
    "test_summaries.py",  # 62
    "test_sparse_statistics.py",  # 58
    "test_reference.py",  # 58
    "test_split_half_identity.py",  # 56
    "test_default_collective.py",  # 54
    "test_groups.py",  # 49
    "test_strategies.py",  # 47
    "test_sparse.py",  # 46
    "test_split_half_step.py",  # 45
    "test_keras_features.py",  # 42
)


def pytest_collection_modifyitems(config, items):
    """Puts the files of ``SLOWEST_FIRST`` first, in its order (a stable sort: the tests of a
    file, and the other files, keep their order)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.path)), len(rank)))
