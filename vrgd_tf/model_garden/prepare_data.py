"""Moved out of the installed package: the Model Garden data preparation is an example now.

It is ``examples/data/prepare_model_garden_data.py`` in the repository (not in the wheel);
importing this module raises an ``ImportError`` that says so.
"""

raise ImportError(
    "vrgd_tf.model_garden.prepare_data moved out of the library: run "
    "`python3 examples/data/prepare_model_garden_data.py --output_dir=/tmp/vrgd_data` from the "
    "repository root, or put examples/data on sys.path and `import prepare_model_garden_data`; "
    "see examples/data/README.md."
)
