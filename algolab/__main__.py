"""``python -m algolab [--port 8017] [--package-dir PATH]``: serve the course site on loopback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .app import DEFAULT_PORT, create_app
from .package import DEFAULT_PACKAGE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m algolab", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port on 127.0.0.1 (default 8017)")
    parser.add_argument(
        "--package-dir",
        type=Path,
        default=DEFAULT_PACKAGE_DIR,
        help="the example package served by the file endpoints (default: the repo's react_agent_local/)",
    )
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error("--port must be 1..65535")
    if not args.package_dir.is_dir():
        parser.error("--package-dir is not a directory")

    import uvicorn

    app = create_app(package_dir=args.package_dir, port=args.port)
    # Loopback only (SECURITY 1): the host is fixed, there is no option to change it.
    print(f"AlgoLab No.17 page: http://127.0.0.1:{args.port}/react-agent", file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level, server_header=False,
                proxy_headers=False, access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
