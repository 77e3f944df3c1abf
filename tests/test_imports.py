"""The import graph of vrgd_tf/, read from the source with ``ast`` (nothing imported): no
import runs back up into ``vrgd_tf.gsnr``. A module outside ``gsnr/`` may import the GSNR
package, or be imported by it (``vrgd_tf.naming``), but not both, directly or through other
modules outside ``gsnr/``: the GSNR math is the bottom layer (issue 35, item 5)."""

import ast
import os
import unittest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vrgd_tf")
GSNR = "vrgd_tf.gsnr"


def _modules():
    """{dotted name: path} of every module of vrgd_tf/."""
    out = {}
    root = os.path.dirname(PACKAGE)
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, root)[: -len(".py")].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = path
    return out


def _imports(name, path, modules):
    """The vrgd_tf modules that module ``name`` imports anywhere in its source (also in
    functions), parents excluded: ``from a import b`` is module ``a.b`` where that is a
    module, else ``a``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    # A parent package is imported with any of its modules: not an edge of its own.
    return {m for m in found if m in modules and not name.startswith(m + ".") and m != name}


def _in_gsnr(name):
    return name == GSNR or name.startswith(GSNR + ".")


def import_graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def runs_back_up(graph):
    """[(outside module, the gsnr module that imports it)] for each module outside gsnr/
    that a gsnr module imports and that imports gsnr, directly or through modules outside
    gsnr/."""

    def reaches_gsnr(start):
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            for n in graph.get(m, ()):
                if _in_gsnr(n):
                    return True
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return False

    return sorted(
        (outside, inside)
        for inside, deps in graph.items()
        if _in_gsnr(inside)
        for outside in deps
        if not _in_gsnr(outside) and reaches_gsnr(outside)
    )


class ImportGraphTest(unittest.TestCase):
    def test_the_graph_is_read(self):
        graph = import_graph()
        self.assertIn("vrgd_tf.gsnr.step", graph)
        self.assertIn("vrgd_tf.gsnr.layout", graph["vrgd_tf.gsnr.step"])
        self.assertIn("vrgd_tf.naming", graph["vrgd_tf.gsnr.step"])
        self.assertIn(GSNR, graph["vrgd_tf.aggregator"])

    def test_the_check_finds_a_loop(self):
        graph = {
            "vrgd_tf.gsnr.a": {"vrgd_tf.outside"},
            "vrgd_tf.outside": {"vrgd_tf.middle"},
            "vrgd_tf.middle": {"vrgd_tf.gsnr.options"},
            "vrgd_tf.gsnr.options": set(),
        }
        self.assertEqual(runs_back_up(graph), [("vrgd_tf.outside", "vrgd_tf.gsnr.a")])
        graph["vrgd_tf.middle"] = set()
        self.assertEqual(runs_back_up(graph), [])

    def test_no_import_runs_back_up_into_gsnr(self):
        self.assertEqual(runs_back_up(import_graph()), [])


if __name__ == "__main__":
    unittest.main()
