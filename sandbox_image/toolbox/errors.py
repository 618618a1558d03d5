"""The two ways a request can fail: one the model can act on, and the host going away."""

from __future__ import annotations


class ToolError(Exception):
    """A failed request the model can act on: becomes {"ok": false, "error": <one line>}."""


class HostGone(BaseException):
    """The host went away while a command ran, and the command was killed. Carries its output so far
    (a capture.Capture).

    A BaseException, so that no handler of failed ops takes it for one: it ends the toolbox."""

    def __init__(self, capture: object) -> None:
        super().__init__("the host went away")
        self.capture = capture
