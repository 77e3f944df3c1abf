"""Helpers for driving optimizers replica by replica with known gradients."""

import importlib.util

import numpy as np
import tensorflow as tf

from vrgd_tf import devices

# The tf_keras family needs the model_garden extra (tf-keras, tf-models-official); .ci/compat
# runs the Keras 3 family's tests without it, where the tf_keras cases skip.
HAS_TF_KERAS = all(importlib.util.find_spec(m) is not None for m in ("tf_keras", "official"))


def skip_without_tf_keras(test):
    """Skips ``test`` (a ``tf.test.TestCase``) when the tf_keras family cannot be imported."""
    if not HAS_TF_KERAS:
        test.skipTest("the tf_keras family needs tf-keras and tf-models-official (model_garden)")


def strategy_for(k):
    """MirroredStrategy over the first k logical CPUs (k=1: one device), with
    ReductionToOneDevice (:func:`vrgd_tf.devices.cpu_strategy`)."""
    return devices.cpu_strategy(k, argument="k")


def release_iterator(trainer):
    """Drops an orbit trainer's dataset iterator now, while it is young.

    Destroying a ``tf.data`` iterator can wait for its autotuning thread's next wake-up, and
    that thread sleeps longer the older the iterator is (up to 60 s; TensorFlow 2.20). A
    Model Garden trainer lives in reference cycles, so without this its iterator is freed
    by a later garbage collection, old, inside whichever test triggers it: such
    collections took 55-98 s in the suite's runs (gdb stacks in the destructor). Orbit's
    public ``train_dataset`` setter discards the iterator (``_train_iter``); the dataset is
    set back (``tf.Module`` ignores assigning an attribute its own value).
    """
    dataset = trainer.train_dataset
    trainer.train_dataset = None
    trainer.train_dataset = dataset


def replica_values(var):
    """Numpy copies of every replica's component of a (possibly Keras-wrapped) variable."""
    import keras

    v = var.value if isinstance(var, keras.Variable) else var
    if isinstance(v, tf.distribute.DistributedValues):
        return [np.array(x.numpy()) for x in v.values]
    return [np.array(v.numpy())]


def run_custom_loop(
    strategy, make_optimizer, init, grads, *, make_variable=None, jit_compile=False, existing=None
):
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
    variables, opt = None, None
    for _, variables, opt in custom_loop_steps(
        strategy,
        make_optimizer,
        init,
        grads,
        make_variable=make_variable,
        jit_compile=jit_compile,
        existing=existing,
    ):
        pass
    return variables, opt


def custom_loop_steps(
    strategy, make_optimizer, init, grads, *, make_variable=None, jit_compile=False, existing=None
):
    """:func:`run_custom_loop` one step at a time: yields ``(step index, variables dict,
    optimizer)`` after each step, so a test can read weights and state in between."""
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
        yield i, variables, opt


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


# --- reference problems -------------------------------------------------------------------

#: Variables of the reference problems: name -> shape.
PROBLEM_SHAPES = {"kernel": (4, 3), "bias": (3,)}


def make_problem(k, seed=0, steps=3):
    """Initial weights and per-replica gradients whose GSNR spans 1e-3 to about 30.

    The spread across replicas is standardised, so the GSNR is set by design and stays in
    the range where float32 resolves the variance to ~1e-6 (the float32 limits are tested
    separately in test_numerics.py). Signal and noise scale are drawn once, so each
    element's GSNR (and factor) is the same on every step: :func:`make_varying_problem`
    is the variant whose GSNR changes from step to step.

    Returns:
      ``(init, grads)``: ``{name: float32 array}`` and ``{name: float32 [steps, k, *shape]}``.
    """
    rng = np.random.RandomState(seed)
    init = {n: rng.randn(*s).astype(np.float32) for n, s in PROBLEM_SHAPES.items()}
    grads = {}
    for n, s in PROBLEM_SHAPES.items():
        signal = np.clip(rng.randn(*s), -2.0, 2.0)
        noise_scale = np.exp(rng.uniform(-1.0, 2.0, size=s))
        noise = rng.randn(steps, k, *s)
        if k > 1:
            noise = (noise - noise.mean(1, keepdims=True)) / noise.std(1, keepdims=True)
        g = signal + noise_scale * noise
        grads[n] = (g / k).astype(np.float32)  # as Keras: loss averaged over global batch
    return init, grads


def make_varying_problem(k, seed=0, steps=3):
    """As :func:`make_problem`, but signal and noise scale are drawn anew on every step.

    Each element's GSNR ``signal**2 / noise_scale**2`` (about 0 to 30) then changes from
    step to step and from element to element, so the factor does too. Adam and LAMB
    cancel a per-element scale that is the same on every step (their ``m / sqrt(v)``), so
    with :func:`make_problem` they cannot tell VRGD from no VRGD; with this data they can.

    Returns:
      ``(init, grads)`` as :func:`make_problem`.
    """
    rng = np.random.RandomState(seed)
    init = {n: rng.randn(*s).astype(np.float32) for n, s in PROBLEM_SHAPES.items()}
    grads = {}
    for n, s in PROBLEM_SHAPES.items():
        signal = np.clip(rng.randn(steps, 1, *s), -2.0, 2.0)
        noise_scale = np.exp(rng.uniform(-1.0, 2.0, size=(steps, 1) + s))
        noise = rng.randn(steps, k, *s)
        if k > 1:
            noise = (noise - noise.mean(1, keepdims=True)) / noise.std(1, keepdims=True)
        g = signal + noise_scale * noise
        grads[n] = (g / k).astype(np.float32)
    return init, grads
