"""``model.fit`` with ``steps_per_execution`` 1 and 4 under a ``MirroredStrategy`` with its
default cross-device ops (collective all-reduce on CPUs), base optimizer and VRGD, for each
family named in the arguments (``keras3``, ``tf_keras``). In its own process: the
collective keys of several strategies in one process can clash. Prints
``{family: {optimizer: {steps_per_execution: final kernel (list) or "ErrorType: message"}}}``
as JSON on its last line."""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from vrgd_tf import devices  # noqa: E402

DEVICES = devices.split_cpu(2)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def fit(strategy, family, optimizer, steps_per_execution):
    if family == "tf_keras":
        import tf_keras as k

        from vrgd_tf import tf_keras as vtk

        make = {
            "base": lambda: k.optimizers.legacy.SGD(0.05),
            "vr": lambda: vtk.VRGDSGD(0.05, statistics_interval=1),
        }
    else:
        import keras as k

        import vrgd_tf

        make = {
            "base": lambda: k.optimizers.SGD(0.05),
            "vr": lambda: vrgd_tf.VRGDSGD(0.05, statistics_interval=1),
        }
    rng = np.random.RandomState(0)
    x = rng.randn(80, 3).astype(np.float32)
    y = (x @ rng.randn(3, 1) + rng.randn(80, 1)).astype(np.float32)
    with strategy.scope():
        model = k.Sequential([k.Input((3,)), k.layers.Dense(1)])
        model.layers[0].kernel.assign(np.full((3, 1), 0.1, np.float32))
        model.compile(make[optimizer](), "mse", steps_per_execution=steps_per_execution)
    try:
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    except Exception as e:  # noqa: BLE001 - the outcome is what is reported
        return f"{type(e).__name__}: {e}"[:2000]
    return model.layers[0].kernel.numpy().ravel().tolist()


def main():
    strategy = tf.distribute.MirroredStrategy(DEVICES)  # default cross-device ops
    out = {
        family: {
            opt: {str(n): fit(strategy, family, opt, n) for n in (1, 4)} for opt in ("base", "vr")
        }
        for family in sys.argv[1:]
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
