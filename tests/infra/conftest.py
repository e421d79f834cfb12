"""One synthesis of the stack for the whole infra test session (see `synthesis`).

Importing `synthesis` also puts `infra/` on the import path, for every module here.
"""

from __future__ import annotations

import pytest

from tests.infra.synthesis import Synthesized, synthesize


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack under `-c cronledger:profile=lean`."""
    return synthesize(tmp_path_factory.mktemp("cdk.out-lean"), "lean")


@pytest.fixture(scope="session")
def lean_nat(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack under `-c cronledger:profile=lean-nat`."""
    return synthesize(tmp_path_factory.mktemp("cdk.out-lean-nat"), "lean-nat")


@pytest.fixture(scope="session")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack under `-c cronledger:profile=ha`."""
    return synthesize(tmp_path_factory.mktemp("cdk.out-ha"), "ha")
