"""`eqx_lru.export.write`: the artifact and its manifest as one unit, never over files that
export did not write (unless `overwrite=True`), never through a link, and a full disk or a
crash at any rename leaving a consistent pair (issue 27, "files that can be turned
against their user"). `write` reads only the bytes and the manifest of an `Exported`, so
these tests build them by hand (no compile)."""

import errno
import hashlib
import inspect
import json
import os
import subprocess
import sys
import threading

import pytest

import eqx_lru
from eqx_lru.export import STABLEHLO, Exported, ExportError, Program, _files


def _exported(data: bytes) -> Exported:
    manifest = {
        "format": "stablehlo",
        "program": "sequence",
        "sha256": hashlib.sha256(data).hexdigest(),
        "eqx_lru": eqx_lru.__version__,
    }
    return Exported(data, manifest, STABLEHLO, Program("sequence", lambda x: x, [], ["out"]))


def _pair(path):
    """`(artifact bytes, manifest)` at `path`, None for a missing file."""
    manifest = path.with_name(path.name + ".json")
    data = path.read_bytes() if path.exists() else None
    info = json.loads(manifest.read_text()) if manifest.exists() else None
    return data, info


def _consistent(path) -> bool:
    """An artifact is never without its manifest, nor beside another's."""
    data, info = _pair(path)
    return data is None or (info is not None and info["sha256"] == hashlib.sha256(data).hexdigest())


def test_rewrites_its_own_pair_and_keeps_the_permissions(tmp_path):
    path = tmp_path / "model.stablehlo"
    eqx_lru.export.write(_exported(b"first"), path)
    os.chmod(path, 0o640)
    eqx_lru.export.write(_exported(b"second"), path)  # ours: replaced without overwrite
    data, info = _pair(path)
    assert data == b"second" and info is not None and info["artifact"] == "model.stablehlo"
    assert _consistent(path)
    assert (os.stat(path).st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.stablehlo", "model.stablehlo.json"]


@pytest.mark.parametrize(
    "case, reason",
    [
        ("artifact_alone", "has no manifest beside it"),
        ("other_json", "is not a manifest of eqx_lru.export"),
        ("edited_artifact", "is not the file its manifest describes"),
        ("manifest_of_another", "is the manifest of 'step.stablehlo'"),
        ("artifact_link", "is a symbolic link"),
        ("manifest_link", "is a symbolic link"),
    ],
)
def test_files_it_did_not_write_are_replaced_only_when_asked(case, reason, tmp_path):
    """The export command silently replaced a `model.onnx` it did not write (issue 27)."""
    path, target = tmp_path / "model.stablehlo", tmp_path / "precious"
    manifest = path.with_name(path.name + ".json")
    target.write_bytes(b"the user's file")
    if case == "artifact_alone":
        path.write_bytes(b"the user's model")
    elif case == "other_json":
        path.write_bytes(b"the user's model")
        manifest.write_text('{"tool": "another"}')
    elif case in ("edited_artifact", "manifest_of_another"):
        eqx_lru.export.write(_exported(b"ours"), path)
        if case == "edited_artifact":
            path.write_bytes(b"edited by the user")
        else:
            info = json.loads(manifest.read_text())
            manifest.write_text(json.dumps({**info, "artifact": "step.stablehlo"}))
    else:
        (path if case == "artifact_link" else manifest).symlink_to(target)
    before = {p.name: (p.is_symlink(), p.read_bytes()) for p in tmp_path.iterdir()}
    with pytest.raises(ExportError, match="export does not replace files it did not write") as e:
        eqx_lru.export.write(_exported(b"new"), path)
    assert reason in str(e.value) and "overwrite=True (--overwrite)" in str(e.value)
    assert "\n" not in str(e.value)
    assert {p.name: (p.is_symlink(), p.read_bytes()) for p in tmp_path.iterdir()} == before

    eqx_lru.export.write(_exported(b"new"), path, overwrite=True)
    assert _pair(path)[0] == b"new" and _consistent(path)
    assert not path.is_symlink() and not manifest.is_symlink()
    assert target.read_bytes() == b"the user's file"  # a link is replaced, never followed


def test_a_folder_is_refused_even_with_overwrite(tmp_path):
    (tmp_path / "model.stablehlo").mkdir()
    with pytest.raises(ExportError, match="is a folder: give the path of the artifact's file"):
        eqx_lru.export.write(_exported(b"x"), tmp_path / "model.stablehlo", overwrite=True)


@pytest.mark.parametrize("failing", [0, 1])
def test_a_full_disk_leaves_the_previous_pair(failing, tmp_path, monkeypatch):
    """ENOSPC while writing the artifact (`failing=0`) or the manifest (1): one line, the
    previous pair intact, no temporary left. (It was a traceback, and a failure at the
    manifest left the new artifact beside the old manifest.)"""
    path = tmp_path / "model.stablehlo"
    eqx_lru.export.write(_exported(b"previous"), path)
    previous = _pair(path)
    calls = []
    real = _files._write_fd

    def full(fd, data):
        calls.append(fd)
        if len(calls) > failing:
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(_files, "_write_fd", full)
    with pytest.raises(ExportError) as e:
        eqx_lru.export.write(_exported(b"new and longer"), path)
    message = str(e.value)
    assert "No space left on device" in message and "previous files there are untouched" in message
    assert "\n" not in message and "model.stablehlo" in message
    assert _pair(path) == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.stablehlo", "model.stablehlo.json"]


class _Crash(BaseException):
    """The process killed at this instant (nothing after it runs)."""


@pytest.mark.parametrize("fresh", [True, False])
@pytest.mark.parametrize("crash_at", [0, 1, 2, 3])
def test_a_crash_at_any_rename_never_pairs_an_artifact_with_another_manifest(
    crash_at, fresh, tmp_path, monkeypatch
):
    """Killed before the `crash_at`-th rename: the artifact is the old one beside the old
    manifest, the new one beside the new manifest, or absent; the next write (without
    `overwrite`) completes. The old `write` renamed the artifact first: a crash then left
    the new artifact beside the old manifest."""
    path = tmp_path / "model.stablehlo"
    if not fresh:
        eqx_lru.export.write(_exported(b"old"), path)
    renames, real = [], os.replace

    def replace(src, dst):
        renames.append((src, dst))
        if len(renames) > crash_at:
            raise _Crash
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    try:
        eqx_lru.export.write(_exported(b"new"), path)
    except _Crash:
        pass
    monkeypatch.undo()
    assert _consistent(path), _pair(path)
    assert _pair(path)[0] in (None, b"new") if fresh else _pair(path)[0] in (None, b"old", b"new")
    eqx_lru.export.write(_exported(b"newer"), path)
    assert _pair(path)[0] == b"newer" and _consistent(path)


# --- every error of the operating system (issue 34) -------------------------------------------

#: The calls of `os` (and `fcntl.flock`) that `write` makes; each may fail.
_OS_CALLS = ("open", "replace", "lstat", "stat", "fstat", "write", "fsync", "fchmod", "mkdir")


def _inject(monkeypatch, fail_at: int | None, code: int) -> list[str]:
    """Record each call `write` makes of `_OS_CALLS` (and `flock`); the call numbered
    `fail_at` raises `OSError(code)` naming its path."""
    calls: list[str] = []

    def wrap(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            calls.append(name)
            if len(calls) - 1 == fail_at:
                where = args[0] if args and isinstance(args[0], str | os.PathLike) else None
                raise OSError(code, os.strerror(code), where)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    for name in _OS_CALLS:
        wrap(os, name)
    if hasattr(_files, "fcntl"):
        wrap(_files.fcntl, "flock")
    return calls


def _left_over(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EIO])
def test_every_os_error_of_write_is_one_line_naming_the_path(code, tmp_path, monkeypatch):
    """Each call of the operating system that `write` makes fails in turn (no space, no
    permission, a read-only file system, an I/O error): one `ExportError` line naming the
    path and the reason, the previous pair (or the new one) consistent, no temporary or
    lock left, and the next write completes. (A failure outside the temporaries was a bare
    `OSError`: an `lstat`, the SHA-256 of the old artifact, a folder that could not be
    synced.)"""
    path = tmp_path / "sub" / "model.stablehlo"
    eqx_lru.export.write(_exported(b"previous"), path)
    calls = _inject(monkeypatch, None, code)
    eqx_lru.export.write(_exported(b"dry run"), path)
    count = len(calls)
    monkeypatch.undo()
    assert count > 10, calls
    for fail_at in range(count):
        eqx_lru.export.write(_exported(b"previous"), path)
        calls = _inject(monkeypatch, fail_at, code)
        try:
            eqx_lru.export.write(_exported(b"new"), path)
            failed = None
        except ExportError as e:
            failed = str(e)
        finally:
            monkeypatch.undo()
        if failed is not None:
            assert "\n" not in failed and os.strerror(code) in failed, (fail_at, failed)
            assert str(path.parent) in failed, (fail_at, failed)
            assert _pair(path)[0] == b"previous", (fail_at, failed)
        else:
            assert _pair(path)[0] == b"new", fail_at
        # A lock that could not be taken is not removed (another writer may hold it).
        lock = [".model.stablehlo.lock"] if calls[fail_at] == "flock" else []
        assert _consistent(path) and _left_over(path.parent) == lock, (fail_at, failed)
        eqx_lru.export.write(_exported(b"next"), path)
        assert _pair(path)[0] == b"next" and _consistent(path)


def test_a_name_too_long_a_file_on_the_way_and_a_bad_path_are_one_line(tmp_path):
    """A 251-byte file name (its manifest's, 256 bytes, is too long) was a bare `OSError`;
    a file where a folder goes, and paths that name no file, are one line too."""
    exported = _exported(b"x")
    with pytest.raises(ExportError) as e:
        eqx_lru.export.write(exported, tmp_path / ("m" * 251))
    message = str(e.value)
    assert "\n" not in message and "File name too long" in message and "shorter" in message
    assert ("m" * 251) in message
    assert _left_over(tmp_path) == [] and list(tmp_path.iterdir()) == []
    eqx_lru.export.write(exported, tmp_path / ("m" * 250))  # its manifest's name fits
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="is a file, not a folder") as e:
        eqx_lru.export.write(exported, tmp_path / "file" / "model.stablehlo")
    assert "\n" not in str(e.value) and str(tmp_path / "file") in str(e.value)
    for bad in ("", str(tmp_path) + "/", str(tmp_path / "a\0b")):
        with pytest.raises(ExportError, match="`path` must"):
            eqx_lru.export.write(exported, bad)
    # The library's own check, as a user meets it (the suite's type checker, jaxtyping's
    # import hook, would refuse the int first).
    with pytest.raises(TypeError, match="`path` must be a str or a path; got int"):
        inspect.unwrap(eqx_lru.export.write)(exported, 3)


# --- writers to one path (issue 34) -----------------------------------------------------------

_ROUNDS = 40


def test_concurrent_writers_take_turns_the_last_wins_whole(tmp_path):
    """Two threads write different pairs to one path, round after round: after each round
    the pair is one writer's whole (artifact and manifest), neither fails, and nothing is
    left beside it. (Threads of one process shared the temporaries' names, and the renames
    of two writers interleaved: an artifact beside the other's manifest, or a bare error.)"""
    path = tmp_path / "model.stablehlo"
    pairs = [_exported(b"A" * 20_000), _exported(b"B" * 30_000)]
    seen, errors = [], []

    def check():
        seen.append(_pair(path)[0] is None or _consistent(path))

    barrier = threading.Barrier(2, action=check, timeout=60)

    def writer(exported):
        try:
            for _ in range(_ROUNDS):
                barrier.wait()
                eqx_lru.export.write(exported, path)
            barrier.wait()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(p,), daemon=True) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer hangs"
    assert errors == [] and len(seen) == _ROUNDS + 1 and all(seen), (errors, seen)
    assert _pair(path)[0] in (b"A" * 20_000, b"B" * 30_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.stablehlo", "model.stablehlo.json"]


_WRITER = """
import hashlib, importlib.util, json, sys, types

# `eqx_lru/export/_files.py` alone (its one import, `ExportError`, stubbed): the lock and
# the renames that `write` runs, in a process that starts in a fraction of a second.
source, path, byte, size, rounds = sys.argv[1:6]
package = types.ModuleType("files_only")
package.__path__ = []
program = types.ModuleType("files_only._program")
program.ExportError = type("ExportError", (ValueError,), {})
sys.modules.update({"files_only": package, "files_only._program": program})
spec = importlib.util.spec_from_file_location("files_only._files", source)
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)

data = byte.encode() * int(size)
manifest = {"format": "stablehlo", "program": "sequence", "eqx_lru": "0",
            "sha256": hashlib.sha256(data).hexdigest(), "artifact": path.rsplit("/", 1)[1]}
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(rounds)):
    files.write_pair(files.Path(path), data, json.dumps(manifest).encode(), overwrite=False)
"""


def test_concurrent_processes_leave_one_writers_pair(tmp_path):
    """Two processes write different pairs to one path at once, 200 times each: both exit
    0 and the pair left is one writer's whole."""
    path = tmp_path / "model.stablehlo"
    (tmp_path / "writer.py").write_text(_WRITER)
    source = _files.__file__
    procs = [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "writer.py"), source, str(path), byte, size, "200"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for byte, size in (("A", "20000"), ("B", "30000"))
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
    finally:
        for p in procs:
            p.kill()
            p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()
    assert _consistent(path) and _pair(path)[0] in (b"A" * 20_000, b"B" * 30_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model.stablehlo",
        "model.stablehlo.json",
        "writer.py",
    ]
