"""The course site in-process (TestClient) and once over a real socket: every endpoint, the file
endpoint's traversal list (SECURITY 18), symlinks (19), hash agreement and ZIP layout (20), and the
browser boundary (1-5)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import re
import stat
import subprocess
import sys
import zipfile
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from algolab import create_app, package as package_module
from algolab.package import ZIP_DATE_TIME

from .conftest import PACKAGE_DIR, REPO_ROOT, start_site

BASE = "http://127.0.0.1:8017"
MANIFEST = "/api/react-agent/example/manifest"
FILE = "/api/react-agent/example/file"
ZIP = "/api/react-agent/example.zip"
ROUTES = ["/", "/react-agent", "/labs/17", "/static/react-agent.js", "/static/react-agent.css", MANIFEST,
          FILE + "?path=README.md", ZIP, "/no-such-page"]


@pytest.fixture
def client(small_package: Path) -> TestClient:
    return TestClient(create_app(package_dir=small_package, port=8017), base_url=BASE)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_error(response: httpx.Response, status: int | tuple[int, ...], code: str | None = None) -> dict[str, Any]:
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    if code is not None:
        assert body["error"]["code"] == code
    assert "access-control-allow-origin" not in response.headers
    return body["error"]


# --------------------------------------------------------------------------------------------
# Pages and static assets
# --------------------------------------------------------------------------------------------


def test_root_redirects_to_the_page(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == "/react-agent"


@pytest.mark.parametrize("path", ["/react-agent", "/labs/17"])
def test_page_is_served_with_a_strict_csp(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    html = response.text
    assert '<html lang="zh-CN">' in html
    for anchor in ("exp1", "exp2", "exp3", "source", "s2", "s3", "s10", "s11", "s18", "s19"):
        assert f'id="{anchor}"' in html
    assert "/static/react-agent.js" in html and "/static/react-agent.css" in html


@pytest.mark.parametrize("name,media", [("react-agent.js", "text/javascript"), ("react-agent.css", "text/css")])
def test_static_assets(client: TestClient, name: str, media: str) -> None:
    response = client.get(f"/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(media)
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/static/react-agent.html", "/static/../app.py", "/static/%2e%2e/app.py",
                                  "/static/nope.js", "/static/"])
def test_only_listed_static_assets_are_served(client: TestClient, path: str) -> None:
    assert_error(client.get(path), 404)


def test_static_files_fetch_nothing_from_outside() -> None:
    """No CDN, no remote font or script: the only absolute URLs are the SVG namespace and loopback
    addresses (the runner and model-server defaults shown to the user), on any port."""
    static = REPO_ROOT / "algolab" / "static"
    allowed_hosts = {"www.w3.org", "127.0.0.1", "localhost", "[::1]"}
    for path in static.iterdir():
        text = path.read_text(encoding="utf-8")
        hosts = set(re.findall(r"https?://([A-Za-z0-9\-.]+|\[[0-9a-fA-F:]+\])", text))
        assert hosts <= allowed_hosts, (path.name, hosts - allowed_hosts)
        assert "@import" not in text and "url(http" not in text
        assert not re.search(r"""(?:src|href)\s*=\s*["']//|url\(\s*["']?//""", text), path.name  # protocol-relative


def test_unknown_route_is_a_json_404(client: TestClient) -> None:
    assert_error(client.get("/no-such-page"), 404, "not_found")


# --------------------------------------------------------------------------------------------
# Manifest, file endpoint, ZIP
# --------------------------------------------------------------------------------------------

EXPECTED_FILES = {
    "README.md", "manifest.json", "requirements.txt", "run.sh", "agent/__init__.py", "agent/core/runtime.py",
    "agent/models/backends/scripted.py", "prompts/system.md", "schemas/decision.schema.json", "knowledge/说明.md",
    "data/expected.json", "data/logo.bin", "tests/test_x.py", "extras/notes.txt",
}


def test_manifest_lists_exactly_the_live_files(client: TestClient) -> None:
    manifest = client.get(MANIFEST).json()
    assert manifest["version"] == "9.8.7" and manifest["module"] == "No.17"
    paths = [f["path"] for f in manifest["files"]]
    assert paths == sorted(paths)
    assert set(paths) == EXPECTED_FILES
    assert manifest["file_count"] == len(paths)
    assert manifest["bytes"] == sum(f["bytes"] for f in manifest["files"])
    assert re.fullmatch(r"[0-9a-f]{64}", manifest["zip_sha256"]) and re.fullmatch(r"[0-9a-f]{64}", manifest["tree_sha256"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["generated_at"])
    assert [s["path"] for s in manifest["skipped"]] == ["big.bin"]
    roles = {f["path"]: f["role"] for f in manifest["files"]}
    assert roles["README.md"] == "root" and roles["agent/core/runtime.py"] == "agent"
    assert roles["prompts/system.md"] == roles["schemas/decision.schema.json"] == "contracts"
    assert roles["knowledge/说明.md"] == roles["data/expected.json"] == "knowledge"
    assert roles["tests/test_x.py"] == "tests" and roles["extras/notes.txt"] == "other"
    langs = {f["path"]: f["language"] for f in manifest["files"]}
    assert langs["agent/core/runtime.py"] == "python" and langs["README.md"] == "markdown" and langs["run.sh"] == "shell"
    for entry in manifest["files"]:
        assert set(entry) >= {"path", "bytes", "sha256", "language", "download_path", "role"}
        assert entry["download_path"].startswith(FILE + "?path=") and entry["download_path"].endswith("&download=1")


def test_every_hash_agrees_between_manifest_file_endpoint_and_zip(client: TestClient) -> None:
    manifest = client.get(MANIFEST).json()
    zip_bytes = client.get(ZIP).content
    assert sha(zip_bytes) == manifest["zip_sha256"]
    assert len(zip_bytes) == manifest["zip_bytes"]
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        for entry in manifest["files"]:
            served = client.get(FILE, params={"path": entry["path"]})
            assert served.status_code == 200, entry["path"]
            downloaded = client.get(entry["download_path"])
            zipped = zf.read("react_agent_local/" + entry["path"])
            assert sha(served.content) == sha(downloaded.content) == sha(zipped) == entry["sha256"], entry["path"]
            assert len(served.content) == entry["bytes"]
            assert served.headers["x-content-sha256"] == entry["sha256"]
    tree = hashlib.sha256()
    for entry in manifest["files"]:
        tree.update(f"{entry['path']}\0{entry['bytes']}\0{entry['sha256']}\n".encode())
    assert tree.hexdigest() == manifest["tree_sha256"]


def test_zip_layout_is_relative_sorted_unique_and_deterministic(client: TestClient, small_package: Path) -> None:
    first = client.get(ZIP)
    assert first.headers["content-type"] == "application/zip"
    assert first.headers["content-disposition"].startswith('attachment; filename="react_agent_local-9.8.7.zip"')
    with zipfile.ZipFile(io.BytesIO(first.content)) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names) and len(names) == len(set(names))
        for info in infos:
            assert info.filename.startswith("react_agent_local/")
            assert not info.filename.startswith("/") and "\\" not in info.filename
            assert ".." not in info.filename.split("/") and "" not in info.filename.split("/")
            assert info.date_time == ZIP_DATE_TIME
        assert {n.removeprefix("react_agent_local/") for n in names} == EXPECTED_FILES
        modes = {i.filename: (i.external_attr >> 16) for i in infos}
        assert modes["react_agent_local/run.sh"] & stat.S_IXUSR
        assert not modes["react_agent_local/README.md"] & stat.S_IXUSR
    # The same tree gives the same bytes, from the cache and from a fresh app alike.
    assert client.get(ZIP).content == first.content
    fresh = TestClient(create_app(package_dir=small_package, port=8017), base_url=BASE)
    assert fresh.get(ZIP).content == first.content


def test_file_endpoint_content_types_and_download(client: TestClient) -> None:
    text = client.get(FILE, params={"path": "agent/core/runtime.py"})
    assert text.status_code == 200
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.headers["content-disposition"].startswith("inline")
    assert text.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in text.headers["content-security-policy"]
    assert text.text == "def run():\n    return '<script>alert(1)</script>'\n"  # raw, never rendered
    binary = client.get(FILE, params={"path": "data/logo.bin", "download": "1"})
    assert binary.headers["content-type"] == "application/octet-stream"
    assert binary.headers["content-disposition"].startswith('attachment; filename="logo.bin"')
    assert binary.content == bytes(range(256)) * 4
    unicode_name = client.get(FILE, params={"path": "knowledge/说明.md", "download": "1"})
    assert unicode_name.status_code == 200
    assert "filename*=UTF-8''%E8%AF%B4%E6%98%8E.md" in unicode_name.headers["content-disposition"]


def test_the_tree_is_read_live(client: TestClient, small_package: Path) -> None:
    before = client.get(MANIFEST).json()
    (small_package / "agent" / "core" / "runtime.py").write_text("def run():\n    return 2\n", encoding="utf-8")
    (small_package / "agent" / "new_module.py").write_text("X = 1\n", encoding="utf-8")
    (small_package / "tests" / "test_x.py").unlink()
    after = client.get(MANIFEST).json()
    assert after["zip_sha256"] != before["zip_sha256"] and after["tree_sha256"] != before["tree_sha256"]
    paths = {f["path"] for f in after["files"]}
    assert "agent/new_module.py" in paths and "tests/test_x.py" not in paths
    assert client.get(FILE, params={"path": "agent/core/runtime.py"}).text == "def run():\n    return 2\n"
    assert client.get(FILE, params={"path": "agent/new_module.py"}).text == "X = 1\n"
    assert_error(client.get(FILE, params={"path": "tests/test_x.py"}), 404, "not_found")
    with zipfile.ZipFile(io.BytesIO(client.get(ZIP).content)) as zf:
        assert zf.read("react_agent_local/agent/core/runtime.py") == b"def run():\n    return 2\n"
        assert "react_agent_local/tests/test_x.py" not in zf.namelist()


def test_manifest_version_comes_from_manifest_json(client: TestClient, small_package: Path) -> None:
    (small_package / "manifest.json").write_text(json.dumps({"name": "react_agent_local", "version": "1.2.3"}))
    assert client.get(MANIFEST).json()["version"] == "1.2.3"
    (small_package / "manifest.json").unlink()
    assert client.get(MANIFEST).json()["version"] is None


# --------------------------------------------------------------------------------------------
# SECURITY 18: only exact paths from the live enumeration
# --------------------------------------------------------------------------------------------

# Raw query strings, sent exactly as written (percent-escapes included).
TRAVERSAL_QUERIES = [
    "path=../x", "path=a/../../x", "path=/etc/passwd", "path=%2e%2e/x", "path=%252e%252e%252f",
    "path=%252e%252e%252fREADME.md", "path=..%2fx", "path=..%5cx", "path=..\\x", "path=C:/x", "path=C:x",
    "path=c:%5cwindows", "path=//server/share", "path=%5c%5cserver%5cshare", "path=NUL", "path=sub/CON.txt",
    "path=con", "path=agent/aux.py", "path=x%00.py", "path=README.md%00", "path=readme.md", "path=README.MD",
    "path=Agent/runtime.py", "path=README.md.", "path=agent/core/runtime.py.", "path=README.md%20", "path=",
    "", "path=.", "path=./README.md", "path=agent//runtime.py", "path=agent/./runtime.py", "path=agent/",
    "path=/README.md", "path=README.md&path=run.sh", "path=%2FREADME.md", "path=README.md%0a",
    "path=file:///etc/passwd", "path=react_agent_local/README.md", "path=agent%2fruntime.py%2f..%2f..%2fx",
    # exist on disk but are excluded or are symlinks
    "path=.git/config", "path=.runs/run-1/trace.json", "path=.venv/bin/python", "path=models/weights.gguf",
    "path=agent/__pycache__/runtime.cpython-311.pyc", "path=stale.pyc", "path=.pytest_cache/v/cache",
    "path=big.bin", "path=agent/outside.py", "path=linked_dir/also_secret.py", "path=readme_link.md",
    "path=data/pipe",
]


@pytest.mark.parametrize("query", TRAVERSAL_QUERIES)
def test_file_endpoint_refuses_everything_but_enumerated_paths(client: TestClient, query: str) -> None:
    response = client.get(f"{FILE}?{query}" if query else FILE)
    error = assert_error(response, (400, 404))
    assert error["code"] in ("invalid_path", "not_found")
    assert "SECRET" not in response.text and "[core]" not in response.text


def test_case_variant_of_a_real_file_is_not_served(client: TestClient) -> None:
    assert client.get(FILE, params={"path": "README.md"}).status_code == 200
    assert_error(client.get(FILE, params={"path": "Readme.md"}), 404, "not_found")


# --------------------------------------------------------------------------------------------
# SECURITY 19: symlinks are never followed
# --------------------------------------------------------------------------------------------


def test_symlinks_are_not_listed_served_or_zipped(client: TestClient) -> None:
    manifest = client.get(MANIFEST).json()
    listed = {f["path"] for f in manifest["files"]}
    assert not listed & {"agent/outside.py", "linked_dir/also_secret.py", "readme_link.md"}
    assert not any(p.startswith("linked_dir") for p in listed)
    for path in ("agent/outside.py", "linked_dir/also_secret.py", "readme_link.md"):
        assert_error(client.get(FILE, params={"path": path}), 404)
    zip_bytes = client.get(ZIP).content
    assert b"TOP SECRET" not in zip_bytes
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        assert not any("outside" in n or "linked_dir" in n or "readme_link" in n for n in zf.namelist())
        for name in zf.namelist():
            assert b"TOP SECRET" not in zf.read(name)


def test_a_file_swapped_for_a_symlink_after_the_scan_is_not_read(small_package: Path, outside_dir: Path) -> None:
    pkg = package_module.ExamplePackage(small_package)
    target = small_package / "agent" / "core" / "runtime.py"
    target.unlink()
    target.symlink_to(outside_dir / "secret.txt")
    assert package_module._read_regular(small_package, "agent/core/runtime.py", 1 << 20) is None
    assert "agent/core/runtime.py" not in pkg.snapshot().files


# --------------------------------------------------------------------------------------------
# Limits
# --------------------------------------------------------------------------------------------


def test_too_many_files_is_a_clear_507(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(package_module, "MAX_FILES", 3)
    for path in (MANIFEST, ZIP, FILE + "?path=README.md"):
        error = assert_error(client.get(path), 507, "package_too_large")
        assert "limit" in error["message"]


def test_too_many_bytes_is_a_clear_507(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(package_module, "MAX_TOTAL_BYTES", 100)
    assert_error(client.get(MANIFEST), 507, "package_too_large")


def test_missing_package_folder_is_a_503(tmp_path: Path) -> None:
    client = TestClient(create_app(package_dir=tmp_path / "gone", port=8017), base_url=BASE)
    assert_error(client.get(MANIFEST), 503, "package_unavailable")
    assert client.get("/react-agent").status_code == 200  # the page itself still works


# --------------------------------------------------------------------------------------------
# Browser boundary (SECURITY 1-5)
# --------------------------------------------------------------------------------------------

BAD_HOSTS = ["evil.example:8017", "localhost.evil.com:8017", "127.0.0.1.nip.io:8017", "0.0.0.0:8017",
             "127.0.0.1:4890", "127.0.0.1", "localhost", "127.0.0.2:8017", "[::2]:8017", "127.0.0.1:8017.evil.com",
             "evil.example"]


# The boundary is one middleware that runs before routing: each bad host is a different attack on
# the comparison (tested on one route), and one bad host on every route shows no route escapes it.
@pytest.mark.parametrize("host", BAD_HOSTS)
def test_foreign_host_is_refused(client: TestClient, host: str) -> None:
    assert_error(client.get(MANIFEST, headers={"Host": host}), 421, "forbidden_host")


def test_foreign_host_is_refused_on_every_route(client: TestClient) -> None:
    for path in ROUTES:
        response = client.get(path, headers={"Host": "evil.example:8017"}, follow_redirects=False)
        assert_error(response, 421, "forbidden_host")


@pytest.mark.parametrize("method", ["OPTIONS", "POST", "DELETE", "HEAD"])
def test_foreign_host_is_refused_for_every_method(client: TestClient, method: str) -> None:
    response = client.request(method, MANIFEST, headers={"Host": "evil.example:8017"})
    assert response.status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.1:8017", "localhost:8017", "LOCALHOST:8017", "[::1]:8017", "LocalHost:8017"])
def test_loopback_hosts_are_fine(client: TestClient, host: str) -> None:
    assert client.get(MANIFEST, headers={"Host": host}).status_code == 200


def _raw_asgi(app: Any, headers: list[tuple[bytes, bytes]], method: str = "GET", path: str = MANIFEST) -> int:
    """Call the ASGI app directly (httpx always sends one Host header)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "headers": headers, "scheme": "http",
             "server": ("127.0.0.1", 8017), "client": ("127.0.0.1", 50000), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"]


def test_websockets_are_refused(small_package: Path) -> None:
    app = create_app(package_dir=small_package, port=8017)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/", "headers": [(b"host", b"127.0.0.1:8017")], "query_string": b""}
    asyncio.run(app(scope, receive, send))
    assert sent == [{"type": "websocket.close", "code": 1008}]


def test_missing_or_duplicate_host_is_refused(small_package: Path) -> None:
    app = create_app(package_dir=small_package, port=8017)
    assert _raw_asgi(app, []) == 421
    assert _raw_asgi(app, [(b"host", b"127.0.0.1:8017"), (b"host", b"evil.example:8017")]) == 421
    assert _raw_asgi(app, [(b"host", b"127.0.0.1:8017")]) == 200


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:8017.evil.com",
                                    "https://127.0.0.1:8017", "http://127.0.0.1:4890", "http://localhost:80",
                                    "http://evil.example:8017", ""])
def test_foreign_origin_is_refused_without_cors(client: TestClient, origin: str) -> None:
    assert_error(client.get(MANIFEST, headers={"Origin": origin}), 403, "forbidden_origin")


def test_foreign_origin_is_refused_on_every_route(client: TestClient) -> None:
    for path in ROUTES:
        response = client.get(path, headers={"Origin": "https://evil.example"}, follow_redirects=False)
        assert_error(response, 403, "forbidden_origin")


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8017", "http://localhost:8017"])
def test_own_origin_is_fine_and_never_gets_cors_headers(client: TestClient, origin: str) -> None:
    response = client.get(MANIFEST, headers={"Origin": origin})
    assert response.status_code == 200
    assert not any(h.startswith("access-control-") for h in response.headers)


def _assert_method_refused(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, path, content=b'{"x": 1}', headers={"Content-Type": "application/json"})
    error = assert_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "GET, HEAD"
    assert error["message"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"])
def test_only_get_and_head_exist(client: TestClient, small_package: Path, method: str) -> None:
    before = sorted(p.name for p in small_package.rglob("*"))
    _assert_method_refused(client, method, FILE + "?path=README.md")
    assert sorted(p.name for p in small_package.rglob("*")) == before


def test_a_write_method_is_refused_on_every_route(client: TestClient, small_package: Path) -> None:
    before = sorted(p.name for p in small_package.rglob("*"))
    for path in ROUTES:
        _assert_method_refused(client, "DELETE", path)
    assert sorted(p.name for p in small_package.rglob("*")) == before


def test_preflight_from_a_foreign_origin_is_refused(client: TestClient) -> None:
    response = client.options(MANIFEST, headers={"Origin": "https://evil.example",
                                                 "Access-Control-Request-Method": "GET"})
    assert_error(response, 403)


def test_head_is_get_without_a_body(client: TestClient) -> None:
    response = client.head(MANIFEST)
    assert response.status_code == 200 and response.content == b""


def test_gets_change_nothing(client: TestClient, small_package: Path) -> None:
    snapshot = {p: p.stat().st_mtime_ns for p in small_package.rglob("*") if not p.is_symlink()}
    for path in ROUTES + [FILE + "?path=README.md&download=1"]:
        client.get(path)
    assert {p: p.stat().st_mtime_ns for p in small_package.rglob("*") if not p.is_symlink()} == snapshot


# --------------------------------------------------------------------------------------------
# The real package and a real socket
# --------------------------------------------------------------------------------------------


def test_the_repository_package_is_served_consistently() -> None:
    client = TestClient(create_app(port=8017), base_url=BASE)
    manifest = client.get(MANIFEST).json()
    declared = json.loads((PACKAGE_DIR / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["version"] == declared["version"] and manifest["module"] == "No.17"
    paths = {f["path"] for f in manifest["files"]}
    assert {"manifest.json", "agent/contracts/decision.py", "agent/core/runtime.py", "agent/models/model_policy.py"} <= paths
    for part in (".git", ".runs", ".venv", "__pycache__", ".pytest_cache"):
        assert not any(part in p.split("/") for p in paths), part
    assert not any(p.split("/")[0] == "models" for p in paths)  # downloaded weights; agent/models/ is code
    assert not any(p.endswith(".pyc") for p in paths)
    with zipfile.ZipFile(io.BytesIO(client.get(ZIP).content)) as zf:
        for entry in manifest["files"]:
            assert sha(zf.read("react_agent_local/" + entry["path"])) == entry["sha256"]


def test_cli_help_and_loopback_only() -> None:
    out = subprocess.run([sys.executable, "-m", "algolab", "--help"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "--port" in out.stdout and "--package-dir" in out.stdout
    assert "--host" not in out.stdout  # the bind address is not configurable: 127.0.0.1 only
    bad = subprocess.run([sys.executable, "-m", "algolab", "--package-dir", "/nonexistent/dir"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0


def _raw_get(port: int, target: str) -> tuple[int, bytes]:
    """One GET with the request target sent byte for byte (no client-side normalization)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"127.0.0.1:{port}")
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_over_a_real_socket(tmp_path: Path, small_package: Path) -> None:
    site = start_site(tmp_path, small_package)
    port = int(site.base_url.rsplit(":", 1)[1])
    try:
        with httpx.Client(base_url=site.base_url, timeout=10) as http:
            manifest = http.get(MANIFEST).json()
            assert manifest["version"] == "9.8.7"
            readme = http.get(FILE, params={"path": "README.md"})
            assert sha(readme.content) == next(f["sha256"] for f in manifest["files"] if f["path"] == "README.md")
            assert sha(http.get(ZIP).content) == manifest["zip_sha256"]
            assert http.get("/react-agent").status_code == 200
            assert http.get(MANIFEST, headers={"Host": "evil.example"}).status_code == 421
            assert http.get(MANIFEST, headers={"Origin": "https://evil.example"}).status_code == 403
            assert http.post(MANIFEST).status_code == 405
            # SECURITY 18 through uvicorn's own request parsing, not only the in-process client.
            assert _raw_get(port, FILE + "?path=README.md") == (200, readme.content)
            for query in TRAVERSAL_QUERIES:
                status, body = _raw_get(port, f"{FILE}?{query}" if query else FILE)
                assert status in (400, 404), (query, status)
                assert json.loads(body)["error"]["code"] in ("invalid_path", "not_found"), query
                assert b"SECRET" not in body and b"[core]" not in body, query
            # After every refusal the site still serves the same package.
            assert site.proc is not None and site.proc.poll() is None
            assert http.get(MANIFEST).json()["zip_sha256"] == manifest["zip_sha256"]
            assert http.get(FILE, params={"path": "README.md"}).content == readme.content
    finally:
        site.stop()
