"""A service user must be able to enter every folder above its data (infra.system)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from infra.errors import InfraError
from infra.system import ensure_reachable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changes owners: needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_own_closed_folder_is_opened_for_entering_only(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"  # as `mktemp -d` makes it: 0700, the caller's
    data = checkout / ".local" / "elasticsearch"
    data.mkdir(parents=True)
    checkout.chmod(0o700)
    ensure_reachable("nobody", data)
    assert _mode(checkout) == 0o701  # enter, not list


def test_a_closed_folder_of_another_owner_is_an_error_that_names_the_fix(tmp_path: Path) -> None:
    other = tmp_path / "theirs"
    data = other / "data"
    data.mkdir(parents=True)
    daemon = pwd.getpwnam("daemon")
    os.chown(other, daemon.pw_uid, daemon.pw_gid)
    other.chmod(0o700)
    with pytest.raises(InfraError, match=f"cannot enter {other}.*chmod o\\+x {other}"):
        ensure_reachable("nobody", data)
    assert _mode(other) == 0o700  # left as it was
