"""The grouped step on JAX: the same samples over devices x groups give the same weights,
VRGD differs from the base, gamma=1 with beta_3=0 is the base, fit without
use_micro_batches raises, BatchNorm's moving statistics are the groups' mean, a .keras file
restores on another device count."""

import os

import keras
import numpy as np
import pytest
from jaxutil import data, fit, max_diff, mlp, use_devices

import vrgd_tf

BATCH = 32


def vr_lamb():
    return vrgd_tf.VRGDLamb(0.02, weight_decay_rate=0.01, statistics_interval=1)


def test_devices_times_groups_give_the_same_weights_and_differ_from_the_base():
    x, y = data(rows=BATCH * 3)
    one = fit(vr_lamb, x, y, BATCH, devices=1, groups=4)
    two = fit(vr_lamb, x, y, BATCH, devices=2, groups=2)
    four = fit(vr_lamb, x, y, BATCH, devices=4, groups=1)
    base = fit(lambda: vrgd_tf.Lamb(0.02, weight_decay_rate=0.01), x, y, BATCH)
    assert max_diff(one, two) < 1e-6
    assert max_diff(one, four) < 1e-6
    assert max_diff(one, base) > 1e-3
    stats = vrgd_tf.vrgd_statistics(four.optimizer)
    assert all(row["has_gsnr"] and 0.1 <= row["mean_factor"] <= 1 for row in stats.values())


def test_gamma_1_beta_3_0_is_the_base_step():
    x, y = data(rows=BATCH * 3)
    plain = fit(
        lambda: vrgd_tf.VRGDLamb(0.02, gamma=1.0, beta_3=0.0, statistics_interval=1),
        x,
        y,
        BATCH,
        devices=2,
        groups=2,
    )
    base = fit(lambda: vrgd_tf.Lamb(0.02), x, y, BATCH, devices=2)
    assert max_diff(plain, base) < 1e-6


def test_fit_without_use_micro_batches_raises_naming_it():
    x, y = data(rows=BATCH)
    with pytest.raises(RuntimeError, match=r"use_micro_batches\(model, num_groups=m\)"):
        fit(vr_lamb, x, y, BATCH)


def test_batch_norm_groups_normalise_alone_and_average_the_moving_statistics():
    use_devices(1)
    x, y = data(rows=BATCH)
    keras.utils.set_random_seed(1)
    norm = keras.layers.BatchNormalization(momentum=0.5)
    model = keras.Sequential([keras.Input((x.shape[1],)), norm, keras.layers.Dense(3)])
    model.compile(vrgd_tf.VRGDSGD(0.0, statistics_interval=1), "mse")
    vrgd_tf.use_micro_batches(model, num_groups=4)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    groups = x.reshape(4, BATCH // 4, -1).astype(np.float64)
    # the groups' own variances, averaged (the global batch's variance is larger)
    np.testing.assert_allclose(
        norm.moving_variance.numpy(), 0.5 + 0.5 * groups.var(1).mean(0), rtol=1e-5
    )
    np.testing.assert_allclose(norm.moving_mean.numpy(), 0.5 * x.mean(0), rtol=1e-4, atol=1e-6)
    assert np.abs(groups.var(1).mean(0) - x.var(0)).max() > 1e-2


def test_keras_file_restores_on_another_device_count(tmp_path):
    x, y = data(rows=BATCH * 4)
    whole = fit(vr_lamb, x, y, BATCH, devices=1, groups=4)
    first = fit(vr_lamb, x[: BATCH * 2], y[: BATCH * 2], BATCH, devices=2, groups=2)
    path = os.path.join(tmp_path, "model.keras")
    first.save(path)
    use_devices(4)
    restored = keras.models.load_model(path)
    assert type(restored.optimizer).__name__ == "VRGDLamb"
    vrgd_tf.use_micro_batches(restored, num_groups=1)
    restored.fit(x[BATCH * 2 :], y[BATCH * 2 :], batch_size=BATCH, shuffle=False, verbose=0)
    assert max_diff(whole, restored) < 1e-6


def test_refusals_name_what_to_use():
    with pytest.raises(AttributeError, match="DataParallel"):
        vrgd_tf.GSNRAggregator  # noqa: B018
    with pytest.raises(ValueError, match="squares_dtype"):
        vrgd_tf.VRGDLamb(squares_dtype="bfloat16", statistics_interval=1)
    with pytest.raises(ValueError, match="num_groups"):
        vrgd_tf.use_micro_batches(mlp(2, 1), num_groups=0)


def test_mixed_bfloat16_statistics_interval_and_gsnr_logger():
    use_devices(1)
    x, y = data(rows=64)
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = mlp(x.shape[1], y.shape[1])
        model.compile(vrgd_tf.VRGDLamb(0.01, statistics_interval=8), "mse")
        vrgd_tf.use_micro_batches(model, num_groups=4)
        history = model.fit(
            x, y, batch_size=16, shuffle=False, verbose=0, callbacks=[vrgd_tf.GSNRLogger()]
        )
    finally:
        keras.config.set_dtype_policy("float32")
    # 4 steps, interval 8: nothing recorded yet, so the headline has no value
    assert int(model.optimizer.iterations.numpy()) == 4
    assert np.isnan(history.history["vrgd/median/mean_factor"][0])
    model.fit(x, y, batch_size=16, shuffle=False, verbose=0)
    rows = vrgd_tf.vrgd_statistics(model.optimizer).values()
    assert all(0.1 <= row["mean_factor"] <= 1 for row in rows)


def test_statistics_interval_records_the_same_rows_on_its_steps():
    """``statistics_interval=3`` computes the diagnostics in a ``lax.cond`` branch taken on
    every third step only: after 3 steps its rows are those of ``statistics_interval=1``
    (the same step recorded; to float32 rounding: the branch and the step fuse the sums
    differently), and the weights are the same; after 4 it still holds step 3's rows while
    interval 1 holds step 4's."""
    x, y = data(rows=BATCH * 4)

    def make(interval):
        return lambda: vrgd_tf.VRGDLamb(0.02, weight_decay_rate=0.01, statistics_interval=interval)

    every = fit(make(1), x[: 3 * BATCH], y[: 3 * BATCH], BATCH, devices=2, groups=2)
    third = fit(make(3), x[: 3 * BATCH], y[: 3 * BATCH], BATCH, devices=2, groups=2)
    assert max_diff(every, third) == 0.0

    def rows(model):  # in the variables' order (each model's own paths)
        return list(vrgd_tf.vrgd_statistics(model.optimizer).values())

    def same(a, b):
        return [r.keys() for r in a] == [r.keys() for r in b] and all(
            np.isclose(r[f], q[f], rtol=1e-6, atol=0) for r, q in zip(a, b) for f in r
        )

    rows_every, rows_third = rows(every), rows(third)
    assert same(rows_third, rows_every)
    assert all(row["has_gsnr"] for row in rows_third)
    for model in (every, third):
        model.fit(x[3 * BATCH :], y[3 * BATCH :], batch_size=BATCH, shuffle=False, verbose=0)
    assert rows(third) == rows_third
    assert not same(rows(every), rows_every)
