"""Per-run provenance of the studies: the git commit, whether the tree was dirty, and a hash
of the repository's modules this process actually imported.

``snapshot()`` reads each imported module of the repository (``vrgd_tf`` and the studies,
every module in ``sys.modules`` whose file is under the repository root) once, the first
time it sees it, and keeps that content's hash: a file edited on disk after the process
imported it does not change the record. A module is "clean" if its content is the blob of
``HEAD`` at its path (git's blob hash), so an uncommitted edit of an imported file, or an
imported file git does not track, makes the run dirty even if the edit was later undone.
The commit and the tracked files' changes are those of the first call (the process's start):
later commits or edits of the tree do not change what this process runs.
"""

import hashlib
import os
import subprocess
import sys

from shared import command_line, environment  # noqa: F401  (the studies' run record)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SEEN = {}  # relative path -> (sha256 hex, git blob sha1 hex) at first sight
_START = {}  # "commit", "blobs", "status": the repository at the first snapshot


def _git(*args, strip=True):
    try:
        out = subprocess.run(
            ["git", "-C", REPO] + list(args), capture_output=True, text=True, timeout=30
        )
    except Exception:  # noqa: BLE001 (no git: recorded as None)
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() if strip else out.stdout


def _blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _repo_modules():
    """Relative paths of the imported modules whose file is under the repository root."""
    paths = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not f:
            continue
        f = os.path.abspath(f)
        if f.startswith(REPO + os.sep) and f.endswith(".py"):
            paths.add(os.path.relpath(f, REPO))
    return sorted(paths)


def _tree_blobs(commit):
    """{relative path: blob sha1} of ``commit``'s tree."""
    out = _git("ls-tree", "-r", commit) if commit else None
    blobs = {}
    for line in (out or "").splitlines():
        meta, path = line.split("\t", 1)
        blobs[path] = meta.split()[2]
    return blobs


def snapshot(ignore=()):
    """The provenance record of this process now.

    Args:
      ignore: repository-relative path prefixes whose changes do not make the tree dirty
        (the results directories a running study writes).

    Returns:
      dict: ``git_commit`` (at the first call), ``dirty`` (bool), ``changed`` (the tracked
      files that differed from that commit at the first call, outside ``ignore``, and the
      imported modules whose first-seen content is not that commit's), ``imported_modules``
      (count) and ``imported_sha256`` (over the sorted paths and their first-seen contents).
    """
    if not _START:
        commit = _git("rev-parse", "HEAD")
        _START.update(
            commit=commit,
            blobs=_tree_blobs(commit),
            status=_git("status", "--porcelain", "--untracked-files=no", strip=False) or "",
        )
    for rel in _repo_modules():
        if rel not in _SEEN:
            with open(os.path.join(REPO, rel), "rb") as fh:
                data = fh.read()
            _SEEN[rel] = (hashlib.sha256(data).hexdigest(), _blob_sha1(data))
    blobs = _START["blobs"]
    changed = [rel for rel, (_, blob) in sorted(_SEEN.items()) if blobs.get(rel) != blob]
    lib = sys.modules.get("vrgd_tf")
    lib_file = os.path.abspath(getattr(lib, "__file__", None) or REPO)
    if lib is not None and not lib_file.startswith(REPO + os.sep):
        changed.append(f"vrgd_tf imported from outside the repository: {lib_file}")
    for line in _START["status"].splitlines():
        path = line[3:].split(" -> ")[-1]
        if not any(path.startswith(p) for p in ignore) and path not in changed:
            changed.append(path)
    h = hashlib.sha256()
    for rel, (digest, _) in sorted(_SEEN.items()):
        h.update(f"{rel}\0{digest}\n".encode())
    return {
        "git_commit": _START["commit"],
        "dirty": bool(changed),
        "changed": changed,
        "imported_modules": len(_SEEN),
        "imported_sha256": h.hexdigest(),
    }
