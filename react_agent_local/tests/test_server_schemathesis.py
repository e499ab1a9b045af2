"""SECURITY.md item 8: property-based requests from /openapi.json -- no 5xx, responses match the schema."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.core import NotSet  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from server_support import BASE_URL, GOOD_SCRIPT, make_client  # noqa: E402

_client_cm = None


def _app():
    """One app for the whole module; its runs dir lives under pytest's temporary root."""
    global _client_cm
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    runs = Path(tempfile.mkdtemp(prefix="schemathesis-runs-"))
    atexit.register(shutil.rmtree, runs, True)
    _client_cm = make_client(runs, GOOD_SCRIPT, max_queued=5)
    return _client_cm.app


schema = schemathesis.openapi.from_asgi("/openapi.json", _app(), headers={"host": "127.0.0.1:4890"})
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    # Bodiless POSTs (cancel, unload) still need the JSON content type the page always sends.
    bodiless = case.method.upper() == "POST" and isinstance(case.body, NotSet)
    response = case.call(base_url=BASE_URL, headers={"content-type": "application/json"} if bodiless else None)
    case.validate_response(response, checks=CHECKS)
    assert response.status_code < 500
    assert response.status_code not in (421, 403), "the generated requests must pass the browser boundary"
    import os
    if os.environ.get("SCHEMATHESIS_DEBUG"):
        print(case.method, case.path, response.status_code)
