"""Byte-stream transports that carry the code-mode protocol."""
