"""Fault tests share one server per mode: each start costs ~30 s of CPU on the tiny model.

The storm and fuzz tests borrow a shared server (:meth:`ServerPool.get`); the SIGTERM test takes
it for good (:meth:`ServerPool.take`), so it runs last (files run in name order: ``test_sigterm``
comes after the others). The engine-kill test starts servers of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxima_bench.serving.server import Server
from tests.faults.harness import require_vllm_and_model, start_server


class ServerPool:
    """Servers by mode, started on first use and stopped when the package's tests end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._servers: dict[str, Server] = {}
        self._taken: list[Server] = []

    def get(self, mode: str) -> Server:
        """The shared server of ``mode`` (started if needed); it must stay up."""
        server = self._servers.get(mode)
        if server is None or not server.alive():
            server = self._servers[mode] = start_server(mode, self.log_dir)
        return server

    def take(self, mode: str) -> Server:
        """The server of ``mode``, which the caller may kill; later ``get`` starts a new one."""
        server = self.get(mode)
        del self._servers[mode]
        self._taken.append(server)
        return server

    def close(self) -> None:
        for server in [*self._servers.values(), *self._taken]:
            server.stop()
        self._servers.clear()
        self._taken.clear()


@pytest.fixture(scope="package")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    why = require_vllm_and_model()
    if why:
        pytest.skip(why)
    pool = ServerPool(tmp_path_factory.mktemp("fault-servers"))
    try:
        yield pool
    finally:
        pool.close()
