r"""An artifact and its manifest on disk: written as one pair, by one writer at a time,
never through a link, and never over files that export did not write.

**Whose files.** A pair at `path` (the artifact) and `path + ".json"` (its manifest) was
written by `eqx_lru.export` when the manifest is a regular file holding a manifest of
ours (its `"format"`, `"sha256"` and `"eqx_lru"` entries, `"artifact"` the artifact's
name) and the artifact is a regular file whose SHA-256 is the one the manifest records.
Anything else at either name (a file of another tool, an artifact with no manifest or
another's, a symbolic link) is replaced only with `overwrite=True`.

**One writer.** Writers to one `path` (threads or processes) exclude each other: each
holds an exclusive `flock` on a hidden lock file beside it (`.<name>.lock`, removed when
it is done) from its first look at the files to its last rename, so the last one wins
whole. (Where the file system has no locks, or on Windows, there is no lock.)

**One unit.** Both files are written in full to temporaries beside them (created with
`O_EXCL | O_NOFOLLOW`, flushed with `fsync`), then renamed in this order: the old
artifact, then the old manifest aside (to hidden backups), the new manifest onto its name,
the new artifact onto its name; the backups removed, the folder synced. A crash at any
instant leaves the old pair, the new pair, a manifest with no artifact beside it, or
neither (the old files then in `.<name>.old-<pid>` and `.<name>.json.old-<pid>`); never
an artifact without its manifest or beside another's, and never a partly written file.
An error of the operating system at any step leaves the previous pair as it was (the
renames made are undone) and no temporary.

**No link is followed.** A rename replaces a link itself, never its target; the
temporaries are created where no file is, and the existing files are opened with
`O_NOFOLLOW`. (The folders on the way may be links: only the files written are.)

**Every error of the operating system** (no space, no permission, a read-only file
system, a name too long, a file where a folder goes) is one `ExportError` line naming the
path, the reason and what to do.
"""

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from ._program import ExportError

if sys.platform != "win32":
    import fcntl

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

#: What to do about an error of the operating system, by its `errno`.
_ADVICE = {
    errno.ENOSPC: "Free some space, and export again.",
    errno.EDQUOT: "Free some space (the disk quota is reached), and export again.",
    errno.EACCES: "Fix the permissions, or choose another folder.",
    errno.EPERM: "Fix the permissions, or choose another folder.",
    errno.EROFS: "The file system is read-only: choose another folder.",
    errno.ENAMETOOLONG: "Choose a shorter file name (the manifest's adds '.json').",
    errno.ENOTDIR: "A part of the path is a file, not a folder: choose another path.",
    errno.EEXIST: "A part of the path is a file, not a folder: choose another path.",
    errno.ELOOP: "A symbolic link is on the way: choose another path.",
}


def _advice(e: OSError) -> str:
    return _ADVICE.get(e.errno or 0, "Check the path, and export again.")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _hidden(path: Path, tag: str) -> Path:
    """A hidden name beside `path`: `.`, the name (cut to 200 bytes, so that the hidden
    name fits wherever the name does), `.`, `tag`."""
    return path.with_name(f".{os.fsdecode(os.fsencode(path.name)[:200])}.{tag}")


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
    sentence), or None when they are, or when neither exists. (An `OSError` reading them
    is raised.)"""
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
    except ValueError:
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
    """`data` in a new temporary file beside `path` (a fresh name), flushed; removed
    again on failure."""
    tmp = _hidden(path, f"{os.getpid()}-{secrets.token_hex(4)}.tmp")
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


def _acquire(lock: Path) -> int:
    """An open descriptor of `lock` holding its exclusive `flock` (module docstring): a
    lock file removed by its holder while we waited is opened afresh."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP):
                return fd  # a file system without locks: unlocked
            os.close(fd)  # not ours to remove: another writer may hold it
            raise
        try:
            here, mine = _lstat(lock), os.fstat(fd)
        except BaseException:
            _release(lock, fd)
            raise
        if here is not None and (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)


def _release(lock: Path, fd: int) -> None:
    """Remove the held `lock` (a writer waiting on it then opens a new one), unlock."""
    with contextlib.suppress(OSError):
        os.unlink(lock)
    os.close(fd)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The block run by one writer of `path` at a time (threads or processes)."""
    if sys.platform == "win32":
        yield
        return
    lock = _hidden(path, "lock")
    fd = _acquire(lock)
    try:
        yield
    finally:
        _release(lock, fd)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(
            f"{str(folder)!r} is not a folder that can be written ({e.strerror or e}). {_advice(e)}"
        ) from None


def write_pair(path: Path, data: bytes, manifest: bytes, *, overwrite: bool) -> None:
    """`data` at `path` and `manifest` at `path + ".json"`, as one unit, by one writer at
    a time (module docstring); the folder is created.

    **Raises:** `ExportError` (one line) when files that export did not write are there
    and not `overwrite`, and for every error of the operating system (naming the path,
    the reason and what to do); the previous pair is then untouched."""
    _make_folder(path.parent)
    try:
        with _locked(path):
            _check_destination(path, overwrite)
            temporaries = _temporaries(path, data, manifest)
            try:
                _commit(path, *temporaries)
            finally:
                for tmp in temporaries:  # renamed onto their names, or not needed
                    with contextlib.suppress(OSError):
                        tmp.unlink(missing_ok=True)
    except OSError as e:
        where = e.filename or path
        raise ExportError(
            f"could not write {path} and its manifest ({where}: {e.strerror or e}). {_advice(e)}"
        ) from None


def _check_destination(path: Path, overwrite: bool) -> None:
    """An `ExportError` for a folder at either name, or for files that export did not
    write there (without `overwrite`)."""
    for p in (path, path.with_name(path.name + ".json")):
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


def _temporaries(path: Path, data: bytes, manifest: bytes) -> list[Path]:
    """The new artifact and manifest in temporaries beside them; on an error of the
    operating system, none is left and an `ExportError` says the old pair is untouched."""
    temporaries: list[Path] = []
    try:
        for target, content in ((path, data), (path.with_name(path.name + ".json"), manifest)):
            temporaries.append(_temporary(target, content, _mode(target)))
    except OSError as e:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
        where = e.filename or path.parent
        raise ExportError(
            f"could not write {path.name} and its manifest in {str(path.parent)!r} ({where}: "
            f"{e.strerror or e}); the previous files there are untouched. {_advice(e)}"
        ) from None
    return temporaries


def _commit(path: Path, new_data: Path, new_manifest: Path) -> None:
    """The renames of `write_pair`, in the order the module docstring gives; an error of
    the operating system undoes those made (the previous pair back at its names)."""
    beside = path.with_name(path.name + ".json")
    backups = [_hidden(p, f"old-{os.getpid()}") for p in (path, beside)]
    plan = [(p, b) for p, b in zip((path, beside), backups, strict=True) if _lstat(p)]
    plan += [(new_manifest, beside), (new_data, path)]
    done: list[tuple[Path, Path]] = []
    try:
        for source, target in plan:
            os.replace(source, target)
            done.append((source, target))
    except OSError as e:
        for source, target in reversed(done):
            if source in (new_data, new_manifest):
                target.unlink()  # the new file off its name
            else:
                os.replace(target, source)  # the old one back onto it
        raise ExportError(
            f"could not replace {path} and its manifest ({e.strerror or e}); the previous "
            f"files there are untouched. {_advice(e)}"
        ) from None
    for backup in backups:
        with contextlib.suppress(OSError):  # written: a backup left over is harmless
            backup.unlink(missing_ok=True)
    _fsync_folder(path.parent)
