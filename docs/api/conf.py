"""Sphinx configuration of the API reference: the public names' docstrings (autodoc, Google
style through napoleon). Built by ``.ci/run`` with warnings as errors and every cross
reference checked (``-W --keep-going -n``), offline (no intersphinx)::

  python3 -m sphinx -W --keep-going -n -q -b html docs/api build/api
"""

import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.pop("TF_USE_LEGACY_KERAS", None)  # The top-level names are the Keras 3 family.
# Document this checkout, not another installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import vrgd_tf  # noqa: E402

project = "vrgd_tf"
release = version = vrgd_tf.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_inherit_docstrings = False  # An override without a docstring is not documented.
autodoc_typehints = "description"
# The constructor's arguments beside the class name (with "separated" they were shown only on
# an ``__init__`` entry, which autodoc leaves out: no signature at all).
autodoc_class_signature = "mixed"
# `name` in a docstring (single back-ticks, as in Markdown) is code, not a citation.
default_role = "literal"
# The optimizers' "VRGD arguments (...):" section (vrgd_tf.common, vrgd_tf.settings.args_doc)
# is an argument list: _vrgd_arguments_section makes its header one napoleon knows.
napoleon_custom_sections = [("VRGD arguments", "params_style")]
# Names outside this package (TensorFlow, Keras, Model Garden, typing, NumPy, inspect) have no pages
# here and no network to fetch their inventories from: their references are not checked.
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(tf|tensorflow|keras|tf_keras|official|np|numpy|typing|absl|dataclasses|inspect)(\..*)?",
    ),
    (r"py:.*", r"(Optional|Callable|Sequence|Dict|List|Tuple|Type|Any|Union|NamedTuple)"),
]
# The GSNR step's options record is not exported by vrgd_tf.gsnr (issue 35: about 15 names);
# the aggregator's ``options`` still names it.
nitpick_ignore = [
    ("py:class", "vrgd_tf.gsnr.GSNROptions"),
    ("py:class", "vrgd_tf.gsnr.options.GSNROptions"),
]


def _skip_named_tuple_fields(app, what, name, obj, skip, options):
    """A NamedTuple's fields are documented by its ``Attributes:`` section, not again as
    members (``Alias for field number 0``)."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


_VRGD_ARGUMENTS = re.compile(r"^(\s*)VRGD arguments \((.*)\):\s*$")


def _vrgd_arguments_section(app, what, name, obj, options, lines):
    """``VRGD arguments (sources):`` -> a sentence naming the sources, then the section
    header ``VRGD arguments:``, so that napoleon renders each entry as an argument (name,
    then its whole description) instead of a definition list cut at the first line break.
    Runs before napoleon (priority 400 < 500)."""
    for i, line in enumerate(lines):
        match = _VRGD_ARGUMENTS.match(line)
        if match:
            indent, sources = match.groups()
            lines[i : i + 1] = [
                f"{indent}Sources of the VRGD arguments: {sources}.",
                "",
                f"{indent}VRGD arguments:",
            ]
            return


def setup(app):
    app.connect("autodoc-skip-member", _skip_named_tuple_fields)
    app.connect("autodoc-process-docstring", _vrgd_arguments_section, priority=400)


html_theme = "alabaster"
html_static_path = []
exclude_patterns = ["_build"]
