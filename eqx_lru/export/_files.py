r"""An artifact and its manifest on disk: written as one pair, never through a link, and
never over files that export did not write.

**Whose files.** A pair at `path` (the artifact) and `path + ".json"` (its manifest) was
written by `eqx_lru.export` when the manifest is a regular file holding a manifest of
ours (its `"format"`, `"sha256"` and `"eqx_lru"` entries, `"artifact"` the artifact's
name) and the artifact is a regular file whose SHA-256 is the one the manifest records.
Anything else at either name (a file of another tool, an artifact with no manifest or
another's, a symbolic link) is replaced only with `overwrite=True`.

**One unit.** Both files are written in full to temporaries beside them (created with
`O_EXCL | O_NOFOLLOW`, flushed with `fsync`), then renamed in this order: the old
artifact aside (to a hidden backup), the new manifest onto its name, the new artifact onto
its name, the backup removed, the folder synced. A crash at any instant leaves either the
old pair, the new pair, or a manifest with no artifact beside it (the old artifact then
in `.<name>.old-<pid>`); never an artifact without its manifest or beside another's, and
never a partly written file. An error while writing the temporaries (a full disk) leaves
the previous pair untouched and the temporaries removed.

**No link is followed.** A rename replaces a link itself, never its target; the
temporaries are created where no file is, and the existing files are opened with
`O_NOFOLLOW`. (The folders on the way may be links: only the files written are.)
"""

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path

from ._program import ExportError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _read(path: Path) -> bytes:
    """The bytes of the regular file `path`, read without following a link."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def foreign(path: Path) -> str | None:
    """Why the files at `path` and its manifest are not a pair that export wrote (a
    sentence), or None when they are, or when neither exists."""
    manifest = path.with_name(path.name + ".json")
    here = {p: _lstat(p) for p in (path, manifest)}
    if all(s is None for s in here.values()):
        return None
    for p, s in here.items():
        if s is not None and stat.S_ISDIR(s.st_mode):
            return f"{p} is a folder"
        if s is not None and stat.S_ISLNK(s.st_mode):
            return f"{p} is a symbolic link"
        if s is not None and not stat.S_ISREG(s.st_mode):
            return f"{p} is not a regular file"
    if here[manifest] is None:
        return f"{path} has no manifest beside it ({manifest.name})"
    try:
        info = json.loads(_read(manifest))
    except (OSError, ValueError):
        return f"{manifest} is not a manifest of eqx_lru.export"
    if not isinstance(info, dict) or not {"format", "sha256", "eqx_lru"} <= set(info):
        return f"{manifest} is not a manifest of eqx_lru.export"
    if info.get("artifact") != path.name:
        return f"{manifest} is the manifest of {info.get('artifact')!r}, not of {path.name!r}"
    if here[path] is None:
        return None  # our manifest alone (a crash between the renames): nothing to protect
    if _digest(path) != info["sha256"]:
        return f"{path} is not the file its manifest describes (another SHA-256)"
    return None


def _write_fd(fd: int, data: bytes) -> None:
    """All of `data` to the open file `fd` (a short write is continued)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _temporary(path: Path, data: bytes, mode: int | None) -> Path:
    """`data` in a new temporary file beside `path`, flushed; removed again on failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # ours, from a crash of this pid: never followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        _write_fd(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # folders cannot be opened here: the renames are all there is
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def _mode(path: Path) -> int | None:
    """The permissions of the regular file `path` (kept on rewrite), else None."""
    s = _lstat(path)
    return stat.S_IMODE(s.st_mode) if s is not None and stat.S_ISREG(s.st_mode) else None


def write_pair(path: Path, data: bytes, manifest: bytes, *, overwrite: bool) -> None:
    """`data` at `path` and `manifest` at `path + ".json"`, as one unit (module docstring).

    **Raises:** `ExportError` (one line) when files that export did not write are there
    and not `overwrite`, or when the temporaries cannot be written (a full disk, no
    permission): the previous pair is then untouched."""
    beside = path.with_name(path.name + ".json")
    for p in (path, beside):
        s = _lstat(p)
        if s is not None and stat.S_ISDIR(s.st_mode):
            raise ExportError(f"{p} is a folder: give the path of the artifact's file.")
    if not overwrite:
        why = foreign(path)
        if why is not None:
            raise ExportError(
                f"{why}: export does not replace files it did not write. Choose another "
                "path, remove them, or pass overwrite=True (--overwrite)."
            )
    temporaries: list[Path] = []
    try:
        for target, content in ((path, data), (beside, manifest)):
            temporaries.append(_temporary(target, content, _mode(target)))
    except OSError as e:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
        where = e.filename or path.parent
        raise ExportError(
            f"could not write {path.name} and its manifest in {str(path.parent)!r} ({where}: "
            f"{e.strerror or e}); the previous files there are untouched. Free some space or "
            "fix the permissions, and export again."
        ) from None
    _commit(path, beside, *temporaries)


def _commit(path: Path, beside: Path, new_data: Path, new_manifest: Path) -> None:
    """The renames of `write_pair`, in the order its docstring gives."""
    backup = path.with_name(f".{path.name}.old-{os.getpid()}")
    moved = renamed = False
    try:
        if _lstat(path) is not None:
            os.replace(path, backup)
            moved = True
        os.replace(new_manifest, beside)
        renamed = True
        os.replace(new_data, path)
    except OSError as e:
        for tmp in (new_data, new_manifest):
            tmp.unlink(missing_ok=True)
        if moved and not renamed:
            os.replace(backup, path)  # the old pair, as it was
        raise ExportError(
            f"could not replace {path} and its manifest ({e.strerror or e}). Check the "
            "folder's permissions, and export again."
        ) from None
    if moved:
        backup.unlink(missing_ok=True)
    _fsync_folder(path.parent)
