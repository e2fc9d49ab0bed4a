"""The host role: a reference ``codex-code-mode-host`` in Python (see the README)."""
