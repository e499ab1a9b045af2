"""What the model is asked: the ``Prompt`` of a step and its two renderings (a continuation and chat
messages)."""
