"""Child processes of the cost benchmarks: a parent runs a benchmark script again with other
arguments (:func:`run_child`, e.g. one process per variant, since peak RSS cannot be reset),
and the child prints its JSON result on one tagged line (:func:`print_result`)."""

import json
import os
import subprocess
import sys
import time

#: Prefix of the line on which a child process prints its JSON result.
RESULT_TAG = "RESULT_JSON:"


def run_child(script, args, log, env=None):
    """Runs ``python script args`` (``env``: a dict added to this process's environment, or
    None) and returns (the JSON it printed after RESULT_TAG, seconds); logs the child's
    stderr tail and raises if there is none."""
    cmd = [sys.executable, os.path.abspath(script)] + list(args)
    t0 = time.time()
    child_env = None if env is None else {**os.environ, **env}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :]), time.time() - t0
    log(proc.stderr[-3000:])
    raise RuntimeError(f"child failed: {' '.join(cmd)} (rc {proc.returncode})")


def print_result(obj):
    """The child side of :func:`run_child`."""
    print(RESULT_TAG + json.dumps(obj), flush=True)
