"""Moved out of the installed package: the data readers and builders are examples now.

``vrgd_tf.data.digits``, ``vrgd_tf.data.shakespeare`` and ``vrgd_tf.data.fashion_mnist`` are
``examples/data/digits_tfrecords.py``, ``examples/data/shakespeare_pretraining.py`` and
``examples/data/fashion_mnist.py`` in the repository (not in the wheel); importing this
package raises an ``ImportError`` that says so.
"""

raise ImportError(
    "vrgd_tf.data moved out of the library: the readers and builders are in the repository's "
    "examples/data/ (digits -> digits_tfrecords.py, shakespeare -> shakespeare_pretraining.py, "
    "fashion_mnist -> fashion_mnist.py). Write the Model Garden data sets with "
    "`python3 examples/data/prepare_model_garden_data.py --output_dir=/tmp/vrgd_data`, or put "
    "examples/data on sys.path to import them; see examples/data/README.md."
)
