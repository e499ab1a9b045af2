"""The layer contracts in pyproject.toml hold (import-linter): heavy model libraries stay inside their
backend, the sandbox knows nothing of the tools above it, the loop never names a task family."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is missing: scripts/setup.sh installs requirements-dev.txt"
    proc = subprocess.run([lint, "--config", str(PACKAGE_ROOT / "pyproject.toml")], cwd=PACKAGE_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "broken" in proc.stdout and " 0 broken" in proc.stdout


def test_every_subpackage_is_installed():
    """A folder of agent/ left out of pyproject's package list would be missing from a wheel."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PACKAGE_ROOT).parts) for p in (PACKAGE_ROOT / "agent").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
