"""Test setup of the studies' tests: 8 logical CPU devices before TensorFlow starts, and the
study folders on the import path (``studies/``, ``studies/evidence/``, ``studies/sweeps/``,
``studies/report``'s parent)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STUDIES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (
    os.path.join(STUDIES, "sweeps"),
    os.path.join(STUDIES, "evidence"),
    STUDIES,
    os.path.dirname(STUDIES),
):
    if path not in sys.path:
        sys.path.insert(0, path)

from vrgd_tf import devices  # noqa: E402

devices.split_cpu(8, argument="studies/tests/conftest.py")
