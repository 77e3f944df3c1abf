"""Runnable demonstrations of the VRGD optimizers on real data.

* :mod:`vrgd_tf.demo.digits_large_batch`: LAMB, VR-LAMB, LARS and VR-LARS at global batch
  1024 on scikit-learn's 1,797 real 8x8 handwritten digits, data-parallel over logical CPU
  replicas (``python -m vrgd_tf.demo.digits_large_batch``).
"""
