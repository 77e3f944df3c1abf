"""Writes the saved-format fixtures of ``tests/test_saved_formats.py`` (not a test).

Run once with the library of the commit the fixtures stand for, e.g. 79c5f2b (before the
GSNR step became the ``vrgd_tf/gsnr/`` package)::

    git worktree add /tmp/before 79c5f2b
    PYTHONPATH=/tmp/before python3 tests/data/saved_formats/make.py

In a process split into 8 logical CPUs (as ``tests/conftest.py``), on 2 replicas
(``MirroredStrategy``, ``ReductionToOneDevice``), with ``beta_3 = 0.9`` (the deficit and
correction state is live):

* ``keras3.ckpt*``: a ``tf.train.Checkpoint(kernel, bias, optimizer)`` of a Keras 3
  ``vrgd_tf.VRGDLamb`` after 3 custom-loop steps on known per-replica gradients;
* ``tf_keras.ckpt*``: the same with ``vrgd_tf.tf_keras.VRGDLamb`` (Model Garden's LAMB);
* ``model.keras``: a Keras 3 Dense model compiled with ``vrgd_tf.VRGDLamb``, after 2 epochs
  of ``fit`` on a fixed data set;
* ``expected.npz``: the data, and what the same code computed next: the weights and every
  optimizer variable after 2 more custom-loop steps (checkpoints) and after 1 more epoch of
  ``fit`` (the ``.keras`` file).
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS_BEFORE, STEPS_AFTER = 3, 2


def problem():
    """Initial weights and per-replica gradients [steps, 2, ...] whose GSNR varies."""
    rng = np.random.RandomState(19)
    steps = STEPS_BEFORE + STEPS_AFTER
    init = {"kernel": rng.randn(4, 3).astype(np.float32), "bias": rng.randn(3).astype(np.float32)}
    grads = {}
    for name, value in init.items():
        signal = np.clip(rng.randn(steps, 1, *value.shape), -2.0, 2.0)
        scale = np.exp(rng.uniform(-1.0, 2.0, size=(steps, 1) + value.shape))
        grads[name] = ((signal + scale * rng.randn(steps, 2, *value.shape)) / 2).astype(np.float32)
    rng = np.random.RandomState(20)
    x = rng.randn(32, 4).astype(np.float32)
    y = (x @ rng.randn(4, 3) + 0.5 * rng.randn(32, 3)).astype(np.float32)
    return init, grads, x, y


def custom_steps(strategy, variables, optimizer, grads, steps):
    """``steps`` steps of per-replica gradients ``grads[name][step, replica]``."""
    import tensorflow as tf

    names = sorted(variables)
    consts = {n: tf.constant(grads[n]) for n in names}

    @tf.function
    def step(i):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply_gradients([(tf.gather(consts[n][i], rid), variables[n]) for n in names])

        strategy.run(fn)

    for i in steps:
        step(tf.constant(i))


def optimizer_values(optimizer):
    """``{path or name: value}`` of every optimizer variable (first replica's copy)."""
    variables = optimizer.variables
    variables = variables() if callable(variables) else variables
    values = {(getattr(v, "path", None) or v.name): np.array(v.numpy()) for v in variables}
    assert len(values) == len(variables), "optimizer variables of the same name"
    return values


def fit_data(x, y):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16, drop_remainder=True)


def main():
    from vrgd_tf import devices

    devices.split_cpu(8, argument="8")
    import keras
    import tensorflow as tf

    import vrgd_tf
    from vrgd_tf import tf_keras as vtk

    strategy = devices.cpu_strategy(2, argument="2")
    init, grads, x, y = problem()
    out = {"x": x, "y": y}
    out.update({f"init/{n}": v for n, v in init.items()})
    out.update({f"grads/{n}": v for n, v in grads.items()})
    families = {
        "keras3": (lambda n, v: keras.Variable(v, name=n), lambda: vrgd_tf.VRGDLamb(0.01)),
        "tf_keras": (lambda n, v: tf.Variable(v, name=n), lambda: vtk.VRGDLamb(0.01)),
    }
    for family, (make_variable, make_optimizer) in families.items():
        with strategy.scope():
            variables = {n: make_variable(n, v) for n, v in init.items()}
            optimizer = make_optimizer()
            if family == "keras3":
                optimizer.build([variables[n] for n in sorted(variables)])
        custom_steps(strategy, variables, optimizer, grads, range(STEPS_BEFORE))
        checkpoint = tf.train.Checkpoint(optimizer=optimizer, **variables)
        checkpoint.write(os.path.join(HERE, f"{family}.ckpt"))
        steps = range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER)
        custom_steps(strategy, variables, optimizer, grads, steps)
        out.update({f"{family}/{n}": np.array(v.numpy()) for n, v in variables.items()})
        for name, value in optimizer_values(optimizer).items():
            out[f"{family}/optimizer/{name}"] = value

    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="dense")])
        model.compile(optimizer=vrgd_tf.VRGDLamb(0.01, weight_decay_rate=0.01), loss="mse")
    model.fit(fit_data(x, y), epochs=2, verbose=0)
    model.save(os.path.join(HERE, "model.keras"))
    model.fit(fit_data(x, y), epochs=1, verbose=0)
    for i, value in enumerate(model.get_weights()):
        out[f"keras_file/weight/{i}"] = value
    for name, value in optimizer_values(model.optimizer).items():
        out[f"keras_file/optimizer/{name}"] = value
    out["made_with"] = np.array(os.path.dirname(vrgd_tf.__file__))
    np.savez_compressed(os.path.join(HERE, "expected.npz"), **out)
    print("wrote", sorted(os.listdir(HERE)), file=sys.stderr)


if __name__ == "__main__":
    main()
