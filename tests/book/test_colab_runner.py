"""colab/run_notebook.py, the kernel runner of `make colab-check`: its kernel start survives a port clash."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

RUNNER = pathlib.Path(__file__).resolve().parents[2] / "colab" / "run_notebook.py"


@pytest.fixture
def runner():
    pytest.importorskip("jupyter_client")
    spec = importlib.util.spec_from_file_location("run_notebook", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _failing_start(failures: int, calls: list):
    def start(**kwargs):
        calls.append(kwargs["cwd"])
        if len(calls) <= failures:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "manager", "client"

    return start


def test_a_kernel_that_dies_at_start_is_started_again(runner, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(runner, "start_new_kernel", _failing_start(runner.KERNEL_START_ATTEMPTS - 1, calls))
    assert runner.start_kernel("/chapter") == ("manager", "client")
    assert calls == ["/chapter"] * runner.KERNEL_START_ATTEMPTS
    assert "starting again" in capsys.readouterr().err


def test_the_kernel_start_gives_up_after_its_attempts(runner, monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "start_new_kernel", _failing_start(runner.KERNEL_START_ATTEMPTS, calls))
    with pytest.raises(RuntimeError, match="kernel_info"):
        runner.start_kernel("/chapter")
    assert len(calls) == runner.KERNEL_START_ATTEMPTS
