"""The wheel a user installs: ``python3 -m build`` makes one that holds the library and nothing
else, and it works from a fresh virtual environment, away from the repository.

The venv sees the TensorFlow already installed and the wheel goes in with ``--no-deps
--no-index``, so nothing is downloaded. "Already installed" means where the running interpreter
finds it. ``venv`` always builds on the base interpreter, so when the tests themselves run in
a virtual environment (the README suggests one) a ``.pth`` file adds that environment's
site-packages after the new venv's own (``site.addsitedir``: their ``.pth`` files processed,
as for the base's), and ``--system-site-packages`` adds the base interpreter's only if the
running interpreter sees them (outside a venv, or in one made with that flag). The editable
install of the development checkout (if any) must not shadow the wheel: the child checks that
``vrgd_tf`` is imported from the venv.
"""

import glob
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import tempfile
import zipfile

import tensorflow as tf

import vrgd_tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 600  # seconds per subprocess; the whole test takes well under a minute when idle

# Run in the venv, cwd a temporary directory, PYTHONPATH unset: two steps of VRGDLamb in
# model.fit on 2 logical CPU replicas, then checks that VRGD saw 2 samples per step.
CHILD = r"""
import os, sys
venv = sys.argv[1]
import vrgd_tf
devices = vrgd_tf.devices  # an attribute after `import vrgd_tf`, as the guide and errors spell it
assert os.path.realpath(vrgd_tf.__file__).startswith(os.path.realpath(venv)), vrgd_tf.__file__
for name in ("digits_large_batch", "prepare_model_garden_data", "harness", "shared", "studylib"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise AssertionError(f"{name} is importable outside the repository")
strategy = devices.cpu_strategy(2)
import keras
import numpy as np
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
y = x @ np.arange(1.0, 9.0, dtype="float32")[:, None]
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, "relu"), keras.layers.Dense(1)])
    model.compile(optimizer=vrgd_tf.VRGDLamb(learning_rate=0.01, statistics_interval=1), loss="mse")
history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)
optimizer = model.optimizer
assert int(optimizer.iterations.numpy()) == 2, optimizer.iterations.numpy()
assert np.isfinite(history.history["loss"][-1]), history.history
stats = vrgd_tf.vrgd_statistics(optimizer)
assert len(stats) == 4 and all(s["mean_gsnr"] > 0 for s in stats.values()), stats
print("OK", vrgd_tf.__version__, vrgd_tf.__file__)
"""

_IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", "runs"
)


def _run(argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, **kwargs)
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def build_wheel(source, out_dir):
    """``python -m build --wheel --no-isolation`` (the ``dev`` extra's ``build``), else
    ``pip wheel --no-deps --no-build-isolation``: both with the installed setuptools."""
    if importlib.util.find_spec("build") is not None:
        argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out_dir]
    else:  # pragma: no cover - the dev extra installs build
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        argv += ["--wheel-dir", out_dir]
    _run(argv + [source])
    (wheel,) = glob.glob(os.path.join(out_dir, "vrgd_tf-*.whl"))
    return wheel


def _under(path, prefix):
    return os.path.realpath(path).startswith(os.path.realpath(prefix) + os.sep)


def make_venv(venv):
    """A venv whose ``python`` sees the packages the running interpreter sees, in its order
    (see the module docstring); returns that ``python``."""
    in_venv = sys.prefix != sys.base_prefix
    own = [p for p in site.getsitepackages() if os.path.isdir(p)]
    outer = [p for p in own if in_venv and not _under(p, sys.base_prefix)]
    sees_base = not in_venv or any(_under(p, sys.base_prefix) for p in own)
    _run([sys.executable, "-m", "venv", venv] + (["--system-site-packages"] if sees_base else []))
    python = os.path.join(venv, "bin", "python")
    if outer:
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        purelib = _run([python, "-c", code]).stdout.strip()
        lines = [f"import site; site.addsitedir({p!r})" for p in outer]
        with open(os.path.join(purelib, "_vrgd_outer_env.pth"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return python


class WheelTest(tf.test.TestCase):
    def test_wheel_holds_the_library_and_trains_from_a_fresh_venv(self):
        tmp = tempfile.mkdtemp(prefix="vrgd_wheel_")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        # A copy of the working tree: a stale build/ of the checkout cannot leak into the wheel.
        source = os.path.join(tmp, "src")
        shutil.copytree(REPO, source, ignore=_IGNORE)
        wheel = build_wheel(source, os.path.join(tmp, "dist"))

        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
        tops = {name.split("/")[0] for name in names}
        (dist_info,) = [t for t in tops if t.endswith(".dist-info")]
        self.assertEqual(tops, {"vrgd_tf", dist_info})
        library = {
            os.path.relpath(p, REPO)
            for p in glob.glob(os.path.join(REPO, "vrgd_tf", "**", "*.py"), recursive=True)
        }
        self.assertEqual({n for n in names if n.startswith("vrgd_tf/")}, library)

        venv = os.path.join(tmp, "venv")
        python = make_venv(venv)
        _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
              "--ignore-installed", wheel])  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        cwd = os.path.join(tmp, "elsewhere")
        os.makedirs(cwd)
        out = _run([python, "-c", CHILD, venv], cwd=cwd, env=env).stdout
        self.assertIn(f"OK {vrgd_tf.__version__}", out)


if __name__ == "__main__":
    tf.test.main()
