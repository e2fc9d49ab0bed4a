"""``python -m codemode_trio.demo``: the same as ``codemode-trio demo``."""

import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
