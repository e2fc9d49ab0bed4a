"""Allow ``python -m codemode_trio``."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
