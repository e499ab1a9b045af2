"""Shared test setup: import the package from its root, and which marked tests run by default."""

import sys
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))

# Tests that run only when ``-m`` names their marker (pytest.ini describes them): CI never downloads
# 490 MB or needs CUDA, whatever other ``-m`` expression a run is given.
OPT_IN_MARKERS = ("network", "gpu", "unproven")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    asked = config.getoption("markexpr") or ""
    dropped = [item for item in items
               if any(item.get_closest_marker(m) and m not in asked for m in OPT_IN_MARKERS)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture
def scratch_parent(tmp_path, monkeypatch):
    """The folder trial scratch copies are made in (``tempfile``'s), empty: a test can see they are removed."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder
