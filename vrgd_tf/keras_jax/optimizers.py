"""The VRGD optimizers on Keras 3's JAX backend: ``VRGDSGD``, ``VRGDAdam``, ``VRGDLars``,
``VRGDLamb`` and :func:`make_vrgd_optimizer`, with the names, arguments, defaults and config
keys of the TensorFlow family (:mod:`vrgd_tf.settings`).

On JAX no per-replica gradient reaches an optimizer: ``JAXTrainer.train_step`` differentiates
the whole batch and XLA inserts the all-reduce. The samples are therefore made in the train
step that :func:`vrgd_tf.use_micro_batches` installs (:mod:`vrgd_tf.keras_jax.step`), which
hands the sums over the ``k`` samples to :meth:`VRGDOptimizer.vrgd_stateless_apply`. That
method computes the factor (:mod:`vrgd_tf.keras_jax.gsnr`), commits the VRGD state and runs
the base rule on ``u = f * S1 / k`` (the mean gradient, what the base gets from Keras) through
the base optimizer's own ``apply`` in a ``StatelessScope``, as Keras' ``stateless_apply`` does:
clipping, weight decay, EMA and the iteration counter stay the base's, and clipping acts on
``u`` (spec section 4). Plain ``stateless_apply`` (Keras' ``fit`` without the grouped step)
raises, naming the call. Spec: ``docs/spec.md`` sections 1 to 4.
"""

import functools
import inspect
import logging
from typing import List, NamedTuple, Optional

import jax
import jax.numpy as jnp
import keras
from keras.src import backend

from vrgd_tf import settings
from vrgd_tf.gsnr.fields import STATISTICS_FIELDS, has_gsnr
from vrgd_tf.keras_jax import gsnr
from vrgd_tf.optimizers.lamb import Lamb
from vrgd_tf.optimizers.lars import Lars

__all__ = ["VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb", "make_vrgd_optimizer", "GroupSums"]

_LOG = logging.getLogger("vrgd_tf")
_CALL = "vrgd_tf.use_micro_batches(model, num_groups=m)"


class GroupSums(NamedTuple):
    """What the grouped step hands the optimizer: per trainable variable ``S1`` and ``S2``
    (float32, the variable's shape, summed over the samples), ``k`` (float32 scalar, the
    contributing samples: those holding an example of nonzero weight, ``docs/spec.md``
    section 1), ``stray`` (None or float32 scalar: the samples without such an example
    that sent a nonzero gradient; > 0 makes the step the base step) and ``num_samples``
    (None, or the static ``devices x groups``: the output is ``factor * S1 / num_samples``,
    the base's mean over the whole batch, whichever samples count; None: ``k``)."""

    s1: List[jnp.ndarray]
    s2: List[jnp.ndarray]
    k: jnp.ndarray
    stray: Optional[jnp.ndarray] = None
    num_samples: Optional[float] = None


def refuse_unsupported(s: settings.VRGDSettings, owner: str) -> None:
    """Raises ``ValueError`` for a setting the JAX path does not implement, naming it."""
    if s.factor_transforms:
        raise ValueError(
            f"{owner}: `factor_transforms` are not supported on the JAX backend (their "
            "context is a TensorFlow record). Use the TensorFlow backend for them."
        )
    if s.squares_dtype != "float32":
        raise ValueError(
            f"{owner}: `squares_dtype={s.squares_dtype!r}` is not supported on the JAX "
            "backend: XLA merges the sums of g and g*g into one all-reduce there. Leave "
            '`squares_dtype="float32"`.'
        )
    if s.split_half:
        raise ValueError(
            f"{owner}: `split_half=True` is not supported on the JAX backend yet. Use the "
            "TensorFlow backend for the split-half reliability, or `split_half=False`."
        )


@settings.expose(lambda self: self._vrgd_settings)
class VRGDOptimizer:
    """Mixin of the JAX VRGD classes (``class VRGDX(VRGDOptimizer, Base)``).

    Attributes:
      default_settings: the class's :class:`vrgd_tf.settings.VRGDSettings`.
      gamma, beta_3, statistics_interval, squares_dtype, state_dtype, split_half,
        factor_transforms: this optimizer's settings (read-only).
    """

    _vrgd_base_class = None
    default_settings = settings.DEFAULTS

    def __init__(self, *args, **kwargs):
        owner = type(self).__name__
        vrgd_settings = self.default_settings.pop_from(kwargs)
        refuse_unsupported(vrgd_settings, owner)
        params = list(inspect.signature(self._vrgd_base_class.__init__).parameters)
        if "name" not in kwargs and ("name" not in params or len(args) < params.index("name") - 1):
            # Keras 3's default name: the class name in snake case, made unique
            # ("vrgd_lamb", "vrgd_lamb_1", ...), as the TensorFlow family's.
            kwargs["name"] = None
        super().__init__(*args, **kwargs)
        self._vrgd_settings = vrgd_settings
        self._vrgd_in_step = False
        self._vrgd_warned = False

    def get_config(self):
        config = super().get_config()
        config.update(self._vrgd_settings.get_config())
        return config

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._vrgd_statistics, self._vrgd_deficits, self._vrgd_corrections = [], [], []
        for i, var in enumerate(variables):
            self._vrgd_statistics.append(self._vrgd_variable("statistics", i, (5,)))
            if self._vrgd_settings.beta_3 > 0:
                self._vrgd_deficits.append(self._vrgd_variable("deficit", i, tuple(var.shape)))
                self._vrgd_corrections.append(self._vrgd_variable("correction", i, ()))

    def _vrgd_variable(self, kind, index, shape):
        """A zero state variable ``vrgd_{kind}_{index}``: float32, the deficit of
        ``state_dtype`` (spec section 3)."""
        dtype = self._vrgd_settings.state_dtype if kind == "deficit" else "float32"
        return self.add_variable(
            shape, initializer="zeros", dtype=dtype, name=f"vrgd_{kind}_{index}"
        )

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        if not self._vrgd_in_step:
            raise RuntimeError(
                f"{type(self).__name__} on the JAX backend got the whole batch's gradient, "
                f"which holds no GSNR samples. Call {_CALL} after `model.compile` (k = "
                "devices x m samples per step; m = 1 under keras.distribution.DataParallel "
                "over n >= 2 devices), then `fit`."
            )
        return super().stateless_apply(optimizer_variables, grads, trainable_variables)

    def apply(self, grads, trainable_variables=None):
        if not self._vrgd_in_step and not self._vrgd_warned:
            self._vrgd_warned = True
            _LOG.warning(
                "%s.apply outside the grouped step has one GSNR sample: the base step runs "
                "(spec section 2). For VRGD call %s.",
                type(self).__name__,
                _CALL,
            )
        return super().apply(grads, trainable_variables)

    def vrgd_stateless_apply(self, optimizer_variables, sums: GroupSums, trainable_variables):
        """The VRGD step from the sums over the samples; returns the new values of
        ``(trainable_variables, optimizer_variables)`` as ``stateless_apply`` does.

        Args:
          optimizer_variables: the values of ``self.variables``, in order.
          sums: :class:`GroupSums`, one ``S1``/``S2`` per trainable variable.
          trainable_variables: the values of the variables the optimizer was built with.
        """
        mapping = list(zip(self._trainable_variables, trainable_variables))
        mapping += list(zip(self.variables, optimizer_variables))
        self._vrgd_in_step = True
        try:
            with backend.StatelessScope(state_mapping=mapping) as scope:
                grads = self._vrgd_reduce(sums)
                super().apply(grads)
        finally:
            self._vrgd_in_step = False
        return (
            [scope.get_current_value(v) for v in self._trainable_variables],
            [scope.get_current_value(v) for v in self.variables],
        )

    def _vrgd_reduce(self, sums: GroupSums):
        """Factors, smoothing, state writes and diagnostics; returns ``u`` per variable."""
        s = self._vrgd_settings
        raws = [gsnr.factor(a, b, sums.k, s.gamma) for a, b in zip(sums.s1, sums.s2)]
        defined = sum(r.num_defined for r in raws)
        finite = jnp.all(jnp.stack([r.finite for r in raws]))
        # A step without a GSNR (k < 2, or no defined element) is the base step and leaves
        # the state; so does a step whose sums are not finite (spec sections 1 to 3).
        has_gsnr = (sums.k >= 2.0) & (defined > 0)
        if sums.stray is not None:  # a stray gradient cannot be separated (spec section 1)
            has_gsnr = has_gsnr & (sums.stray == 0.0)
        commit = has_gsnr & finite
        smoothed = None
        if s.beta_3 > 0:
            made, smoothed = self._vrgd_smooth(sums, raws, has_gsnr, commit)
        else:
            made = [functools.partial(jnp.where, has_gsnr, r.factor, 1.0) for r in raws]
        applied = [fn() for fn in made]  # unused values are left out of the program
        self._vrgd_record(sums, raws, applied, smoothed, has_gsnr, finite)
        return self._vrgd_outputs(sums, made, smoothed, commit)

    def _vrgd_outputs(self, sums, made, smoothed, commit):
        """``u = f * S1 / k`` per variable in its dtype (``made``: ``fn() -> f`` each).
        Where a float32 deficit is read back (``smoothed``), ``u`` is made in one
        ``lax.cond`` on ``commit``: a step that commits takes ``1 - d_t / c_t`` from the
        stored ``d_t`` and reads ``S1`` and ``d_t`` only, one that does not takes the factor
        again (the same values); the output is then written once, not fused into the base
        rule's loops with the factor written out (``docs/cost_model.md`` section 6.7)."""
        # The mean over every sample, as the base's loss over the whole batch (a group
        # without examples of nonzero weight still counts in its denominator).
        total = sums.k if sums.num_samples is None else sums.num_samples
        inv_k = 1.0 / jnp.maximum(total, 1.0)
        gamma, s1 = self._vrgd_settings.gamma, sums.s1
        read_back = [i for i, x in enumerate(smoothed or []) if x is not None]
        out = [None if i in read_back else fn() * s1[i] * inv_k for i, fn in enumerate(made)]
        if read_back:
            scaled = jax.lax.cond(
                commit,
                lambda: [gsnr.corrected(*smoothed[i], gamma) * s1[i] * inv_k for i in read_back],
                lambda: [made[i]() * s1[i] * inv_k for i in read_back],
            )
            for i, u in zip(read_back, scaled):
                out[i] = u
        return [u.astype(var.dtype) for u, var in zip(out, self._trainable_variables)]

    def _vrgd_smooth(self, sums, raws, has_gsnr, commit):
        """``fn() -> the smoothed factor`` per variable (spec section 3; called where it
        is used: :meth:`_vrgd_outputs`) and, for the diagnostics' branch and the output, the
        ``(d_t, c_t)`` stored per variable; commits the state on a step that ``commit``.

        A float32 deficit is read back after the commit: the factor is ``1 - d_t / c_t``
        from the stored ``d_t``, recomputed from it (``d_{t-1}``) and the raw factor taken
        again from ``S1`` and ``S2`` on a step that did not commit (the same values). The
        previous deficit is then read by the commit's loop only (no copy of it) and the raw
        factor is not written out for two loops (``docs/cost_model.md`` sections 6.2, 6.5).
        """
        s = self._vrgd_settings
        out, stored = [], []
        for raw, s1, s2, d, c in zip(
            raws, sums.s1, sums.s2, self._vrgd_deficits, self._vrgd_corrections
        ):
            # A bfloat16 deficit is read into float32 and rounded only at the write.
            previous, correction = d.value.astype(jnp.float32), c.value
            p_hat, new_d, new_c = gsnr.smooth(raw.factor, previous, correction, s.beta_3, s.gamma)
            kept = jnp.where(commit, new_d, previous)
            d.assign(kept.astype(d.dtype))
            c.assign(jnp.where(commit, new_c, correction))
            if d.dtype == "float32":
                # the branch's operand: the array stored, which exists anyway
                stored.append((kept, new_c))
                args = (sums.k, s1, s2, kept, raw.mean_ratio, correction, new_c)
                out.append(functools.partial(self._vrgd_read_back, commit, has_gsnr, *args))
            else:
                stored.append(None)
                out.append(functools.partial(jnp.where, has_gsnr, p_hat, 1.0))
        return out, stored

    def _vrgd_read_back(self, commit, has_gsnr, k, s1, s2, kept, mean_ratio, correction, new_c):
        """The smoothed factor from the stored deficit ``kept``: ``d_t`` where the step
        committed, else ``d_t`` recomputed from it (``d_{t-1}``) and the raw factor taken
        again from ``S1`` and ``S2`` (the same values)."""
        s = self._vrgd_settings
        s1, s2, kept = jax.lax.optimization_barrier((s1, s2, kept))
        again = gsnr.reapplied(s1, s2, k, s.gamma, mean_ratio)
        redone = gsnr.smooth(again, kept, correction, s.beta_3, s.gamma)[1]
        d_t = jnp.where(commit, kept, redone)
        return jnp.where(has_gsnr, gsnr.corrected(d_t, new_c, s.gamma), 1.0)

    def _vrgd_record(self, sums, raws, applied, smoothed, has_gsnr, finite):
        """The diagnostics of a recording step with finite sums. With
        ``statistics_interval > 1`` they are computed in a ``lax.cond`` branch taken on a
        recording step only; with 1, on every step, in the step itself. Either way they
        take the factors again from ``S1``, ``S2``, scalars and the stored deficits, in
        the loop that sums them: a conditional's operands are written out on every step,
        and factors shared with the step's output would be written out for two loops."""
        interval = self._vrgd_settings.statistics_interval
        if interval == 0:
            return
        recording = ((self.iterations.value + 1) % interval == 0) & finite
        gamma = self._vrgd_settings.gamma

        def rows(raws, applied):
            return [
                jnp.where(has_gsnr, gsnr.statistics(s1, raw, f, sums.k, gamma), 0.0)
                for s1, raw, f in zip(sums.s1, raws, applied)
            ]

        kept = [row.value for row in self._vrgd_statistics]
        again = functools.partial(self._vrgd_again, sums, raws, applied, smoothed)
        if interval == 1:
            new = [jnp.where(recording, r, k) for r, k in zip(rows(*again()), kept)]
        else:
            new = jax.lax.cond(recording, lambda: rows(*again()), lambda: kept)
        for row, value in zip(self._vrgd_statistics, new):
            row.assign(value)

    def _vrgd_again(self, sums, raws, applied, smoothed):
        """``(raws, applied)`` taken again inside the recording branch from ``S1``, ``S2``,
        the raw factors' scalars and the stored ``(d_t, c_t)`` (``smoothed``; a bfloat16
        deficit keeps its applied factor as an operand). On a recording step the sums are
        finite, so a step with a GSNR committed ``d_t``."""
        s = self._vrgd_settings
        raws_again, applied_again = [], []
        for i, (raw, s1, s2) in enumerate(zip(raws, sums.s1, sums.s2)):
            factor = gsnr.reapplied(s1, s2, sums.k, s.gamma, raw.mean_ratio)
            raws_again.append(raw._replace(factor=factor))
            if smoothed is None:
                applied_again.append(factor)  # rows() zeroes a step without a GSNR
            elif smoothed[i] is None:
                applied_again.append(applied[i])
            else:
                d_t, c_t = smoothed[i]
                applied_again.append(gsnr.corrected(d_t, c_t, s.gamma))
        return raws_again, applied_again

    def vrgd_statistics(self):
        """``{variable path: {field: float}}`` of the last recording step (spec section 4):
        ``mean_gsnr``, ``frac_at_gamma``, ``frac_at_one``, ``mean_factor``, ``norm_ratio``
        and ``has_gsnr`` (a row of zeros: no step recorded it)."""
        out = {}
        for var, row in zip(self._trainable_variables, self._vrgd_statistics):
            values = [float(v) for v in keras.ops.convert_to_numpy(row.value)]
            row = dict(zip(STATISTICS_FIELDS, values))
            out[var.path] = dict(row, has_gsnr=has_gsnr(row))
        return out


def _signature(base_cls, defaults):
    params = [
        p.replace(default=None) if p.name == "name" else p
        for p in list(inspect.signature(base_cls.__init__).parameters.values())[1:]
    ]
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return inspect.Signature(params + settings.signature_parameters(defaults) + var_kw)


def _complete(cls, base_class, default_beta_3, register=True):
    defaults = settings.DEFAULTS.replace(beta_3=default_beta_3)
    cls._vrgd_base_class = base_class
    cls.default_settings = defaults
    cls.__signature__ = _signature(base_class, defaults)
    head = cls.__dict__.get("__doc__") or f"VRGD version of `{base_class.__name__}` (JAX).\n"
    cls.__doc__ = head + "\n    VRGD arguments (docs/spec.md):\n" + settings.args_doc(defaults)
    # Registered under the JAX backend only: the TensorFlow family registers the same names
    # ("vrgd_tf>VRGDLamb", ...), and this module imported in a TensorFlow-backend process
    # (e.g. by a doc build or a package walk) must not make `load_model` there build these.
    if register and keras.backend.backend() == "jax":
        cls = keras.saving.register_keras_serializable(package="vrgd_tf", name=cls.__name__)(cls)
    return cls


def make_vrgd_optimizer(
    base_class, *, name=None, default_beta_3=settings.DEFAULTS.beta_3, register=True, doc=None
):
    """Returns the VRGD version of a Keras 3 optimizer class on the JAX backend.

    Args: as ``vrgd_tf.make_vrgd_optimizer`` on TensorFlow: ``base_class`` a subclass of
    ``keras.optimizers.Optimizer``; ``name`` (default ``"VRGD" + base_class.__name__``);
    ``default_beta_3`` in [0, 1); ``register`` as Keras serializable (package ``vrgd_tf``;
    under the JAX backend only, where the class runs);
    ``doc`` the class docstring.

    Raises:
      TypeError: ``base_class`` is not an optimizer class, or is already a VRGD class.
    """
    if not (isinstance(base_class, type) and issubclass(base_class, keras.optimizers.Optimizer)):
        raise TypeError(
            f"`base_class` must be a keras.optimizers.Optimizer subclass; got {base_class!r}."
        )
    if issubclass(base_class, VRGDOptimizer):
        base = base_class._vrgd_base_class
        raise TypeError(
            f"make_vrgd_optimizer: `base_class={base_class.__name__}` is already a VRGD "
            f"optimizer (its base is {base.__module__}.{base.__name__}). Use it directly."
        )
    settings.VRGDSettings(beta_3=default_beta_3)
    cls_name = name or "VRGD" + base_class.__name__
    cls = type(cls_name, (VRGDOptimizer, base_class), {"__doc__": doc, "__module__": __name__})
    return _complete(cls, base_class, default_beta_3, register)


class VRGDSGD(VRGDOptimizer, keras.optimizers.SGD):
    """VR-SGD and VR-Momentum (Algorithm 1, eq. 10) on JAX: `keras.optimizers.SGD` fed the
    variance-reduced gradient."""


class VRGDAdam(VRGDOptimizer, keras.optimizers.Adam):
    """VR-Adam (Section 4.2) on JAX: `keras.optimizers.Adam` with the factor applied before
    the moment estimates."""


class VRGDLars(VRGDOptimizer, Lars):
    """VR-LARS on JAX: `vrgd_tf.Lars` (Model Garden's LARS) fed the variance-reduced gradient
    (momentum, weight decay and trust ratio all see it). `weight_decay` is refused: use
    `weight_decay_rate`."""


class VRGDLamb(VRGDOptimizer, Lamb):
    """VR-LAMB on JAX: `vrgd_tf.Lamb` (You et al. 2020 Algorithm 2 as in Model Garden) with
    the factor applied before the moment estimates. `weight_decay` is refused: use
    `weight_decay_rate`."""


VRGDSGD = _complete(VRGDSGD, keras.optimizers.SGD, settings.DEFAULTS.beta_3)
VRGDAdam = _complete(VRGDAdam, keras.optimizers.Adam, settings.ADAPTIVE_BETA_3)
VRGDLars = _complete(VRGDLars, Lars, settings.DEFAULTS.beta_3)
VRGDLamb = _complete(VRGDLamb, Lamb, settings.ADAPTIVE_BETA_3)
