"""`eqx_lru.export.write`: the artifact and its manifest as one unit, never over files that
export did not write (unless `overwrite=True`), never through a link, and a full disk or a
crash at any rename leaving a consistent pair (issue 27, "files that can be turned
against their user"). `write` reads only the bytes and the manifest of an `Exported`, so
these tests build them by hand (no compile)."""

import errno
import hashlib
import json
import os

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
    assert data == b"second" and info["artifact"] == "model.stablehlo" and _consistent(path)
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
@pytest.mark.parametrize("crash_at", [0, 1, 2])
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
