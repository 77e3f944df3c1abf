"""Import shim: the reference problem now lives in tests/util.py (``util.make_problem``) and the
reference suite in tests/test_reference.py. Kept so that ``from test_keras_reference import
make_problem`` still works; no tests here."""

from util import make_problem  # noqa: F401

__all__ = ["make_problem"]
