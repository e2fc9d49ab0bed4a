"""The Trio side of codemode-trio: the connection driver and the public client API."""
