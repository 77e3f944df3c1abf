"""Every JAX VRGD optimizer against the float64 NumPy reference (tests/numpy_reference.py):
its VRGD step at k = 2, 4 and 8 samples on sums whose GSNR varies by element and step
(one small jitted step), and whole ``fit`` runs with the grouped step (model
gradients of each group) at k = 4 (2 devices x 2 groups) and 8 (8 x 1)."""

import jax
import keras
import numpy as np
import pytest
from jaxutil import data, fit, linear, use_devices

import vrgd_tf
from vrgd_tf.keras_jax.optimizers import GroupSums

import numpy_reference as ref

BATCH, STEPS = 32, 3
CASES = {
    "VRGDSGD": (
        lambda: vrgd_tf.VRGDSGD(0.05, momentum=0.9, statistics_interval=1),
        lambda: ref.VRGD(ref.SGD(0.05, momentum=0.9), 0.1, 0.0),
    ),
    "VRGDAdam": (
        lambda: vrgd_tf.VRGDAdam(0.05, statistics_interval=1),
        lambda: ref.VRGD(ref.Adam(0.05), 0.1, 0.9),
    ),
    "VRGDLars": (
        lambda: vrgd_tf.VRGDLars(1.0, weight_decay_rate=0.01, eeta=0.01, statistics_interval=1),
        lambda: ref.VRGD(ref.Lars(1.0, weight_decay_rate=0.01, eeta=0.01), 0.1, 0.0),
    ),
    "VRGDLamb": (
        lambda: vrgd_tf.VRGDLamb(0.05, weight_decay_rate=0.01, beta_3=0.5, statistics_interval=1),
        lambda: ref.VRGD(ref.Lamb(0.05, weight_decay_rate=0.01), 0.1, 0.5),
    ),
}


def reference_run(make_ref, w, b, x, y, k):
    """The reference on the same samples: group d's gradient of its mean-squared error,
    divided by k (what Keras hands an optimizer per replica)."""
    opt = make_ref()
    w, b = w.astype(np.float64), b.astype(np.float64)
    factors = []
    for step in range(STEPS):
        xs = x[step * BATCH : (step + 1) * BATCH].astype(np.float64)
        ys = y[step * BATCH : (step + 1) * BATCH].astype(np.float64)
        gw, gb = [], []
        for xg, yg in zip(np.split(xs, k), np.split(ys, k)):
            err = 2.0 * (xg @ w + b - yg) / (yg.size)
            gw.append(xg.T @ err / k)
            gb.append(err.sum(0) / k)
        w = opt.step("kernel", w, np.stack(gw))
        b = opt.step("bias", b, np.stack(gb))
        factors.append(opt.factors["kernel"])
    return w, b, factors


def samples(rng, k, shape, step):
    """``k`` gradients whose mean and spread differ by element and step; the spread over
    the samples is set exactly (GSNR about 100 at most), so that float32 resolves every variance."""
    mean = rng.normal(size=shape) * (1.0 + step)
    spread = rng.uniform(0.3, 2.0, size=shape) * (1.0 + step)
    z = rng.normal(size=(k,) + shape)
    z = (z - z.mean(0)) / z.std(0)
    return (mean + spread * z).astype(np.float32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_matches_the_float64_reference_at_k_2_4_8(name):
    """One jitted step (k is a traced value) from the same start for each k."""
    use_devices(1)
    make, make_ref = CASES[name]
    rng = np.random.default_rng(0)
    shapes = {"kernel": (7, 5), "bias": (5,)}
    start = {n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}
    variables = [keras.Variable(start[n], name=n) for n in shapes]
    optimizer = make()
    optimizer.build(variables)
    apply = jax.jit(optimizer.vrgd_stateless_apply)
    for k in (2, 4, 8):
        reference = make_ref()
        values = [v.value for v in variables]
        opt_values = [v.value for v in optimizer.variables]
        expected = {n: start[n].astype(np.float64) for n in shapes}
        for step in range(4):
            xs = {n: samples(rng, k, s, step) for n, s in shapes.items()}
            sums = GroupSums(
                [xs[n].sum(0) for n in shapes],
                [(xs[n] * xs[n]).sum(0) for n in shapes],
                np.float32(k),
            )
            values, opt_values = apply(opt_values, sums, values)
            for n in shapes:
                expected[n] = reference.step(n, expected[n], xs[n].astype(np.float64) / k)
            for got, n in zip(values, shapes):
                np.testing.assert_allclose(np.asarray(got), expected[n], rtol=1e-4, atol=1e-5)
        assert min(f.min() for f in reference.factors.values()) < 0.5


@pytest.mark.parametrize("name,devices,groups", [("VRGDLamb", 2, 2), ("VRGDSGD", 8, 1)])
def test_fit_matches_the_float64_reference(name, devices, groups):
    make, make_ref = CASES[name]
    x, y = data(rows=BATCH * STEPS)
    w0, b0 = linear(x.shape[1], y.shape[1]).get_weights()
    model = fit(make, x, y, BATCH, devices=devices, groups=groups, make_model=linear)
    w, b, factors = reference_run(make_ref, w0, b0, x, y, devices * groups)
    # the factors are not trivial: clipped elements, and they change from step to step
    assert min(f.min() for f in factors) < 0.5
    assert np.abs(factors[0] - factors[-1]).max() > 1e-3
    got_w, got_b = model.get_weights()
    np.testing.assert_allclose(got_w, w, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(got_b, b, rtol=2e-4, atol=2e-5)
