"""Models and data files named by their Hugging Face Hub names, found in the local cache only.

A role map may name a model as ``owner/name`` or ``owner/name@revision`` (``model.path``,
``critic.path``, a learned reward's ``path``) and a task's data files as a Hub URI,
``hf://datasets/owner/name[@revision]/<file or pattern in the repo>`` (the form pandas, DuckDB
and ``datasets`` read). Each becomes the local path of the cached snapshot that
``hf download`` (or ``from_pretrained``, ``load_dataset``) wrote: the Hub cache is
``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``, as
``huggingface_hub`` reads them. Nothing is ever downloaded (compute nodes have no network):
every look-up is ``snapshot_download(..., local_files_only=True)``, and a name not in the
cache is a ValueError that says which name, which cache folder, and the command that fetches
it on a machine with network.

A value that exists as a local path stays that path, whatever it looks like; only a value that
is not there and has the shape of a Hub name is looked up. This module knows names, revisions
and cache folders; it knows nothing of what a model or a data file must hold (the callers check
that on the path returned). ``huggingface_hub`` is imported only when a name is looked up.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

HF_DATASETS = "hf://datasets/"  # the one prefix of a data file named on the Hub
# owner/name[@revision]: one slash before any @, no spaces (validate_repo_id checks the rest).
_NAME = re.compile(r"(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<revision>\S+))?")
_DATA_SUFFIXES = (".parquet", ".jsonl", ".json")  # what roles.tasks.files reads, for listings


def cache_folder() -> str:
    """The Hub cache ``huggingface_hub`` uses (``HF_HUB_CACHE``, else ``HF_HOME/hub``, ...)."""
    from huggingface_hub import constants

    return str(Path(constants.HF_HUB_CACHE).expanduser())


def exists_locally(value: str) -> bool:
    """Whether ``value`` names something on this machine's disk (a path that cannot even be
    looked at counts as local: the caller's own check says why)."""
    try:
        return Path(value).exists()
    except OSError:
        return True


def hub_name(value: str) -> tuple[str, str | None] | None:
    """``(repo id, revision or None)`` when ``value`` has the shape ``owner/name[@revision]``."""
    m = _NAME.fullmatch(value)
    if m is None:
        return None
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(m["repo"])
    except HFValidationError:
        return None
    return m["repo"], m["revision"]


def model_folder(value: str) -> str:
    """``value`` itself when it is a local path or no Hub name; else the cached snapshot folder
    of the Hub model it names (a ValueError when the cache has none)."""
    name = None if exists_locally(value) else hub_name(value)
    if name is None:
        return value
    repo, revision = name
    return _snapshot(value, repo, revision, "model", allow=None)


def data_files(value: str) -> list[str]:
    """``[value]`` for a local path or anything not ``hf://datasets/...``; else the cached files
    of the dataset that the URI's path names (a pattern: every file it matches, in path order)."""
    if not value.startswith(HF_DATASETS) or exists_locally(value):
        return [value]
    from huggingface_hub import parse_hf_uri
    from huggingface_hub.errors import HfUriError

    try:
        uri = parse_hf_uri(value)
    except HfUriError as e:
        why = e.msg.strip().rstrip(".")
        form = f"{HF_DATASETS}owner/name[@revision]/<files>"
        raise ValueError(f"{value!r} is not a Hub URI ({why}); write {form}") from None
    if not uri.path_in_repo:
        raise ValueError(
            f"{value!r} names a whole dataset: add the files to read, as {value.rstrip('/')}/<path or pattern> "
            f"(e.g. {HF_DATASETS}openai/gsm8k/main/train-*.parquet){_listing(uri.id, uri.revision)}"
        )
    folder = Path(_snapshot(value, uri.id, uri.revision, "dataset", allow=uri.path_in_repo))
    if (folder / uri.path_in_repo).is_dir():  # a save_to_disk folder kept in the repo
        return [str(folder / uri.path_in_repo)]
    found = [f for f in files_in(folder) if fnmatch.fnmatchcase(f, uri.path_in_repo)]
    if not found:
        raise ValueError(
            f"{value!r}: no file of the cached snapshot {folder} matches {uri.path_in_repo!r}"
            f"{_listing(uri.id, uri.revision)}; {_fetch(uri.id, uri.revision, 'dataset', uri.path_in_repo)}"
        )
    return [str(folder / f) for f in found]


def bare_dataset_hint(value: str) -> str:
    """A hint for a missing data path that reads like a Hub dataset's name (``openai/gsm8k``):
    the URI form that names its files. Empty for anything else."""
    if Path(value).suffix.lower() in _DATA_SUFFIXES or hub_name(value) is None:
        return ""
    repo, revision = hub_name(value)
    rev = f"@{revision}" if revision else ""
    return f"; a Hub dataset's files are named {HF_DATASETS}{repo}{rev}/<path or pattern>{_listing(repo, revision)}"


def files_in(folder: str | Path) -> list[str]:
    """The files under ``folder`` (a snapshot's links to its blobs), as sorted posix paths."""
    root = Path(folder)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# ----------------------------------------------------------------------- the cache


def _snapshot(value: str, repo: str, revision: str | None, kind: str, allow: str | None) -> str:
    """The cached snapshot folder of ``repo`` at ``revision``, never reaching for the network.
    ``allow``: the files that must all be there (a pattern); None: whatever the snapshot holds
    (a model's loader names a missing weight file itself)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    try:
        return snapshot_download(
            repo,
            repo_type=kind,
            revision=revision,
            cache_dir=cache_folder(),
            local_files_only=True,  # never the network: a miss is the ValueError below
            allow_patterns=allow,
        )
    except IncompleteSnapshotError as e:
        if allow is None:
            return e.snapshot_path
        raise ValueError(
            f"{value!r}: the cached snapshot {e.snapshot_path} lacks files it should hold ({e}); "
            f"{_fetch(repo, revision, kind, allow)}"
        ) from None
    except LocalEntryNotFoundError:
        lead = f"{value!r} is no local folder, and" if kind == "model" else f"{value!r}:"
        raise ValueError(
            f"{lead} the Hugging Face cache at {cache_folder()} (HF_HUB_CACHE, else HF_HOME/hub) "
            f"holds no {kind} {repo} at revision {revision or 'main'}{_cached_revisions(repo, kind)}; "
            f"{_fetch(repo, revision, kind, allow)}"
        ) from None


def _fetch(repo: str, revision: str | None, kind: str, allow: str | None) -> str:
    """How to put ``repo`` into this cache from a machine with network."""
    command = f"hf download {repo}"
    if kind != "model":
        command += f" --repo-type {kind}"
    if revision:
        command += f" --revision {revision}"
    if allow:
        command += f" --include '{allow}'"
    return (
        f"fetch it on a machine with network with `{command}` into this cache "
        "(the same HF_HOME or HF_HUB_CACHE); runs never download"
    )


def _repo_folder(repo: str, kind: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return Path(cache_folder()) / repo_folder_name(repo_id=repo, repo_type=kind)


def _cached_revisions(repo: str, kind: str) -> str:
    """What the cache holds of ``repo`` when it holds another revision: ``(cached: main, v1)``."""
    folder = _repo_folder(repo, kind)
    refs = sorted(p.relative_to(folder / "refs").as_posix() for p in (folder / "refs").rglob("*") if p.is_file())
    commits = sorted(p.name for p in (folder / "snapshots").glob("*") if p.is_dir())
    if not refs and not commits:
        return ""
    return f" (cached: {', '.join(refs) or 'no branch or tag'}; commits {', '.join(c[:12] for c in commits)})"


def _listing(repo: str, revision: str | None) -> str:
    """The data files of the cached dataset ``repo``, when the cache has it: a message's tail."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            repo, repo_type="dataset", revision=revision, cache_dir=cache_folder(), local_files_only=True
        )
    except LocalEntryNotFoundError as e:  # an incomplete snapshot still lists what it has
        folder = getattr(e, "snapshot_path", None)
    if folder is None or not os.path.isdir(folder):
        return ""
    data = [f for f in files_in(folder) if f.lower().endswith(_DATA_SUFFIXES)]
    shown = ", ".join(data[:6]) + (f", ... ({len(data)} in all)" if len(data) > 6 else "")
    return f" (its cached data files: {shown or 'none'})"
