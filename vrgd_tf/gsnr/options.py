"""The VRGD settings, their checks and the noise thresholds (spec sections 1-4).

:class:`VRGDSettings` is the one record of everything a user can set on VRGD: each field's
default, check, documentation and whether it is a config key are declared once, here. Every
VRGD class of both families, :class:`vrgd_tf.GSNRAggregator` and the Model Garden configs
take its fields as keywords, and :func:`vrgd_tf.gsnr.variance_reduce` takes the record
itself. It imports no TensorFlow (the JAX family checks its settings with it);
:mod:`vrgd_tf.settings` derives the signatures, docstrings and config fields from it.
"""

import dataclasses
import inspect
import numbers
import sys
from typing import Any, Callable, Dict

import numpy as np

__all__ = [
    "NOISE_RTOL",
    "NOISE_RTOL_BFLOAT16",
    "PACK_LIMIT",
    "SQUARES_DTYPES",
    "STATE_DTYPES",
    "SPARSE_STATISTICS",
    "STATISTICS_INTERVAL",
    "XLA_CLUSTERS",
    "XLA_CLUSTER_MIN",
    "VRGDSettings",
    "noise_rtol",
]

#: Relative threshold, per replica, below which the variance across replicas counts as zero:
#: an element is "noise free" when ``s2 <= NOISE_RTOL * k * mean(x**2)``. 16 float32 ulps
#: per summed replica.
NOISE_RTOL = 16.0 * float(np.finfo(np.float32).eps)

#: The same threshold when the squares travel in bfloat16 (``squares_dtype="bfloat16"``):
#: the unit roundoff of bfloat16, ``2**-8``, per summed replica. Each square is rounded
#: once (relative error <= 2**-8) and each of the ``k - 1`` additions of the all-reduce
#: rounds once more, so ``S2`` is known to about ``k * 2**-8 * S2`` at worst, and an element
#: counts as noisy only if ``noise > 2**-8 * k * S2``, i.e. its GSNR is below
#: ``1 / (2**-8 * k) - 1`` (127 at k = 2, 31 at k = 8, 3 at k = 64); above that it gets
#: factor 1 and is left out of ``mean(r)``, as in float32 (*our reading*; measured in
#: ``docs/results.md``).
NOISE_RTOL_BFLOAT16 = 2.0**-8

#: The default ``pack_limit``: ``DENSE`` gradients of at most this many elements share one
#: block (``vrgd_tf.gsnr.layout.Block``). Below it a variable's fixed cost per op
#: outweighs the pack's extra copy (concatenation and split, about two passes over its
#: elements); measured in ``benchmarks/passes.py`` and ``benchmarks/overhead.py``. Defined
#: here, with the other options, so that this module imports no TensorFlow (the JAX family
#: checks its settings with it); :mod:`vrgd_tf.gsnr.layout` uses it.
PACK_LIMIT = 16384

#: The default ``statistics_interval``: the diagnostics are recorded on one step in 100
#: (``GSNRTensorBoard``'s default ``update_freq``), so a user who reads them rarely does not
#: pay for them on every step (issue 39; before, every step: 1).
STATISTICS_INTERVAL = 100
#: The values of ``xla_cluster``.
XLA_CLUSTERS = ("auto", "always", "never")
#: ``xla_cluster="auto"`` clusters a step whose dense statistics hold at least this many
#: elements (1 MiB of float32): below it a memory pass costs less than the ops' launches.
XLA_CLUSTER_MIN = 2**18

#: Allowed values of ``squares_dtype``: the dtype the squares are all-reduced in.
SQUARES_DTYPES = ("float32", "bfloat16")

#: Allowed values of ``state_dtype``: the dtype the per-element ``beta_3`` state (the
#: deficit) is stored in; its math is float32 whatever it is (spec section 3).
STATE_DTYPES = ("float32", "bfloat16")

#: Allowed values of ``sparse_statistics``, the statistics path of a ``tf.IndexedSlices``
#: gradient (spec section 4): ``"rows"``, exact statistics on the rows some replica touched
#: (one all-gather; where it applies, see :mod:`vrgd_tf.gsnr.layout`), or ``"dense"``, the
#: statistics of its dense form (densified and all-reduced with the dense gradients).
SPARSE_STATISTICS = ("rows", "dense")


def validate_gamma(gamma):
    """Checks ``gamma``, the lower bound of the VRGD factor (spec section 2, eq. 9).

    Args:
      gamma: Python number in (0, 1].

    Returns:
      ``gamma`` as a Python float.

    Raises:
      TypeError: ``gamma`` is not a real number.
      ValueError: ``gamma`` is outside (0, 1].
    """
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(
            f"`gamma` must be a float in (0, 1]; got {gamma!r} of type {type(gamma).__name__}."
        )
    gamma = float(gamma)
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"`gamma` must be in (0, 1]; got {gamma}.")
    return gamma


def validate_beta_3(beta_3):
    """Checks ``beta_3``, the decay of the VRGD factor's momentum (spec section 3).

    Args:
      beta_3: Python number in [0, 1). 0 means the raw per-step factor is used.

    Returns:
      ``beta_3`` as a Python float.

    Raises:
      TypeError: ``beta_3`` is not a real number.
      ValueError: ``beta_3`` is outside [0, 1).
    """
    if isinstance(beta_3, bool) or not isinstance(beta_3, numbers.Real):
        raise TypeError(
            f"`beta_3` must be a float in [0, 1); got {beta_3!r} of type {type(beta_3).__name__}."
        )
    beta_3 = float(beta_3)
    if not 0.0 <= beta_3 < 1.0:
        raise ValueError(f"`beta_3` must be in [0, 1); got {beta_3}.")
    return beta_3


def validate_factor_transforms(factor_transforms) -> tuple:
    """``factor_transforms`` as a tuple of callables; None or empty gives ``()``.

    Raises:
      TypeError: not a sequence of callables, or a callable that does not take two
        positional arguments ``(factor, context)`` (the message names the argument).
    """
    if factor_transforms is None:
        return ()
    if callable(factor_transforms):
        factor_transforms = (factor_transforms,)
    try:
        transforms = tuple(factor_transforms)
    except TypeError:
        transforms = None
    if transforms is None or not all(callable(t) for t in transforms):
        raise TypeError(
            "`factor_transforms` must be a sequence of callables "
            "`fn(factor, context) -> factor`; got "
            f"{factor_transforms!r}."
        )
    for i, fn in enumerate(transforms):
        signature = _signature(fn)
        if signature is not None and not _binds(signature, 2):
            raise TypeError(
                f"{transform_label(i, fn)} must take two positional arguments "
                "`(factor, context)` (context: a vrgd_tf.gsnr.FactorContext); its signature "
                f"is {signature}."
            )
    return transforms


def transform_label(index: int, fn) -> str:
    """How messages name a factor transform: ``"`factor_transforms[i]` (its name)"``."""
    return f"`factor_transforms[{index}]` ({getattr(fn, '__name__', type(fn).__name__)})"


def _signature(fn):
    """``inspect.signature(fn)``, or None where it cannot be read (some builtins)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _binds(signature, count: int) -> bool:
    """Whether ``signature`` accepts ``count`` positional arguments."""
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def _dtype_name(value, name: str, allowed) -> str:
    """``value`` (a string, or a ``tf.DType``) as one of the names ``allowed``, or the
    TypeError/ValueError naming the argument ``name`` and the allowed values."""
    # A tf.DType exists only where TensorFlow is imported: this module imports none.
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(value, tf.DType):
        value = value.name
    want = f"`{name}` must be one of {', '.join(repr(d) for d in allowed)}"
    if not isinstance(value, str):
        raise TypeError(f"{want}; got {value!r} of type {type(value).__name__}.")
    if value not in allowed:
        raise ValueError(f"{want}; got {value!r}.")
    return value


def validate_squares_dtype(squares_dtype):
    """Checks ``squares_dtype``, the dtype the squared gradients are all-reduced in.

    Args:
      squares_dtype: ``"float32"`` (default of every VRGD class: the squares travel as
        float32, in a call of their own after the gradients) or ``"bfloat16"`` (they travel
        in bfloat16, half the bytes; the gradient sums stay float32 and exact). A
        ``tf.DType`` of those names is accepted too.

    Returns:
      The name, ``"float32"`` or ``"bfloat16"``.

    Raises:
      TypeError: not a string (or ``tf.DType``).
      ValueError: not one of ``SQUARES_DTYPES``.
    """
    return _dtype_name(squares_dtype, "squares_dtype", SQUARES_DTYPES)


def validate_state_dtype(state_dtype):
    """Checks ``state_dtype``, the dtype the per-element ``beta_3`` state is stored in.

    Args:
      state_dtype: ``"float32"`` (default of every VRGD class) or ``"bfloat16"`` (the
        deficit is stored in bfloat16, half the bytes; it is read into float32, every
        operation is float32, and it is rounded to bfloat16 only when written: spec
        section 3). A ``tf.DType`` of those names is accepted too.

    Returns:
      The name, ``"float32"`` or ``"bfloat16"``.

    Raises:
      TypeError: not a string (or ``tf.DType``).
      ValueError: not one of ``STATE_DTYPES``.
    """
    return _dtype_name(state_dtype, "state_dtype", STATE_DTYPES)


def validate_sparse_statistics(sparse_statistics) -> str:
    """Checks ``sparse_statistics``, one of ``SPARSE_STATISTICS``.

    Raises:
      ValueError: another value (the message names the argument and the allowed ones).
    """
    if sparse_statistics not in SPARSE_STATISTICS:
        raise ValueError(
            "`sparse_statistics` must be one of "
            f"{', '.join(repr(s) for s in SPARSE_STATISTICS)}; got {sparse_statistics!r}."
        )
    return sparse_statistics


def validate_xla_cluster(xla_cluster) -> str:
    """Checks ``xla_cluster``, one of ``XLA_CLUSTERS`` (True and False stand for
    ``"always"`` and ``"never"``).

    Raises:
      ValueError: another value (the message names the argument and the allowed ones).
    """
    if xla_cluster is True or xla_cluster is False:
        return "always" if xla_cluster else "never"
    if not isinstance(xla_cluster, str) or xla_cluster not in XLA_CLUSTERS:
        raise ValueError(
            "`xla_cluster` must be one of "
            f"{', '.join(repr(s) for s in XLA_CLUSTERS)} (or True/False); got {xla_cluster!r}."
        )
    return xla_cluster


def _non_negative_int(value, name: str, zero: str) -> int:
    """``value`` as an int >= 0, or the TypeError (not an int; bools refused) or ValueError
    (negative) naming ``name`` and what 0 means (``zero``)."""
    want = f"`{name}` must be an int >= 0 (0 = {zero})"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{want}; got {value!r} of type {type(value).__name__}.")
    if value < 0:
        raise ValueError(f"{want}; got {value}.")
    return int(value)


def validate_pack_limit(pack_limit) -> int:
    """Checks ``pack_limit``, the largest gradient (in elements) the step packs with the
    other small dense ones into one buffer (``vrgd_tf.gsnr.layout``).

    Args:
      pack_limit: int >= 0; 0 packs nothing. The step's outputs (factors, scaled
        gradients, statistics) and its state are the same bit for bit whatever it is
        (outside XLA; under XLA to float32 rounding, ``vrgd_tf.gsnr.packing``); only
        its count of ops changes. The weights after the base rule can differ in the last
        bits where the graph optimizer regroups that rule's ops (docs/spec.md, section 1).

    Returns:
      The limit as an int.

    Raises:
      TypeError: not an int (bools refused).
      ValueError: negative.
    """
    return _non_negative_int(pack_limit, "pack_limit", "no packing")


def noise_rtol(squares_dtype="float32") -> float:
    """The per-replica relative noise threshold for squares all-reduced in
    ``squares_dtype``: ``NOISE_RTOL`` (float32) or ``NOISE_RTOL_BFLOAT16``."""
    return NOISE_RTOL_BFLOAT16 if squares_dtype == "bfloat16" else NOISE_RTOL


def _check_split_half(split_half) -> bool:
    """``split_half`` if it is a bool; TypeError naming it otherwise."""
    if not isinstance(split_half, bool):
        raise TypeError(f"`split_half` must be a bool; got {split_half!r}.")
    return split_half


def _check_statistics_interval(statistics_interval) -> int:
    return _non_negative_int(statistics_interval, "statistics_interval", "never record")


def _setting(default, check: Callable[[Any], Any], doc: str, serialized: bool = True):
    """A :class:`VRGDSettings` field: its default, its check (value -> normalised value,
    raising ``TypeError``/``ValueError`` that names the argument), its doc paragraph (without
    the default) and whether it is a config key."""
    return dataclasses.field(
        default=default, metadata={"check": check, "doc": doc, "serialized": serialized}
    )


@dataclasses.dataclass(frozen=True)
class VRGDSettings:
    """The VRGD settings (arXiv 2309.13681; spec ``docs/spec.md``), checked at construction.

    Construction normalises each value (e.g. ``gamma`` to a Python float, one callable of
    ``factor_transforms`` to a tuple) and raises ``TypeError``/``ValueError`` naming the
    argument for a value outside its range, once. The defaults are the aggregator's; a VRGD
    class has its own ``default_settings`` (``beta_3`` 0.9 for the Adam-type classes).
    Fields: see :func:`vrgd_tf.settings.args_doc`; every field but ``factor_transforms`` is
    a config key (``get_config``, Model Garden).
    """

    gamma: float = _setting(
        0.1,
        validate_gamma,
        "float in (0, 1], lower bound of the per-element factor (eq. 9). ``gamma=1`` with "
        "``beta_3=0`` reproduces the base optimizer exactly.",
    )
    beta_3: float = _setting(
        0.0,
        validate_beta_3,
        "float in [0, 1), decay of the factor's momentum with bias correction (Section "
        "4.2; *our reading*); 0 uses the raw per-step factor. The paper's VR-Adam and "
        "VR-LAMB use 0.9, its VR-SGD and VR-LARS the raw factor.",
    )
    statistics_interval: int = _setting(
        STATISTICS_INTERVAL,
        _check_statistics_interval,
        "int >= 0, in steps. The GSNR diagnostics (``vrgd_statistics()``) are computed and "
        "stored on the steps that bring the step count (``iterations``) to a multiple of "
        "it (every step for 1, never for 0); other steps skip that work. The default, "
        "100, is ``GSNRTensorBoard``'s default ``update_freq``: recording costs a step some "
        "tenth of its time (``docs/cost_model.md``), so only one step in 100 pays for it; "
        "a saved config keeps the value it was saved with (1 for saves made before this "
        "default). Set it to the summary interval (e.g. ``GSNRTensorBoard(update_freq=...)``; "
        "1 for a ``GSNRLogger`` that should show every step's values; with Model Garden a "
        "divisor of ``trainer.steps_per_loop``).",
    )
    squares_dtype: str = _setting(
        "float32",
        validate_squares_dtype,
        '``"float32"`` or ``"bfloat16"``, the dtype the squared gradients are all-reduced '
        "in; the gradients stay float32. bfloat16 sends 6 instead of 8 bytes per parameter, "
        "and GSNRs above about ``1 / (2**-8 k)`` count as undefined (factor 1): "
        "``docs/cost_model.md``.",
    )
    state_dtype: str = _setting(
        "float32",
        validate_state_dtype,
        '``"float32"`` or ``"bfloat16"``, the dtype the per-element state of ``beta_3 > 0`` '
        "(the deficit ``vrgd_deficit``, one value per parameter) is stored in; its math is "
        "float32 either way: bfloat16 is read into float32 and rounded only when written "
        "(relative error <= ``2**-8`` per write; ``docs/spec.md`` section 3), half the bytes "
        "of that state. The scalar correction and the diagnostics stay float32; with "
        "``beta_3 = 0`` there is no such state and it changes nothing.",
    )
    split_half: bool = _setting(
        False,
        _check_split_half,
        "bool, also record per variable the split-half reliability of the GSNR "
        "(``vrgd_statistics()`` fields ``reliability``, ``reliability_defined``...; headline "
        "``vrgd/median/reliability``; ``docs/spec.md`` section 4): near 0 when the GSNR the "
        "factor acts on is noise, near 1 when it is a stable property of the elements. It "
        "needs halves of >= 2 samples (4 replicas, or 2 with 2 micro-batch groups; with "
        "fewer it stays undefined and the first step warns once) and "
        "``statistics_interval >= 1``, and adds a fixed subsample (about one element in "
        "``statistics_interval``, 64 to 4096 per variable: 8 bytes each) to each step, in "
        "an all-reduce call of its own. It changes no gradient, factor or weight: outside XLA "
        "the weights are those without it bit for bit; under XLA (``jit_compile=True``, TPU) "
        "the step is another XLA program, whose fusions may round a variable's factor "
        "differently in its last bits (within 1e-6 relative).",
    )
    factor_transforms: tuple = _setting(
        (),
        validate_factor_transforms,
        "sequence of callables ``fn(factor, context) -> factor`` applied in order to each "
        "variable's flat float32 factor, after any smoothing and before it multiplies the "
        "summed gradient, on the steps with a noise estimate (on the others they still run, "
        "but the factor stays 1: the base step; research and custom rules; ``context`` is a "
        ":class:`vrgd_tf.gsnr.FactorContext`, whose docstring has an example). "
        "Each must take two positional arguments (checked at construction) and return one "
        "real value per element of the factor (checked when the step is traced: "
        "``TypeError``/``ValueError`` naming it). "
        "Not a config key (callables do not serialize; the first ``get_config`` warns): pass "
        "them again on restore (``docs/guide.md``, saving).",
        serialized=False,
    )
    sparse_statistics: str = _setting(
        "rows",
        validate_sparse_statistics,
        '``"rows"`` or ``"dense"``, the statistics path of ``tf.IndexedSlices`` gradients '
        '(spec section 4): ``"rows"`` takes exact statistics on the rows some replica '
        "touched, with one all-gather and nothing of the variable's dense shape (where the "
        "indices have a static length, the values are not float64 and no micro-batch squares "
        'are handed over; otherwise the dense form); ``"dense"`` always the statistics of the '
        "dense form, all-reduced with the dense gradients (the same numbers, to float "
        "rounding; for comparisons and benchmarks). TensorFlow only.",
    )
    pack_limit: int = _setting(
        PACK_LIMIT,
        validate_pack_limit,
        "int >= 0, the largest gradient (in elements) computed on together with the other "
        "small dense ones, as one buffer after the all-reduce. Fewer ops per step for many "
        "small variables; the step's outputs and state the same bit for bit outside XLA, to "
        "float32 rounding under XLA (``docs/spec.md`` section 1); 0 packs none (for comparisons and "
        "benchmarks). TensorFlow only.",
    )
    xla_cluster: str = _setting(
        "auto",
        validate_xla_cluster,
        '``"auto"``, ``"always"`` or ``"never"`` (True/False: always/never): whether a step '
        "that XLA does not compile already (graph mode: tf_keras, Model Garden off TPU, a "
        "``tf.function`` custom loop) runs the GSNR math between the collectives and the base "
        "optimizer, the momentum state's commit included, as one XLA cluster "
        "(``tf.function(jit_compile=True)``): on BERT-tiny's variables about 8 memory passes "
        "per element instead of about 19 (``docs/cost_model.md`` section 6.3), for one "
        "compilation per traced step and replica. "
        '``"auto"`` clusters where the dense statistics hold at least ``XLA_CLUSTER_MIN`` '
        "(2**18) elements and there are no ``factor_transforms`` (``always`` runs them "
        "in the cluster: they must then compile with XLA). The values are the same to "
        "float32 rounding (XLA's fusions); ``gamma=1, beta_3=0`` is the base bit for bit "
        "either way. The diagnostics are recorded outside the cluster. TensorFlow only.",
    )

    def __post_init__(self):
        for field in dataclasses.fields(self):
            check = field.metadata["check"]
            object.__setattr__(self, field.name, check(getattr(self, field.name)))
        if self.split_half and self.statistics_interval == 0:
            raise ValueError(
                "`split_half=True` needs recording steps, but `statistics_interval` is 0 "
                "(never record). Set `statistics_interval` >= 1 or `split_half=False`."
            )

    @property
    def rtol(self) -> float:
        """The noise threshold of the all-reduced squares (``noise_rtol(squares_dtype)``)."""
        return noise_rtol(self.squares_dtype)

    @property
    def split_half_stride(self) -> int:
        """The split-half subsample's stride, ``statistics_interval`` with ``split_half``,
        else 0 (not measured; ``vrgd_tf.gsnr.halves``)."""
        return self.statistics_interval if self.split_half else 0

    def replace(self, **changes) -> "VRGDSettings":
        """A copy with ``changes`` (checked).

        Raises:
          TypeError: a name that is not a setting; or a value of the wrong type.
          ValueError: a value outside its range.
        """
        unknown = sorted(set(changes) - set(NAMES))
        if unknown:
            raise TypeError(f"Unknown VRGD setting(s) {unknown}; the settings are {list(NAMES)}.")
        return dataclasses.replace(self, **changes)

    def get_config(self) -> Dict[str, Any]:
        """``{key: value}`` of the serialized settings (the config keys, in order)."""
        return {key: getattr(self, key) for key in CONFIG_KEYS}

    def pop_from(self, kwargs: Dict[str, Any]) -> "VRGDSettings":
        """These settings updated by the setting names in ``kwargs``, which are removed from
        it (a constructor's ``**kwargs``: what remains is the base's). Checked."""
        return self.replace(**{name: kwargs.pop(name) for name in NAMES if name in kwargs})


#: The setting names, in order.
NAMES = tuple(f.name for f in dataclasses.fields(VRGDSettings))
#: The settings that are config keys (``get_config``, Model Garden), in order.
CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(VRGDSettings) if f.metadata["serialized"])
