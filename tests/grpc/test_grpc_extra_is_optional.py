"""The gRPC transport is an optional extra: the core never imports h2 or protobuf."""

from __future__ import annotations

import subprocess
import sys

import codemode_trio as cm
from codemode_trio.grpc import GrpcConnection, GrpcSession, GrpcStatusError


def test_importing_the_package_and_opening_stdio_needs_neither_h2_nor_protobuf() -> None:
    code = (
        "import sys, codemode_trio as cm; cm.open_host_process; cm.Connection; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('h2', 'google')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_grpc_names_are_exported_from_the_package() -> None:
    assert cm.GrpcConnection is GrpcConnection
    assert cm.GrpcSession is GrpcSession
    assert issubclass(cm.GrpcStatusError, cm.HostError)
    assert GrpcStatusError is cm.GrpcStatusError
    assert {"GrpcConnection", "GrpcSession", "GrpcStatusError", "open_grpc_connection"} <= set(
        cm.__all__
    )


def test_the_generated_module_matches_the_proto() -> None:
    out = subprocess.run(
        [sys.executable, "scripts/regen_grpc.py", "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
