"""Variable names as users write them in exclusion patterns and see them in summaries."""

import re

__all__ = ["variable_name", "matches_any"]


def variable_name(variable) -> str:
    """Keras 3 ``variable.path`` (e.g. ``"dense/kernel"``) if there is one, else
    ``variable.name`` without its ``:0`` suffix (tf_keras, ``tf.Variable``)."""
    name = getattr(variable, "path", None) or variable.name
    return re.sub(r":\d+$", "", name)


def matches_any(patterns, name: str) -> bool:
    """True if any regex in ``patterns`` (None or list of str) is found by ``re.search``
    in ``name``."""
    return any(re.search(p, name) is not None for p in patterns or ())
