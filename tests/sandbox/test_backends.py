"""The sandbox backends as the composition root finds them (orchestrator/sandbox/backends.py): every one
registered has the `Sandbox` port's methods, and asking for the local one loads no docker."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from orchestrator.ports import Sandbox
from orchestrator.sandbox.backends import BACKENDS, backend

PORT_METHODS = sorted(name for name, member in vars(Sandbox).items() if not name.startswith("_")
                      and (inspect.isfunction(member) or isinstance(member, property)))


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_backend_has_every_method_of_the_port(name: str) -> None:
    cls = backend(name)
    assert [method for method in PORT_METHODS if not hasattr(cls, method)] == []
    call = inspect.signature(cls.call)
    assert "journal_key" in call.parameters  # the tool call an op carries out is journaled under it


def test_an_unknown_backend_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        backend("cloud")


def test_asking_for_the_local_backend_loads_no_docker() -> None:
    probe = ("import sys; from orchestrator.sandbox.backends import backend; backend('local'); "
             "print('docker' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
