"""Regenerate codemode_trio/grpc/codemode_pb2.py (and its .pyi) from codemode.proto.

Run from anywhere with the dev extra installed: ``python scripts/regen_grpc.py``. With
``--check`` it regenerates into a temporary folder and exits 1 if the committed files differ
(so a stale module is caught). ``--with-grpc`` also writes ``codemode_pb2_grpc.py`` into the
folder given by ``--out`` (the benchmark's grpcio stubs; never committed to the package).
"""

from __future__ import annotations

import argparse
import filecmp
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "codemode_trio" / "grpc"
PROTO = "codemode.proto"
GENERATED = ("codemode_pb2.py", "codemode_pb2.pyi")


def generate(out: pathlib.Path, *, with_grpc: bool = False) -> None:
    """Run protoc (from grpcio-tools) on the proto, writing into ``out``."""
    from grpc_tools import protoc  # dev-only dependency

    args = [
        "protoc",
        f"--proto_path={PACKAGE}",
        f"--python_out={out}",
        f"--pyi_out={out}",
    ]
    if with_grpc:
        args.append(f"--grpc_python_out={out}")
    args.append(str(PACKAGE / PROTO))
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the module is stale")
    parser.add_argument("--with-grpc", action="store_true", help="also write grpcio stubs")
    parser.add_argument("--out", type=pathlib.Path, default=PACKAGE, help="output folder")
    options = parser.parse_args()
    if options.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(pathlib.Path(tmp))
            stale = [
                name
                for name in GENERATED
                if not filecmp.cmp(pathlib.Path(tmp) / name, PACKAGE / name, shallow=False)
            ]
        if stale:
            print(f"stale generated files: {', '.join(stale)}", file=sys.stderr)
            return 1
        return 0
    options.out.mkdir(parents=True, exist_ok=True)
    generate(options.out, with_grpc=options.with_grpc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
