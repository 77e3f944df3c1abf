"""The per-variable sums of the JAX path (``vrgd_tf.keras_jax.gsnr.sums``): float64
accuracy over every size (whole blocks, a rest, fewer elements than one block, none), NaN
and Inf propagated into the finiteness test, and the compiled factor's sums as one loop
that writes no per-element value out (``docs/cost_model.md`` section 6.5)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vrgd_tf.keras_jax import gsnr


def _parts(a, b):
    return [a, a * b, (a > 0.5).astype(jnp.float32)]


@pytest.mark.parametrize(
    "shape", [(0,), (1,), (7,), (255,), (256,), (257,), (3, 300), (16, 16, 3), (1000, 1001)]
)
def test_sums_equal_float64_sums(shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.uniform(0.0, 1.0, shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    got = jax.jit(lambda a, b: gsnr.sums(_parts, (a, b)))(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = [a64.sum(), (a64 * b64).sum(), float((a > 0.5).sum())]
    for g, w, scale in zip(got, want, [a64.sum(), np.abs(a64 * b64).sum(), 1.0]):
        assert abs(float(g) - w) <= 1e-6 * max(scale, 1.0), (shape, float(g), w)


def test_a_sum_of_many_equal_values_does_not_drift():
    """A factor mostly at ``gamma``: 2**21 + 77 values of 0.1, which a float32 sum in
    sequence gets 1e-3 wrong; here within 2e-7 of float64."""
    n = 2**21 + 77
    values = jnp.full((n,), 0.1, jnp.float32)
    (got,) = jax.jit(lambda v: gsnr.sums(lambda x: [x], (v,)))(values)
    want = n * float(np.float32(0.1))
    assert abs(float(got) - want) <= 2e-7 * want


@pytest.mark.parametrize("where", [0, 300, 1023])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_sum_that_is_not_finite_makes_the_factor_not_finite(where, bad):
    s1 = np.full((1024,), 1.0, np.float32)
    s1[where] = bad
    f = jax.jit(lambda a, b: gsnr.factor(a, b, jnp.float32(4.0), 0.1))(s1, np.abs(s1) * 2)
    assert not bool(f.finite)
    assert np.all(np.isfinite(np.asarray(f.factor)))
    f = jax.jit(lambda a, b: gsnr.factor(a, b, jnp.float32(4.0), 0.1))(
        np.ones_like(s1), np.full_like(s1, 2.0)
    )
    assert bool(f.finite)


def test_the_factors_sums_write_no_per_element_value_out():
    """Compiled, the factor's mean ratio reads ``S1`` and ``S2`` in one fused reduce: no
    instruction of the entry computation makes a per-element array (the separate sums
    wrote the mask and the ratio out, and an ``is_finite`` array)."""
    shape = (512, 512)
    s1 = jnp.ones(shape, jnp.float32)

    def mean_ratio(a, b, k):
        f = gsnr.factor(a, b, k, 0.1)
        return f.mean_ratio, f.num_defined, f.finite

    text = jax.jit(mean_ratio).lower(s1, s1 * 2, jnp.float32(4.0)).compile().as_text()
    entry = text[text.index("\nENTRY") :]
    made = [
        line
        for line in entry.splitlines()[1:]
        if " = " in line
        and "parameter(" not in line
        and re.search(r"\[262144\]|\[512,512\]", line.split(" = ")[1].split(" ")[0])
    ]
    assert not made, made


def test_a_variable_of_no_element_records_mean_factor_0():
    """Its row says "not measured" (``vrgd_tf.gsnr.fields.has_gsnr``): ``mean_factor`` 0, as
    the spec's section 4 and the TensorFlow family record it (``jnp.mean`` of no element
    recorded NaN, which ``has_gsnr`` read as measured)."""
    import keras

    import vrgd_tf
    from vrgd_tf.gsnr.fields import STATISTICS_FIELDS, has_gsnr
    from vrgd_tf.keras_jax.optimizers import GroupSums

    variables = [keras.Variable(np.ones((4,), np.float32)), keras.Variable(np.zeros((0,)))]
    opt = vrgd_tf.VRGDSGD(0.1, statistics_interval=1)
    opt.build(variables)
    s1 = [np.array([1, 2, 3, 4], np.float32), np.zeros((0,), np.float32)]
    s2 = [np.array([3, 5, 7, 9], np.float32), np.zeros((0,), np.float32)]
    _, values = jax.jit(opt.vrgd_stateless_apply)(
        [v.value for v in opt.variables],
        GroupSums(s1, s2, np.float32(4)),
        [v.value for v in variables],
    )
    rows = [np.asarray(x) for v, x in zip(opt.variables, values) if "statistics" in v.path]
    empty = dict(zip(STATISTICS_FIELDS, rows[1].tolist()))
    assert np.all(np.isfinite(rows[1]))
    assert empty["mean_factor"] == 0.0
    assert not has_gsnr(empty)
    assert has_gsnr(dict(zip(STATISTICS_FIELDS, rows[0].tolist())))
