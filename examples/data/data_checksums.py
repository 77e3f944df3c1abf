"""The SHA-256 check that the data readers of this folder run on every source file."""

import hashlib

__all__ = ["sha256_file"]


def sha256_file(path: str) -> str:
    """Hex SHA-256 digest of the file at ``path`` (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
