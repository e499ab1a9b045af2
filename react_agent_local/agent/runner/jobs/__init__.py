"""The parts of the runner's job store (``agent/runner/job_store.py``, the queue) that know nothing of jobs
running: one job's event log and its readers (``event_log``), and the run folders on disk, opened
without following links, reloaded at a restart and pruned by retention (``run_folder``)."""
