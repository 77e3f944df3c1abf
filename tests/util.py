"""Helpers for driving optimizers replica by replica with known gradients."""

import numpy as np
import tensorflow as tf


def strategy_for(k):
    """MirroredStrategy over the first k logical CPUs (k=1: one device).

    ReductionToOneDevice: collective all-reduce keys clash between strategies of different
    sizes in one process, and the sums are the same.
    """
    devices = [f"/cpu:{i}" for i in range(k)]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def replica_values(var):
    """Numpy copies of every replica's component of a (possibly Keras-wrapped) variable."""
    import keras
    v = var.value if isinstance(var, keras.Variable) else var
    if isinstance(v, tf.distribute.DistributedValues):
        return [np.array(x.numpy()) for x in v.values]
    return [np.array(v.numpy())]


def run_custom_loop(strategy, make_optimizer, init, grads, *, make_variable=None,
                    jit_compile=False, existing=None):
    """Applies known per-replica gradients for several steps.

    Args:
      strategy: the tf.distribute strategy.
      make_optimizer: () -> optimizer, called in the strategy scope.
      init: {name: np.ndarray} initial weights.
      grads: {name: array [steps, k, *shape]}: replica d's gradient at each step.
      make_variable: (name, value) -> variable; default keras.Variable.
      jit_compile: compile the step function with XLA.
      existing: {name: variable} to train instead of new ones (``init`` is then ignored).

    Returns:
      (variables dict, optimizer).
    """
    import keras
    names = list(init)
    steps = next(iter(grads.values())).shape[0]
    make_variable = make_variable or (lambda n, v: keras.Variable(v, name=n))
    with strategy.scope():
        variables = existing or {n: make_variable(n, init[n]) for n in names}
        opt = make_optimizer()
        if hasattr(opt, "build") and not getattr(opt, "_is_legacy_optimizer", False):
            opt.build([variables[n] for n in names])
    consts = {n: tf.constant(grads[n]) for n in names}

    @tf.function(jit_compile=jit_compile)
    def step(i):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            pairs = [(tf.gather(consts[n][i], rid), variables[n]) for n in names]
            opt.apply_gradients(pairs)
        strategy.run(fn)

    for i in range(steps):
        step(tf.constant(i))
    return variables, opt


def numpy_run(vr, init, grads):
    """Runs the NumPy reference `vr` (a numpy_reference.VRGD or base) over the same data."""
    w = {n: np.asarray(v, np.float64) for n, v in init.items()}
    steps = next(iter(grads.values())).shape[0]
    for i in range(steps):
        for n in init:
            w[n] = vr.step(n, w[n], np.asarray(grads[n][i], np.float64))
    return w


def assert_config_has(test, config, kwargs):
    """Every constructor argument in ``kwargs`` comes back from ``get_config``."""
    for key, value in kwargs.items():
        if isinstance(value, float):
            test.assertAlmostEqual(config[key], value, places=6, msg=key)
        else:
            test.assertEqual(config[key], value, key)
