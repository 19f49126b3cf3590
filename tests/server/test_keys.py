"""The embedded key file (docs/architecture.md section 12: ./var/jwt.key, mode 0600, created on first
start): workers that start at the same instant all read the same, whole key."""

from __future__ import annotations

import os
from pathlib import Path

from hongbao.server.auth import embedded_secret

PROCESSES = 16


def test_workers_creating_the_key_at_once_all_read_the_same_key(tmp_path: Path) -> None:
    """16 forked processes call embedded_secret on a fresh directory together: one 64-hex-digit
    key, the same for all (none reads a file still being written), mode 0600."""
    for round_ in range(20):
        data_dir = tmp_path / f"var{round_}"
        read_fd, write_fd = os.pipe()
        gate_r, gate_w = os.pipe()
        children = []
        for _ in range(PROCESSES):
            pid = os.fork()
            if pid == 0:
                os.read(gate_r, 1)  # every child starts at once
                os.write(write_fd, (embedded_secret(data_dir) + "\n").encode())
                os._exit(0)
            children.append(pid)
        os.write(gate_w, b"x" * PROCESSES)
        for pid in children:
            assert os.waitpid(pid, 0)[1] == 0
        os.close(write_fd)
        keys = os.read(read_fd, 1 << 16).decode().splitlines()
        assert len(keys) == PROCESSES and len(set(keys)) == 1 and len(keys[0]) == 64, (round_, set(keys))
        assert (data_dir / "jwt.key").stat().st_mode & 0o777 == 0o600
