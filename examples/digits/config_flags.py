"""absl flags made from a frozen dataclass: one flag per field, checked by the dataclass.

A demo describes its job as a dataclass with defaults and a ``validate()`` method that raises
``ValueError`` naming the flag; :func:`define_flags` gives every field a flag of the same name,
type and default, and one validator that builds the dataclass from the flag values and
validates it, so a bad command line fails while the flags are parsed
(``flags.IllegalFlagValueError``), with the same message as a bad ``validate()`` in Python.
"""

import dataclasses
import math
import numbers
import sys
from typing import Type

from absl import flags

from vrgd_tf import validation

__all__ = ["field", "check_fields", "define_flags", "config_from_flags"]

_DEFINE = {
    bool: flags.DEFINE_bool,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    str: flags.DEFINE_string,
}


def field(default, help_text: str, low=None, high=None, *, low_open=False, high_open=False):
    """A dataclass field with ``default``, the help text of its flag and, for a number, the
    interval :func:`check_fields` holds it to (``None``: unbounded on that side)."""
    bounds = dict(low=low, high=high, low_open=low_open, high_open=high_open)
    return dataclasses.field(default=default, metadata={"help": help_text, **bounds})


def check_fields(config) -> None:
    """Checks each int / float field's type and its :func:`field` interval.

    Raises:
      ValueError: naming the flag (``--name``) and the allowed interval or type.
    """
    for f in dataclasses.fields(config):
        value, meta = getattr(config, f.name), f.metadata
        if isinstance(f.default, bool) or not isinstance(f.default, (int, float)):
            continue
        kind = int if isinstance(f.default, int) else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(
                f"`--{f.name}` must be {'an integer' if kind is int else 'a number'}; got {value!r}."
            )
        if meta.get("low") is not None or meta.get("high") is not None:
            low = -math.inf if meta["low"] is None else meta["low"]
            high = math.inf if meta["high"] is None else meta["high"]
            validation.check_in_range(
                f"--{f.name}",
                value,
                low,
                high,
                low_open=meta["low_open"],
                high_open=meta["high_open"],
            )


def define_flags(config_cls: Type) -> None:
    """Defines a flag per field of ``config_cls`` (tuple fields: comma lists) and the validator.

    Args:
      config_cls: a dataclass whose fields are all made by :func:`field` with bool, int,
        float, str or tuple defaults, with a ``validate()`` that raises ``ValueError``.

    Raises:
      KeyError: a field without help text.
    """
    fields = {f.name: f.default for f in dataclasses.fields(config_cls)}
    module = config_cls.__module__  # The flags belong to it (e.g. in --helpshort).
    if module == "__main__":  # Run as a script: absl's help lists the main module by its path
        module = sys.argv[0]
    for f in dataclasses.fields(config_cls):
        if isinstance(f.default, tuple):
            default = [str(v) for v in f.default]
            flags.DEFINE_list(f.name, default, f.metadata["help"], module_name=module)
        else:
            _DEFINE[type(f.default)](f.name, f.default, f.metadata["help"], module_name=module)

    def check(values):
        try:
            _build(config_cls, values)
        except ValueError as e:
            raise flags.ValidationError(str(e)) from e
        return True

    flags.register_multi_flags_validator(list(fields), check)


def config_from_flags(config_cls: Type):
    """The validated ``config_cls`` of the parsed flags.

    Raises:
      ValueError: as ``config_cls.validate()``.
    """
    names = [f.name for f in dataclasses.fields(config_cls)]
    return _build(config_cls, {name: flags.FLAGS[name].value for name in names})


def _build(config_cls: Type, values: dict):
    """Comma lists become tuples of the default's element type (str if it is empty)."""
    kwargs = {}
    for field in dataclasses.fields(config_cls):
        value = values[field.name]
        if isinstance(field.default, tuple):
            cast = type(field.default[0]) if field.default else str
            try:
                value = tuple(cast(v) for v in value)
            except ValueError as e:
                raise ValueError(f"--{field.name} must be a list of {cast.__name__}: {e}") from e
        kwargs[field.name] = value
    return config_cls(**kwargs).validate()
