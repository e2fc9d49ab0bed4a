"""Allow ``python -m codemode_trio.host`` (the same as ``codemode-trio-host``)."""

from .listen import host_main

if __name__ == "__main__":
    raise SystemExit(host_main())
