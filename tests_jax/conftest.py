"""The JAX path's tests: Keras 3 on JAX with 8 forced CPU devices. They run in their own
process (``tests/test_jax_backend.py`` starts ``pytest tests_jax`` with this environment),
since ``KERAS_BACKEND`` must be set before Keras is imported."""

import os
import sys

if os.environ.get("KERAS_BACKEND") != "jax" or "keras" in sys.modules:
    raise RuntimeError(
        "tests_jax needs KERAS_BACKEND=jax before Keras is imported: run "
        "`KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=8 "
        "python3 -m pytest -n 0 tests_jax` (or tests/test_jax_backend.py)."
    )
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)
