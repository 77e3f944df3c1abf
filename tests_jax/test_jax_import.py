"""``import vrgd_tf`` under KERAS_BACKEND=jax: the JAX classes, same names, settings and
config keys as on TensorFlow; and no TensorFlow module (in a fresh interpreter)."""

import inspect
import os
import re
import subprocess
import sys

import vrgd_tf
from vrgd_tf import settings
from vrgd_tf.keras_jax import optimizers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_top_level_names_are_the_jax_classes_with_the_settings():
    for name, beta_3 in [("VRGDSGD", 0.0), ("VRGDAdam", 0.9), ("VRGDLars", 0.0), ("VRGDLamb", 0.9)]:
        cls = getattr(vrgd_tf, name)
        assert issubclass(cls, optimizers.VRGDOptimizer)
        params = inspect.signature(cls).parameters
        assert params["name"].default is None
        assert params["beta_3"].default == beta_3
        config = cls().get_config()
        assert set(settings.CONFIG_KEYS) <= set(config)
        # Keras 3's default name (the TensorFlow family's too): snake case, made unique.
        stem = {"VRGDSGD": "vrgdsgd"}.get(name, "vrgd_" + name[4:].lower())
        assert re.fullmatch(rf"{stem}(_\d+)?", config["name"]), config["name"]
        assert cls().name != config["name"]
        assert cls.from_config(config).get_config() == config
    made = vrgd_tf.make_vrgd_optimizer(vrgd_tf.Lamb, name="MyVRLamb")
    assert made().gamma == 0.1


#: Makes every ``tensorflow`` import fail, as where TensorFlow is not installed, and records
#: each attempt: none is made where TensorFlow is installed either (an attempt there would
#: load it), so one run shows both.
BLOCK_TENSORFLOW = """
import sys


class _NoTensorFlow:
    attempts = []

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            self.attempts.append(name)
            raise ImportError("TensorFlow is blocked in this test: " + name)
        return None


sys.meta_path.insert(0, _NoTensorFlow())
"""

#: Imports vrgd_tf, then builds and steps a VRGDLamb with 4 micro-batch groups on one device
#: and over 2 devices (DataParallel), printing the first TensorFlow modules loaded after each.
TRAIN_VRGD_LAMB = """
import sys

import jax
import keras
import numpy as np

import vrgd_tf


def tensorflow_modules():
    return sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow."))[:5]


print("after import:", tensorflow_modules())
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 2)) + rng.normal(size=(32, 2))).astype("float32")
for devices in (1, 2):
    dist = keras.distribution.DataParallel(devices=jax.devices()[:devices])
    keras.distribution.set_distribution(dist if devices > 1 else None)
    # (not keras.utils.set_random_seed: Keras' own seeds TensorFlow too when it is installed)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    model.compile(vrgd_tf.VRGDLamb(learning_rate=0.01, statistics_interval=1), "mse")
    vrgd_tf.use_micro_batches(model, num_groups=4 // devices)
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    moved = any(np.any(a != b) for a, b in zip(before, model.get_weights()))
    stats = model.optimizer.vrgd_statistics()
    assert moved and all(row["has_gsnr"] for row in stats.values()), stats
print("after training:", tensorflow_modules())
"""


def _run(code):
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        PYTHONPATH=REPO,
    )
    env.pop("TF_USE_LEGACY_KERAS", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_vrgd_lamb_with_groups_trains_without_tensorflow_and_never_imports_it():
    # One interpreter (the suite's time, issue 36): TensorFlow cannot be imported, and no
    # module asks for it, at import or in training (with TensorFlow installed such an attempt
    # would load it).
    code = BLOCK_TENSORFLOW + TRAIN_VRGD_LAMB + "print('attempts:', _NoTensorFlow.attempts)\n"
    lines = _run(code).splitlines()
    assert "after import: []" in lines, lines
    assert "after training: []" in lines, lines
    assert "attempts: []" in lines, lines
