"""Where the package's own files live: ``PACKAGE_ROOT``, the folder that holds ``prompts/``,
``schemas/``, the default pack and ``packs/``.

``user_cache`` names the folders of the user's cache. It sits below every module that reads those files (``packs.py``, ``prompting.py``, ``schemas.py``),
so none of them imports another only to find the root.
"""

from __future__ import annotations

import os
from pathlib import Path


def _package_root() -> Path:
    """Where prompts/, schemas/, the default pack and packs/ live: the source tree (a checkout or an
    editable install), else the data installed with the package (``pip install``), or $REACT_AGENT_HOME."""
    if os.environ.get("REACT_AGENT_HOME"):
        return Path(os.environ["REACT_AGENT_HOME"]).expanduser().resolve()
    source = Path(__file__).resolve().parents[2]  # agent/util/paths.py -> the folder that holds agent/
    if (source / "prompts").is_dir():
        return source
    import importlib.util

    spec = importlib.util.find_spec("react_agent_local")
    if spec is None or not spec.submodule_search_locations:
        return source  # nothing installed either: errors will name the missing folder
    return Path(list(spec.submodule_search_locations)[0]).resolve()


PACKAGE_ROOT = _package_root()


def user_cache(*parts: str) -> Path:
    """A folder of the user's cache, ``~/.cache/react-agent-local/<parts>``: downloaded models, run
    folders outside a checkout, saved prompt states, a context's state while it grows."""
    return Path.home().joinpath(".cache", "react-agent-local", *parts)
