"""How the grouped step makes the per-group gradients (vrgd_tf/keras_jax/step.py): the
``shard_map`` trap (with the default ``check_vma=True`` the gradient with respect to
replicated parameters is already summed over the devices), the sums ``S1``, ``S2`` that reach
the optimizer equal the per-group gradients' whatever the layout, a Conv1D model's compiled
step under ``DataParallel`` holds no all-gather and no grouped convolution, BatchNorm and
dropout state across layouts."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from jaxutil import data, linear, max_diff, use_devices
from keras.src.backend.jax import trainer as jax_trainer

import vrgd_tf

BATCH = 16


def _loss(w, x):
    return jnp.sum(jnp.tanh(x @ w))


def _per_device_grads(check_vma):
    mesh = Mesh(jax.devices()[:4], ("d",))
    w = jnp.linspace(-1.0, 1.0, 3)
    x = jnp.arange(12.0).reshape(4, 3) / 10.0
    fn = jax.shard_map(
        lambda w, x: jax.grad(_loss)(w, x)[None],
        mesh=mesh,
        in_specs=(P(), P("d")),
        out_specs=P("d"),
        check_vma=check_vma,
    )
    own = np.stack([np.asarray(jax.grad(_loss)(w, x[d : d + 1])) for d in range(4)])
    return np.asarray(fn(w, x)), own


def test_the_shard_map_trap_grad_of_replicated_parameters_is_summed_by_default():
    """The trap the step avoids: under check_vma=True each device's "own" gradient is the
    sum over the 4 devices (no error); under check_vma=False (the step's) it is its own."""
    summed, own = _per_device_grads(check_vma=True)
    np.testing.assert_allclose(summed, np.broadcast_to(own.sum(0), own.shape), rtol=1e-6)
    assert np.abs(summed - own).max() > 1e-2
    local, own = _per_device_grads(check_vma=False)
    np.testing.assert_allclose(local, own, rtol=1e-6)


def _sums_of_one_step(devices, groups, x, y):
    """``S1``, ``S2`` and ``k`` that the grouped step hands the optimizer, from a jitted
    call of ``model.train_step`` (as ``fit`` compiles it) on ``devices x groups`` groups."""
    use_devices(devices)
    model = linear(x.shape[1], y.shape[1])
    model.compile(vrgd_tf.VRGDSGD(0.1, statistics_interval=1), "mse")
    vrgd_tf.use_micro_batches(model, num_groups=groups)
    model._symbolic_build(data_batch=(x, y, None))
    seen = {}
    apply = model.optimizer.vrgd_stateless_apply

    def spy(opt_vars, sums, train_vars):
        seen["sums"] = sums
        return apply(opt_vars, sums, train_vars)

    model.optimizer.vrgd_stateless_apply = spy

    def step(state, batch):
        model.train_step(state, batch)
        return seen["sums"]

    batch = (x, y, None)
    if devices > 1:
        batch = jax_trainer._distribute_data(batch)
    state = model._get_jax_state(True, True, True, True)
    sums = jax.jit(step)(state, batch)
    kernel, bias = (v.numpy().astype(np.float64) for v in model.trainable_variables)
    return sums, kernel, bias


@pytest.mark.parametrize("devices,groups", [(4, 1), (2, 2), (1, 4)])
def test_the_sums_are_those_of_each_groups_own_rows(devices, groups):
    """On 4 devices each device's gradient is that of its rows alone (not 4 times it): the
    sums of g and g*g match the float64 gradients of the 4 groups of contiguous rows."""
    x, y = data(rows=BATCH)
    sums, w, b = _sums_of_one_step(devices, groups, x, y)
    g_w, g_b = [], []
    for xg, yg in zip(np.split(x.astype(np.float64), 4), np.split(y.astype(np.float64), 4)):
        err = 2.0 * (xg @ w + b - yg) / yg.size
        g_w.append(xg.T @ err)
        g_b.append(err.sum(0))
    for got, grads in ((0, g_w), (1, g_b)):
        grads = np.stack(grads)
        np.testing.assert_allclose(sums.s1[got], grads.sum(0), rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(sums.s2[got], (grads**2).sum(0), rtol=2e-5, atol=1e-6)
    assert float(sums.k) == 4.0
    use_devices(1)


def conv1d(seed=1, norm=False, dropout=False):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((12, 2)), keras.layers.Conv1D(4, 3, padding="same")]
    if norm:
        layers.append(keras.layers.BatchNormalization(momentum=0.5))
    layers += [keras.layers.Activation("relu"), keras.layers.Conv1D(4, 3, strides=2)]
    if dropout:
        layers.append(keras.layers.Dropout(0.25))
    layers += [keras.layers.Flatten(), keras.layers.Dense(3)]
    return keras.Sequential(layers)


def conv_data(rows, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 12, 2)).astype("float32") * np.linspace(0.5, 2.0, 2)
    y = (x[:, ::4, :].sum(-1) @ rng.normal(size=(3, 3))).astype("float32")
    return x.astype("float32"), y + rng.normal(size=y.shape).astype("float32")


def _compiled_text(model, x, y):
    """The program ``fit`` runs (``JAXTrainer.make_train_function``), compiled."""
    model._symbolic_build(data_batch=(x, y, None))
    batch = jax_trainer._distribute_data((x, y, None))
    step = jax.jit(
        model.train_step, donate_argnums=0, out_shardings=(None, model._get_state_sharding_spec())
    )
    state = model._get_jax_state(True, True, True, True)
    return step.lower(state, batch).compile().as_text()


def _count(text, op):
    return sum(f" {op}(" in line.split("=", 1)[-1] for line in text.splitlines() if " = " in line)


@pytest.mark.parametrize("groups", [1, 2])
def test_conv1d_step_under_data_parallel_has_no_all_gather_and_no_grouped_convolution(groups):
    x, y = conv_data(BATCH)
    use_devices(4)
    model = conv1d()
    model.compile(vrgd_tf.VRGDLamb(0.01, statistics_interval=1), "mse")
    vrgd_tf.use_micro_batches(model, num_groups=groups)
    text = _compiled_text(model, x, y)
    use_devices(1)
    convolutions = [line for line in text.splitlines() if " = " in line and " convolution(" in line]
    assert convolutions  # the forward and backward convolutions are there
    grouped = [c for c in convolutions if "feature_group_count" in c or "batch_group_count" in c]
    assert grouped == []
    assert _count(text, "all-gather") == 0
    assert _count(text, "all-to-all") == 0
    assert _count(text, "all-reduce") == 1  # S1, S2, k, loss and state: one all-reduce


def _fit(devices, groups, x, y, make_model):
    use_devices(devices)
    model = make_model()
    model.compile(vrgd_tf.VRGDLamb(0.02, weight_decay_rate=0.01, statistics_interval=1), "mse")
    vrgd_tf.use_micro_batches(model, num_groups=groups)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    use_devices(1)
    return model


def test_conv_batch_norm_model_gives_the_same_weights_and_statistics_on_every_layout():
    x, y = conv_data(BATCH * 3)
    make = lambda: conv1d(norm=True)  # noqa: E731
    one = _fit(1, 4, x, y, make)
    two = _fit(2, 2, x, y, make)
    four = _fit(4, 1, x, y, make)
    # float32 rounding through BatchNorm's normalisation over 3 steps (weights up to 2)
    assert max_diff(one, two) < 5e-5
    assert max_diff(one, four) < 5e-5
    for a, b in ((one, two), (one, four)):
        for p, q in zip(a.non_trainable_variables, b.non_trainable_variables):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=2e-5)


def test_dropout_seed_state_advances_as_in_kerass_own_fit():
    x, y = conv_data(BATCH * 2)
    make = lambda: conv1d(dropout=True)  # noqa: E731
    grouped = _fit(2, 2, x, y, make)
    base = make()
    base.compile(vrgd_tf.Lamb(0.02), "mse")
    base.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    ints = lambda m: [  # noqa: E731
        v.numpy() for v in m.non_trainable_variables if not np.issubdtype(v.dtype, np.floating)
    ]
    assert ints(grouped) and all(np.array_equal(p, q) for p, q in zip(ints(grouped), ints(base)))


def test_rolled_and_unrolled_groups_give_the_same_weights():
    """``use_micro_batches(unroll=)``: the device's groups in a rolled ``lax.scan`` or
    unrolled, the same step to float32 rounding (the default unrolls on XLA:CPU). VRGD-SGD:
    under LAMB the bias before BatchNorm, whose gradient is rounding noise, takes Adam-sized
    steps whose sign follows that noise (3.5e-4 apart after one step here)."""
    x, y = conv_data(BATCH * 2)

    def fit(unroll):
        use_devices(1)
        model = conv1d(norm=True)
        model.compile(vrgd_tf.VRGDSGD(0.05, momentum=0.9, statistics_interval=1), "mse")
        vrgd_tf.use_micro_batches(model, num_groups=4, unroll=unroll)
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        return model

    rolled, unrolled, default = fit(False), fit(True), fit(None)
    assert max_diff(rolled, unrolled) < 1e-6
    assert max_diff(unrolled, default) == 0.0
    model = conv1d()
    model.compile(vrgd_tf.VRGDSGD(0.1, statistics_interval=1), "mse")
    with pytest.raises(TypeError, match="unroll"):
        vrgd_tf.use_micro_batches(model, num_groups=2, unroll="yes")
