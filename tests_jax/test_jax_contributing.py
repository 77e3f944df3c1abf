"""Contributing samples on JAX (spec section 1, issue 36 fault 2): the count is taken from
the data (a group counts when it holds an example of nonzero weight), and a group without
one that sends a nonzero gradient (a weight regularizer) makes the step the base step."""

import keras
import numpy as np
from jaxutil import data, use_devices

import vrgd_tf

BATCH = 32


def fit_masked(regularizer, devices, groups):
    """One step of ``Dense(3)`` over ``devices x groups`` samples, the last quarter of the
    batch with sample weight 0; returns the kernel's statistics row."""
    use_devices(devices)
    x, y = data(rows=BATCH)
    w = np.ones(BATCH, "float32")
    w[3 * BATCH // 4 :] = 0.0
    keras.utils.set_random_seed(1)
    layer = keras.layers.Dense(3, kernel_regularizer=regularizer)
    model = keras.Sequential([keras.Input((x.shape[1],)), layer])
    model.compile(vrgd_tf.VRGDSGD(0.01, gamma=0.1, statistics_interval=1), "mse")
    vrgd_tf.use_micro_batches(model, num_groups=groups)
    model.fit(x, y, sample_weight=w, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    stats = vrgd_tf.vrgd_statistics(model.optimizer)
    return next(row for name, row in stats.items() if "kernel" in name)


def test_a_masked_group_with_a_regularizer_is_the_base_step():
    """1 device x 4 groups and 4 devices x 1: the masked group sends the L2 regularizer's
    gradient, which cannot be separated from the sums: no GSNR on that step. (Before: the
    count came from the gradients, so the group counted and the GSNR was recorded.)"""
    reg = keras.regularizers.L2(0.01)
    for devices, groups in ((1, 4), (4, 1)):
        assert not fit_masked(reg, devices, groups)["has_gsnr"], (devices, groups)


def test_a_masked_group_without_a_regularizer_leaves_three_samples():
    """Without a regularizer the masked group sends zeros and does not count: both layouts
    record the same GSNR of the 3 others."""
    one, four = fit_masked(None, 1, 4), fit_masked(None, 4, 1)
    assert one["has_gsnr"]
    np.testing.assert_allclose(one["mean_gsnr"], four["mean_gsnr"], rtol=1e-4)


def test_a_masked_group_steps_as_the_base():
    """``gamma=1, beta_3=0`` with a masked group is the base's step: the mean over every
    group, as Keras' loss over the whole batch (the masked rows count in its denominator).
    Before: the JAX step divided ``S1`` by the 3 contributing groups (4/3 of the base)."""
    use_devices(1)
    x, y = data(rows=BATCH)
    w = np.ones(BATCH, "float32")
    w[3 * BATCH // 4 :] = 0.0

    def fit(optimizer, groups):
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(3)])
        model.compile(optimizer, "mse")
        if groups:
            vrgd_tf.use_micro_batches(model, num_groups=groups)
        model.fit(x, y, sample_weight=w, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        return model.get_weights()

    vr = fit(vrgd_tf.VRGDSGD(0.5, gamma=1.0, beta_3=0.0), 4)
    base = fit(keras.optimizers.SGD(0.5), None)
    for a, b in zip(vr, base):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
