"""The VRGD settings: what each place that takes them shows of them, derived from the record.

The record, :class:`VRGDSettings` (each field's name, default, check, doc and whether it is
a config key, declared once), is defined beside the step that takes it
(``vrgd_tf.gsnr.options``) and is importable from here. Every VRGD optimizer of both
families (:mod:`vrgd_tf.optimizers`, :mod:`vrgd_tf.tf_keras`, ``vrgd_tf.keras_jax``),
:class:`vrgd_tf.GSNRAggregator` and the Model Garden configs
(:mod:`vrgd_tf.model_garden.configs`) take the same settings as keywords, and
:func:`vrgd_tf.gsnr.variance_reduce` takes the record. What each of those places shows of them is derived from the fields:

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
from typing import Any, Callable, List, Mapping, Tuple

from vrgd_tf.gsnr.options import CONFIG_KEYS, NAMES, VRGDSettings

__all__ = [
    "VRGDSettings",
    "DEFAULTS",
    "ADAPTIVE_BETA_3",
    "NAMES",
    "CONFIG_KEYS",
    "args_doc",
    "check_values",
    "expose",
    "resolve",
    "signature_parameters",
]


#: The defaults, as a :class:`VRGDSettings` (the aggregator's; see each class's
#: ``default_settings``).
DEFAULTS = VRGDSettings()
#: ``beta_3`` of the paper's VR-Adam and VR-LAMB (Section 4.2): the default of the Adam-type
#: classes of both families (``VRGDAdam``, ``VRGDLamb``); the others default to
#: ``DEFAULTS.beta_3`` (the raw factor, as the paper's VR-SGD and VR-LARS).
ADAPTIVE_BETA_3 = 0.9


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


def resolve(settings, values: Mapping[str, Any], owner: str) -> VRGDSettings:
    """The checked settings of a constructor that takes either ``settings`` (a
    :class:`VRGDSettings`) or the settings one by one (``values``), over :data:`DEFAULTS`.

    Raises:
      TypeError: both given, ``settings`` of another type, or an unknown setting.
      ValueError: a value outside its range.
    """
    if settings is None:
        return DEFAULTS.replace(**values)
    if values:
        raise TypeError(
            f"{owner}: pass either `settings` or the settings one by one, not both "
            f"(got `settings` and {sorted(values)})."
        )
    if not isinstance(settings, VRGDSettings):
        raise TypeError(
            f"`settings` must be a vrgd_tf.settings.VRGDSettings; got {type(settings).__name__}."
        )
    return settings
