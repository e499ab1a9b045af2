"""The loopback Runner: the FastAPI app, its routes, the job store, the browser boundary, streaming,
sessions over HTTP, the operator token and telemetry."""
