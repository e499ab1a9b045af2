"""The loop: the controlled ReAct run (``runtime.Run``), what it asks next, the evidence of a step, one tool
attempt, a served reply's batch of calls, the run's metrics and the explanation of a finished run."""
