"""Runnable demonstrations of the VRGD optimizers on real data.

* :mod:`vrgd_tf.demo.digits_large_batch`: LAMB, VR-LAMB, LARS and VR-LARS at global batch
  1024 on scikit-learn's 1,797 real 8x8 handwritten digits, data-parallel over logical CPU
  replicas (``python -m vrgd_tf.demo.digits_large_batch``).
* :mod:`vrgd_tf.demo.reporting`: what a demo records and writes (a Keras callback for
  held-out accuracy, step times and GSNR curves; the results table, JSON and plot).
* :mod:`vrgd_tf.demo.config_flags`: absl flags made from a demo's config dataclass.
"""
