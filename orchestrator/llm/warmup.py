"""The model library loaded in a thread from the moment a command knows its model.

A start through litellm spends most of its time importing it (2-3 s of CPU) and what its first
request imports (about 0.5 s). The run's start overlaps that with the container's start (runs/compose.py),
but before the container starts cairn also resolves settings, checks the model, makes the run's
directory and its first checkpoint and looks the image up, waiting on files, git and the engine.
`begin` starts the import then, so those waits are spent importing; the run's start (runs/compose.py)
waits for it before `LLM.preload`, which then finds its work done.

Both threads are Python, so they share one interpreter lock: the import does not run beside cairn's
own CPU work, only beside its waits. A thread that waits gets the lock back only after the
interpreter's switch interval (5 ms), once per wait, which would make every file cairn's own thread
reads 5 ms slower while the import runs; the interval is shortened to 0.5 ms for that time.
"""

from __future__ import annotations

import sys
import threading

from orchestrator.config import ModelConfig

SWITCH_INTERVAL = 0.0005  # seconds: how soon a thread back from a wait gets the interpreter again

_lock = threading.Lock()
_thread: threading.Thread | None = None


def begin(cfg: ModelConfig) -> None:
    """Start loading what `cfg`'s model needs, in a thread, unless it goes without litellm."""
    global _thread
    with _lock:
        if _thread is not None or not needs_litellm(cfg):
            return
        _thread = threading.Thread(target=_load, args=(cfg,), name="cairn-model-library", daemon=True)
        _thread.start()


def loading() -> bool:
    """Whether the load `begin` started is still going on."""
    thread = _thread
    return thread is not None and thread.is_alive()


def wait() -> None:
    """Wait until the load `begin` started (if any) has ended."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def needs_litellm(cfg: ModelConfig) -> bool:
    """Whether requests for `cfg` go through litellm (or its facts about the model must be asked first).
    Reads the facts cache only: it never imports litellm itself."""
    from orchestrator.llm.direct import direct_endpoint
    from orchestrator.llm.facts import cached_facts
    from orchestrator.llm.scripted import script_spec

    if script_spec(cfg.model) is not None:
        return True  # docs/contracts.md: the scripted model is reached through litellm
    facts = cached_facts(cfg.model)
    return facts is None or direct_endpoint(cfg, facts) is None


def _load(cfg: ModelConfig) -> None:
    from orchestrator.llm.client import LLM

    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL))
    try:
        LLM(cfg).preload()
    except Exception:  # noqa: BLE001 - the run's own preload does the same work again and reports it
        pass
    finally:
        sys.setswitchinterval(before)
