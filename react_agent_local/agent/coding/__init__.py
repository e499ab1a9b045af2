"""The coding half for a goal in words on the user's own folder: what a pack would declare, found.

    discovery.py   the project's test command (the goal's words, pytest/unittest configuration, the
                   test files) and what must not change (the tests, unless the goal asks for tests)
    localise.py    a test run's output read: failing test ids, traceback frames (file, function,
                   line), and the source files of the workspace those point at
    goal_task.py   the tests run once in the sandbox, then a ``TaskSpec`` built from the folder and
                   the goal: the general plan (reproduce, localise, read, change, verify, report)
    changes.py     what a run changed: the unified diff, the previous contents kept in the run's
                   folder, and the revert that refuses when a file changed since

Nothing here knows a repository's names, a bug's shape or an exercise: every rule reads the folder,
the goal's words or the test output.
"""
