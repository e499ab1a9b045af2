"""Typed contracts every room shares: Decisions and Observations, budgets and sampling, the task-pack
schema, a run's result, and the execution trace."""
