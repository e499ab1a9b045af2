"""The runner's routes, one router per concern, wired by ``agent.runner.server.create_app``.

``status`` (``GET /status``), ``schema`` (``/schema``, ``/schema/validate``), ``models``
(``/models/inspect``, ``/models/unload``) and ``runs`` (``/agent/runs/...``); the session routes are
``agent/runner/session_routes.py``. Each route takes the runner's shared objects as a ``context.Runner``
parameter; ``errors`` holds ``ApiError`` and the exception handlers, ``model_checks`` what a request
may name as its model.
"""
