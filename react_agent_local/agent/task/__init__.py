"""The task and its evidence: task packs, their skills and the user's tables, whole."""
