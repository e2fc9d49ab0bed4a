"""The host role: a reference ``codex-code-mode-host`` in Python (see docs/reference-host.md)."""
