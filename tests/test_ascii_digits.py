"""Numbers read from text take ASCII digits only: ``"²".isdigit()`` is true, ``int("²")`` fails.

Every place that checks ``isdigit()`` before ``int()`` must refuse such a digit with its own
error (or ignore it), never let the ``ValueError`` of ``int()`` escape as a crash.
"""

from __future__ import annotations

import pytest

from codemode_trio.conformance.targets import HostTarget
from codemode_trio.errors import UsageError
from codemode_trio.faults import parse_faults
from codemode_trio.host.admission import check_options
from codemode_trio.host.listen import ListenError, parse_listen
from codemode_trio.reconnect import split_cell_id

SUPERSCRIPT_TWO = "\u00b2"
assert SUPERSCRIPT_TWO.isdigit()


def test_a_listen_port_of_other_digits_is_a_listen_error() -> None:
    with pytest.raises(ListenError, match="unsupported --listen URL"):
        parse_listen(f"tcp://127.0.0.1:8{SUPERSCRIPT_TWO}")


def test_an_allowed_host_with_other_digits_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        check_options(
            "ws",
            loopback=True,
            allow_remote=False,
            no_token=False,
            allow_hosts=[f"example.com:{SUPERSCRIPT_TWO}"],
        )


def test_a_conformance_target_port_of_other_digits_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="expected tcp://HOST:PORT"):
        HostTarget.parse(f"tcp://127.0.0.1:{SUPERSCRIPT_TWO}")


def test_a_fault_count_of_other_digits_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="expected a count"):
        parse_faults(f"slow={SUPERSCRIPT_TWO}")


def test_a_cell_id_with_other_digits_is_a_first_generation_id() -> None:
    assert split_cell_id(f"g{SUPERSCRIPT_TWO}:7") == (1, f"g{SUPERSCRIPT_TWO}:7")
    assert split_cell_id("g2:7") == (2, "7")
