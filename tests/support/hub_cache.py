"""Writing repositories into a Hugging Face Hub cache folder, in the layout ``huggingface_hub``
writes (``hf download``, ``from_pretrained``), without any network::

    <cache>/models--owner--name/
        blobs/<hash>                      each file's content, once
        refs/main                         the commit a branch or tag points at (no newline)
        snapshots/<commit>/<path>         relative links to ../../blobs/<hash>

Written by hand on purpose, so that ``huggingface_hub.scan_cache_dir`` reading it back (the
tests do) checks this layout against the library's own idea of it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_repo(
    cache: Path,
    repo_id: str,
    files: dict[str, bytes],
    *,
    kind: str = "model",
    commit: str | None = None,
    refs: tuple[str, ...] = ("main",),
) -> Path:
    """Put ``files`` ({path in repo: content}) into ``cache`` as ``repo_id`` at ``commit`` (a
    made-up 40-hex hash when None), with ``refs`` pointing at it; the snapshot folder."""
    folder = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    if commit is None:
        commit = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
    snapshot = folder / "snapshots" / commit
    for rel, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snapshot


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` as {relative posix path: content} (a saved model's files)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
