"""The terminal: ``python -m agent`` / ``react-agent`` and its subcommands (``main``)."""
