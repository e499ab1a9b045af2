"""The workspace tools: file reads and edits, the shell, and the operations both share."""
