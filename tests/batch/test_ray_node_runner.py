"""The node's side of `cairn batch --ray` that needs no cluster: the runner's warm-up (batch/ray_node.py)."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'cairn-agent[ray]'")

from orchestrator.batch.ray_node import Background  # noqa: E402


def test_runs_wait_for_the_engine_part_of_the_warm_up_not_for_the_model_library():
    library_loaded = threading.Event()

    def warm(default_image: bool, say) -> None:
        say(None)  # the engine answered and the image is there
        library_loaded.wait(30)  # the model library, still loading

    warm_up = Background(warm, True)
    assert warm_up.result() is None
    assert not library_loaded.is_set()
    library_loaded.set()


def test_why_a_node_cannot_run_sandboxes_is_what_each_run_is_told():
    warm_up = Background(lambda default_image, say: say("no Docker engine answers"), True)
    assert warm_up.result() == "no Docker engine answers"


def test_a_warm_up_that_fails_before_it_says_anything_is_each_runs_error_not_a_wait_for_ever():
    def warm(default_image: bool, say) -> None:
        raise OSError("the disk is full")

    assert Background(warm, True).result() == "the runner's warm-up failed: OSError: the disk is full"


class FakeHub:
    """The Hub's `progress` method as a Ray actor handle offers it: calls are recorded."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.progress = self

    def remote(self, reports: dict) -> None:
        self.calls.append(reports)


def test_a_nodes_runs_report_their_progress_together_the_latest_of_each_in_one_call():
    from orchestrator.batch.ray_node import REPORT_S, Reporter

    hub = FakeHub()
    reporter = Reporter(hub)
    reporter.put("run-a", {"status": "running: shell_exec", "step": 1})
    reporter.put("run-b", {"status": "running", "step": 3})
    reporter.put("run-a", {"status": "running", "step": 2})
    deadline = time.monotonic() + 10
    while not hub.calls and time.monotonic() < deadline:
        time.sleep(REPORT_S / 5)
    time.sleep(REPORT_S / 5)
    assert hub.calls[0] == {"run-a": {"status": "running", "step": 2}, "run-b": {"status": "running", "step": 3}}
