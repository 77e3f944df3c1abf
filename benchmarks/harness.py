"""The cost benchmarks' harness: where results go, what a results file records about the run,
and the pieces the benchmarks share with the studies.

``RESULTS_DIR`` (``benchmarks/results/``), :func:`environment` (versions, machine, the
library's git state) and :func:`command_line` are the benchmarks' own. The logical devices
(:func:`setup_devices`, :func:`strategy_for`), the ``--quick`` defaults (:func:`apply_quick`)
and the results files (:func:`write_json`, :func:`read_json`) are ``studies/shared.py``'s,
imported here under their names: that is the one module of ``studies/`` the benchmarks
import (the cost benchmarks time the models and optimizer pairs the studies train; one
definition keeps them the same), and this module puts ``studies/`` last on ``sys.path`` for
it, so the benchmarks' own modules come first.

Import this module before any TensorFlow op runs: ``setup_devices`` must precede TensorFlow's
runtime start (importing runs no op).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(HERE, "results")

if os.path.join(REPO, "studies") not in sys.path:
    sys.path.append(os.path.join(REPO, "studies"))

from shared import (  # noqa: E402, F401  (studies/shared.py: see the module docstring)
    apply_quick,
    command_line,
    read_json,
    setup_devices,
    strategy_for,
    tf_onednn,
    write_json,
)
from shared import environment as shared_environment  # noqa: E402


def library_state():
    """Git commit of the repository, uncommitted changes under vrgd_tf/ and a hash of the
    library sources actually imported (other people edit the library concurrently)."""
    import hashlib
    import subprocess

    import vrgd_tf

    pkg = os.path.dirname(os.path.abspath(vrgd_tf.__file__))

    def git(*args):
        try:
            return subprocess.run(
                ["git", "-C", REPO] + list(args), capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except Exception:  # pragma: no cover
            return None

    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(pkg)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return {
        "git_head": git("rev-parse", "HEAD"),
        "git_status_vrgd_tf": git("status", "--porcelain", "vrgd_tf"),
        "vrgd_tf_sources_sha256": h.hexdigest()[:16],
    }


def environment():
    """The run's environment record (``studies/shared.py``'s, with ``loadavg``), with the
    library's state (:func:`library_state`) and the versions of ``vrgd_tf``, ``mnist1d`` and
    ``scikit-learn``."""
    return {"library": library_state(), **shared_environment("vrgd_tf", "mnist1d", "scikit-learn")}
