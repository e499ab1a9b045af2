"""The AlgoLab course site for module No.17 (ReAct Agent): the lab page and the example package.

``python -m algolab`` serves, on 127.0.0.1 only, the No.17 page (three experiments) and the live
``react_agent_local/`` package: a SHA-256 manifest, per-file download and a deterministic ZIP
(SPEC R-SITE). The page talks to the user's local runner (127.0.0.1:4890) directly from the
browser; this server never proxies it.
"""

from .app import create_app

__all__ = ["create_app"]
