"""The VRGD settings: the one definition of their names, defaults, checks, config keys and docs.

Every VRGD optimizer of both families (:mod:`vrgd_tf.optimizers`, :mod:`vrgd_tf.tf_keras`),
:class:`vrgd_tf.GSNRAggregator` and the Model Garden configs
(:mod:`vrgd_tf.model_garden.configs`) take the same settings, the fields of
:class:`VRGDSettings`. What each of those places shows of them is derived from the fields:

* the constructor signature of a VRGD class (:func:`signature_parameters`), its docstring and
  the aggregator's (:func:`args_doc`);
* the checks (``VRGDSettings(...)`` runs each field's check; :func:`check_values` prefixes the
  messages with a config path for Model Garden);
* the config keys of ``get_config`` / ``from_config`` and of the Model Garden dataclasses
  (:meth:`VRGDSettings.get_config`, :data:`CONFIG_KEYS`): every field but
  ``factor_transforms`` (callables do not serialize).

The defaults are the aggregator's; a VRGD class has its own ``default_settings`` (``beta_3``
0.9 for the Adam-type classes, as the paper's VR-Adam and VR-LAMB; 0 for the others).
Spec: ``docs/spec.md`` sections 2 and 3.
"""

import dataclasses
import functools
import inspect
from typing import Any, Callable, Dict, List, Mapping, Tuple

from vrgd_tf import gsnr, validation

__all__ = [
    "VRGDSettings",
    "DEFAULTS",
    "ADAPTIVE_BETA_3",
    "NAMES",
    "CONFIG_KEYS",
    "args_doc",
    "check_values",
    "expose",
    "signature_parameters",
]


def _check_split_half(split_half) -> bool:
    """``split_half`` if it is a bool; TypeError naming it otherwise."""
    if not isinstance(split_half, bool):
        raise TypeError(f"`split_half` must be a bool; got {split_half!r}.")
    return split_half


#: The step's own defaults (:class:`vrgd_tf.gsnr.GSNROptions`): the settings the two records
#: share take their defaults from it, so each default is written once.
_STEP_DEFAULTS = gsnr.GSNROptions()


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
    argument for a value outside its range. Attributes: see :func:`args_doc`.
    """

    gamma: float = _setting(
        _STEP_DEFAULTS.gamma,
        gsnr.validate_gamma,
        "float in (0, 1], lower bound of the per-element factor (eq. 9). ``gamma=1`` with "
        "``beta_3=0`` reproduces the base optimizer exactly.",
    )
    beta_3: float = _setting(
        _STEP_DEFAULTS.beta_3,
        gsnr.validate_beta_3,
        "float in [0, 1), decay of the factor's momentum with bias correction (Section "
        "4.2; *our reading*); 0 uses the raw per-step factor. The paper's VR-Adam and "
        "VR-LAMB use 0.9, its VR-SGD and VR-LARS the raw factor.",
    )
    statistics_interval: int = _setting(
        1,
        functools.partial(validation.check_count, "statistics_interval"),
        "int >= 0, in steps. The GSNR diagnostics (``vrgd_statistics()``) are computed and "
        "stored on the steps that bring the step count (``iterations``) to a multiple of "
        "it (every step for 1, never for 0); other steps skip that work. Set it to the "
        "summary interval (e.g. ``GSNRTensorBoard(update_freq=...)``; with Model Garden a "
        "divisor of ``trainer.steps_per_loop``).",
    )
    squares_dtype: str = _setting(
        _STEP_DEFAULTS.squares_dtype,
        gsnr.validate_squares_dtype,
        '``"float32"`` or ``"bfloat16"``, the dtype the squared gradients are all-reduced '
        "in; the gradients stay float32. bfloat16 sends 6 instead of 8 bytes per parameter, "
        "and GSNRs above about ``1 / (2**-8 k)`` count as undefined (factor 1): "
        "``docs/cost_model.md``.",
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
        "an all-reduce call of its own. It changes no gradient, factor or weight: outside XLA the "
        "weights are those without it bit for bit; under XLA (``jit_compile=True``, TPU) "
        "the step is another XLA program, whose fusions may round a variable's factor "
        "differently in its last bits (within 1e-6 relative).",
    )
    factor_transforms: tuple = _setting(
        _STEP_DEFAULTS.factor_transforms,
        gsnr.validate_factor_transforms,
        "sequence of callables ``fn(factor, context) -> factor`` applied in order to each "
        "variable's flat float32 factor, after any smoothing and before it multiplies the "
        "summed gradient, on the steps with a noise estimate (on the others they still run, "
        "but the factor stays 1: the base step; research and custom rules; ``context`` is a "
        ":class:`vrgd_tf.gsnr.FactorContext`; example: :class:`vrgd_tf.GSNRAggregator`). "
        "Each must take two positional arguments (checked at construction) and return one "
        "real value per element of the factor (checked when the step is traced: "
        "``TypeError``/``ValueError`` naming it). "
        "Not a config key (callables do not serialize; the first ``get_config`` warns): pass "
        "them again on restore (``docs/guide.md``, saving).",
        serialized=False,
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
        """``{key: value}`` of the serialized settings (:data:`CONFIG_KEYS`, in order)."""
        return {key: getattr(self, key) for key in CONFIG_KEYS}

    def pop_from(self, kwargs: Dict[str, Any]) -> "VRGDSettings":
        """These settings updated by the setting names in ``kwargs``, which are removed from
        it (a constructor's ``**kwargs``: what remains is the base's). Checked."""
        return self.replace(**{name: kwargs.pop(name) for name in NAMES if name in kwargs})


#: The defaults, as a :class:`VRGDSettings` (the aggregator's; see each class's
#: ``default_settings``).
DEFAULTS = VRGDSettings()
#: ``beta_3`` of the paper's VR-Adam and VR-LAMB (Section 4.2): the default of the Adam-type
#: classes of both families (``VRGDAdam``, ``VRGDLamb``); the others default to
#: ``DEFAULTS.beta_3`` (the raw factor, as the paper's VR-SGD and VR-LARS).
ADAPTIVE_BETA_3 = 0.9
#: The setting names, in order.
NAMES: Tuple[str, ...] = tuple(f.name for f in dataclasses.fields(VRGDSettings))
#: The settings that are config keys (``get_config``, Model Garden), in order.
CONFIG_KEYS: Tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(VRGDSettings) if f.metadata["serialized"]
)


def _fields():
    return dataclasses.fields(VRGDSettings)


def signature_parameters(defaults: VRGDSettings = DEFAULTS) -> List[inspect.Parameter]:
    """Keyword-only ``inspect.Parameter`` objects of the settings with ``defaults``' values."""
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=getattr(defaults, f.name))
        for f in _fields()
    ]


def args_doc(defaults: VRGDSettings = DEFAULTS, indent: int = 6, names=NAMES) -> str:
    """The docstring entries ``name: description. Default value.`` of the settings in
    ``names``, each indented by ``indent`` spaces, continuation lines by 2 more, wrapped at
    92 columns."""
    lines = []
    for f in _fields():
        if f.name not in names:
            continue
        default = getattr(defaults, f.name)
        text = f"{f.name}: {f.metadata['doc']} Default {_show(default)}."
        lines += _wrap(text, indent)
    return "\n".join(lines) + "\n"


def _show(value) -> str:
    if value == ():
        return "none"
    if isinstance(value, str):
        return f'``"{value}"``'
    return repr(value)


def _wrap(text: str, indent: int, width: int = 92) -> List[str]:
    lines, line = [], " " * indent
    for word in text.split(" "):
        if len(line) + 1 + len(word) > width and line.strip():
            lines.append(line)
            line = " " * (indent + 2) + word
        else:
            line = line + word if not line.strip() else f"{line} {word}"
    lines.append(line)
    return lines


def check_values(values: Mapping[str, Any], prefix: str = "") -> VRGDSettings:
    """Checks the config-key settings found in ``values`` (a mapping, or an object whose
    attributes are read), e.g. a Model Garden optimizer config.

    Args:
      values: mapping or object holding some of :data:`CONFIG_KEYS`; missing keys take the
        defaults.
      prefix: config path put before each message, e.g. ``"trainer...vrgd_lars"``.

    Returns:
      The checked :class:`VRGDSettings`.

    Raises:
      TypeError, ValueError: as the setting's check, the message starting with
        ``"{prefix}.{name}: "``; a check across settings with ``"{prefix}: "``.
    """
    get = values.get if isinstance(values, Mapping) else lambda k, d: getattr(values, k, d)
    checked = {}
    for f in _fields():
        if not f.metadata["serialized"]:
            continue
        try:
            checked[f.name] = f.metadata["check"](get(f.name, f.default))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{prefix}.{f.name}: {e}" if prefix else str(e)) from e
    try:
        return VRGDSettings(**checked)
    except ValueError as e:  # a check across settings (split_half and statistics_interval)
        raise ValueError(f"{prefix}: {e}" if prefix else str(e)) from e


def config_fields(defaults: VRGDSettings) -> List[Tuple[str, type, Any]]:
    """``(name, type, dataclasses.field)`` of the config-key settings with ``defaults``' values,
    for ``dataclasses.make_dataclass`` (the Model Garden optimizer configs)."""
    return [
        (f.name, f.type, dataclasses.field(default=getattr(defaults, f.name)))
        for f in _fields()
        if f.metadata["serialized"]
    ]


def expose(settings_of: Callable[[Any], VRGDSettings]):
    """Class decorator adding one read-only property per setting, ``settings_of(self).name``,
    with the setting's doc (``GSNRAggregator.gamma``, ``VRGDLamb(...).beta_3``, ...)."""

    def decorate(cls):
        for f in _fields():
            getter = functools.partial(_read, settings_of, f.name)
            setattr(cls, f.name, property(getter, doc=f.metadata["doc"]))
        return cls

    return decorate


def _read(settings_of, name, obj):
    return getattr(settings_of(obj), name)
