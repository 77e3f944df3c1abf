"""Moved out of the installed package: the digits demo is an example now.

``vrgd_tf.demo.digits_large_batch`` (with ``reporting`` and ``config_flags``) is
``examples/digits/`` in the repository (not in the wheel); importing this package raises an
``ImportError`` that says so.
"""

raise ImportError(
    "vrgd_tf.demo moved out of the library: run the digits main job with "
    "`python3 examples/digits/digits_large_batch.py` from the repository root (reporting -> "
    "examples/digits/digits_reporting.py, config_flags -> examples/digits/config_flags.py); "
    "see examples/digits/README.md."
)
