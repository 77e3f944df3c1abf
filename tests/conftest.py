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

# The slowest files first, longest first (seconds in a full run on 2 cores, 2026-12-05,
# after the issue 36 cuts): each file runs in one worker (``--dist loadfile``, in collection
# order with ``--no-loadscope-reorder``), and a long file started last leaves the other
# worker idle at the end. The order changes no result, only the suite's wall time; the rest
# keep theirs.
SLOWEST_FIRST = (
    "test_model_garden_e2e.py",  # 118
    "test_jax_backend.py",  # 118
    "test_packing.py",  # 74
    "test_reference.py",  # 65
    "test_summaries.py",  # 58
    "test_default_collective.py",  # 56
    "test_micro_batches.py",  # 56
    "test_state_dtype.py",  # 56
    "test_jax_cost_smoke.py",  # 54
    "test_strategies.py",  # 50
    "test_tf_keras_save.py",  # 48
    "test_sparse.py",  # 45
    "test_sparse_statistics.py",  # 44
    "test_cost_floor.py",  # 41
    "test_aggregator_contract.py",  # 41
    "test_groups.py",  # 36
    "test_split_half_step.py",  # 32
)


def pytest_collection_modifyitems(config, items):
    """Puts the files of ``SLOWEST_FIRST`` first, in its order (a stable sort: the tests of a
    file, and the other files, keep their order)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.path)), len(rank)))
