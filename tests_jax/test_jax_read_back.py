"""The JAX path's factor momentum with the deficit read back after the commit
(``VRGDOptimizer._vrgd_smooth``, ``docs/cost_model.md`` section 6.5), against the factor
momentum written out in float64 here: steps that commit, a step whose sums are not finite
(the state stays, the finite variables still get ``p_hat`` from ``d_{t-1}``), a step with
one sample (factor 1, the state stays), and the diagnostics of ``statistics_interval=3``
taken again inside the recording branch."""

import jax
import keras
import numpy as np
import pytest
from hlo_text import output_conditional_arrays
from jaxutil import use_devices

import vrgd_tf
from vrgd_tf.gsnr.fields import STATISTICS_FIELDS
from vrgd_tf.keras_jax.optimizers import GroupSums

import numpy_reference as ref

LR, BETA_3, GAMMA = 0.1, 0.5, 0.1
SHAPES = {"kernel": (40, 9), "bias": (9,)}


def _samples(rng, k, shape):
    mean = rng.normal(size=shape)
    z = rng.normal(size=(k,) + shape)
    if k > 1:
        z = (z - z.mean(0)) / z.std(0)
    return (mean + rng.uniform(0.3, 2.0, size=shape) * z).astype(np.float32)


@pytest.mark.parametrize("interval", [1, 3])
def test_read_back_factor_momentum_equals_the_float64_momentum(interval):
    use_devices(1)
    rng = np.random.default_rng(3)
    variables = [keras.Variable(np.zeros(s, np.float32), name=n) for n, s in SHAPES.items()]
    opt = vrgd_tf.VRGDSGD(LR, beta_3=BETA_3, gamma=GAMMA, statistics_interval=interval)
    opt.build(variables)
    apply = jax.jit(opt.vrgd_stateless_apply)
    values = [v.value for v in variables]
    opt_values = [v.value for v in opt.variables]
    deficit = {n: np.zeros(s) for n, s in SHAPES.items()}
    correction = 0.0
    # (k, the bias's S1 not finite): commit (x3), not finite, one sample, commit; interval
    # 3 records on the third and the sixth step
    plan = [(4, False), (4, False), (4, False), (4, True), (1, False), (4, False)]
    for step, (k, nan) in enumerate(plan):
        xs = {n: _samples(rng, k, s) for n, s in SHAPES.items()}
        s1 = {n: xs[n].sum(0) for n in SHAPES}
        s2 = {n: (xs[n] * xs[n]).sum(0) for n in SHAPES}
        if nan:
            s1["bias"][3] = np.nan
        sums = GroupSums([s1[n] for n in SHAPES], [s2[n] for n in SHAPES], np.float32(k))
        before = [np.asarray(v) for v in values]
        values, opt_values = apply(opt_values, sums, values)
        raw = ref.gsnr_factor(xs["kernel"].astype(np.float64), GAMMA)[0]
        new_c = BETA_3 * correction + 1 - BETA_3
        new_d = BETA_3 * deficit["kernel"] + (1 - BETA_3) * (1 - raw)
        want = np.clip(1 - new_d / new_c, GAMMA, 1) if k > 1 else np.ones_like(raw)
        u = (before[0] - np.asarray(values[0])) / LR
        np.testing.assert_allclose(u, want * s1["kernel"] / k, rtol=2e-5, atol=1e-6)
        if k > 1 and not nan:
            correction = new_c
            deficit = {
                n: BETA_3 * deficit[n]
                + (1 - BETA_3) * (1 - ref.gsnr_factor(xs[n].astype(np.float64), GAMMA)[0])
                for n in SHAPES
            }
        stored = {v.path.split("/")[-1]: np.asarray(x) for v, x in zip(opt.variables, opt_values)}
        np.testing.assert_allclose(stored["vrgd_deficit_0"], deficit["kernel"], atol=2e-6)
        np.testing.assert_allclose(stored["vrgd_deficit_1"], deficit["bias"], atol=2e-6)
        assert float(stored["vrgd_correction_0"]) == pytest.approx(correction, abs=1e-7)
        if step == 1 and interval == 3:  # nothing recorded yet
            assert not np.any(stored["vrgd_statistics_0"])
        if step in (2, 5) or (step == 1 and interval == 1):
            row = dict(zip(STATISTICS_FIELDS, stored["vrgd_statistics_0"]))
            assert row["mean_factor"] == pytest.approx(want.mean(), rel=1e-5)
            at_gamma = np.mean(raw <= GAMMA * (1 + 1e-6))
            assert row["frac_at_gamma"] == pytest.approx(at_gamma, abs=1.5 / raw.size)


def test_the_output_of_a_committing_step_reads_s1_and_the_stored_deficit_only():
    """``u = f * S1 / k`` is made in one ``lax.cond`` on the commit
    (``VRGDOptimizer._vrgd_outputs``): the branch of a step that commits takes ``S1`` and
    the stored ``d_t`` (two arrays of the variable's size) and not ``S2``, which only the
    other branch reads (``docs/cost_model.md`` section 6.7). Read from the compiled HLO of
    the step on one variable of 4,096 elements."""
    use_devices(1)
    variables = [keras.Variable(np.zeros((64, 64), np.float32), name="kernel")]
    opt = vrgd_tf.VRGDSGD(LR, beta_3=BETA_3, gamma=GAMMA, statistics_interval=0)
    opt.build(variables)
    s1 = np.ones((64, 64), np.float32)
    sums = GroupSums([s1], [s1 * 2], np.float32(4))
    args = ([v.value for v in opt.variables], sums, [v.value for v in variables])
    text = jax.jit(opt.vrgd_stateless_apply).lower(*args).compile().as_text()
    # S1 and d_t against S1, S2 and d_{t-1} (the other branch's factor is large enough
    # that XLA keeps the conditional rather than making it a select)
    committing, other = output_conditional_arrays(text, ("f32[4096]", "f32[64,64]"))
    assert committing == 2, (committing, other)
    assert other >= 3, (committing, other)
