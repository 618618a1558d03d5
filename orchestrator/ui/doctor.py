"""`cairn doctor`: is this machine ready for a run, and if not, what to do.

Each check answers on its own, so one missing piece (no engine) does not hide the state of the others.
litellm is imported only inside the model check: importing it takes seconds, and the doctor must still
answer where litellm is broken or missing.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import ModelConfig, default_runs_dir
from orchestrator.errors import SandboxError, UsageError
from orchestrator.sandbox.docker.engine import Engine, connect, describe, has_image
from orchestrator.sandbox.docker.image import image_tag

MIN_FREE_BYTES = 2 * 1024**3
MIN_PYTHON = (3, 11)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def run_checks(model_cfg: ModelConfig | None = None, model_error: UsageError | None = None) -> list[Check]:
    """Every check, in the order a person fixes them: engine, image, disk, Python, model. `model_cfg`: the
    model `cairn run` would use (with the same options); `model_error`: why there is none."""
    engine, client = _check_engine()
    return [
        engine,
        _check_image(client),
        _check_disk(default_runs_dir()),
        _check_python(),
        _check_model(model_cfg) if model_cfg is not None else
        Check("model", False, (model_error.message if model_error else "no model given").split(":")[0],
              "pass --model M (a litellm model string, or scripted:PATH), or set CAIRN_MODEL"),
    ]


def _check_engine() -> tuple[Check, Engine | None]:
    try:
        client = connect(timeout=10)
    except SandboxError as exc:
        return Check("docker engine", False, exc.message, exc.hint or ""), None
    return Check("docker engine", True, describe(client)), client


def _check_image(client: Engine | None) -> Check:
    try:
        tag = image_tag()
    except SandboxError as exc:
        return Check("sandbox image", False, exc.message, "reinstall cairn: its sandbox_image/ is incomplete")
    if client is None:
        return Check("sandbox image", False, f"{tag}: no engine to look in", "start the engine first")
    if not has_image(client, tag):
        return Check("sandbox image", False, f"{tag} is not built yet", "run cairn image build")
    return Check("sandbox image", True, tag)


def _check_disk(runs_dir: Path) -> Check:
    # The runs directory may not exist before the first run; its nearest existing parent is on the
    # same file system in all but unusual set-ups.
    place = runs_dir
    while not place.exists() and place != place.parent:
        place = place.parent
    free = shutil.disk_usage(place).free
    detail = f"{free / 1024**3:.1f} GiB free for {runs_dir}"
    if free < MIN_FREE_BYTES:
        return Check("free disk", False, detail + " (under 2 GiB)", "free some space, or set CAIRN_RUNS_DIR elsewhere")
    return Check("free disk", True, detail)


def _check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < MIN_PYTHON:
        return Check("python", False, f"Python {version}", "use Python 3.11 or newer")
    return Check("python", True, f"Python {version} at {sys.executable}")


def _check_model(cfg: ModelConfig) -> Check:
    from orchestrator.llm.scripted import check_model

    name = f"model {cfg.model}"
    if cfg.model.startswith("scripted:"):
        try:
            check_model(cfg.model)
        except UsageError as exc:
            return Check(name, False, exc.message, exc.hint or "give the path of a script file")
        return Check(name, True, "scripted model: needs no key")
    if cfg.api_base:
        return _check_endpoint(cfg, name)
    # Without this litellm downloads its price list at import, which hangs where there is no internet.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:
        return Check(
            name, False, "litellm is not installed, so no model can be called", "pip install -e . (in cairn's venv)"
        )
    litellm.suppress_debug_info = True  # else an unknown provider prints a banner on stdout
    found = litellm.validate_environment(model=cfg.model)
    if found.get("keys_in_environment"):
        return Check(name, True, "provider key found in the environment")
    missing = found.get("missing_keys") or ["the provider's API key"]
    fix = f"export {missing[0]}=<your key>" if len(missing) == 1 else f"export one of {', '.join(missing)}"
    return Check(name, False, f"not set: {', '.join(missing)}", fix)


ENDPOINT_TIMEOUT_S = 3.0  # the doctor's question to an endpoint: short, a person waits for the answer


def _check_endpoint(cfg: ModelConfig, name: str) -> Check:
    """A server of one's own (vLLM, llama.cpp, Ollama): reached (nothing listening is no "ok"), asked
    which models it serves (GET /models), and the model named as requests would name it. A local server
    usually takes any key or none, so none is asked for."""
    from orchestrator.llm.preflight import preflight

    short = cfg.model_copy(update={"connect_timeout": min(cfg.connect_timeout, ENDPOINT_TIMEOUT_S)})
    try:
        preflight(short)
    except UsageError as exc:
        return Check(name, False, exc.message, exc.hint or f"start the server at {cfg.api_base}, or give another --api-base")
    asked = cfg.model.split("/", 1)[1] if "/" in cfg.model else cfg.model
    served, problem = _served_models(cfg.api_base)
    if served is None:
        return Check(name, True, f"{cfg.api_base} answers; it did not list its models ({problem}); requests "
                                 f"will ask for {asked!r}")
    listed = ", ".join(served[:8]) + (f" and {len(served) - 8} more" if len(served) > 8 else "")
    if served and asked not in served:  # llama.cpp answers to any name; vLLM refuses another: said, not failed
        return Check(name, True, f"{cfg.api_base} answers; requests ask for {asked!r}, which it does not list "
                                 f"(it lists {listed}: --model openai/{served[0]} names the first)")
    return Check(name, True, f"{cfg.api_base} answers and serves {asked!r}" + (f" (of {listed})" if len(served) > 1 else ""))


def _served_models(api_base: str) -> tuple[list[str] | None, str]:
    """The model ids the server lists at GET {api_base}/models, or None and why not."""
    import json
    import urllib.error
    import urllib.request

    url = api_base.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"} if os.environ.get("OPENAI_API_KEY") else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=ENDPOINT_TIMEOUT_S) as r:
            body = json.loads(r.read(1 << 20))
    except urllib.error.HTTPError as exc:
        return None, f"HTTP {exc.code} from {url}"
    except (OSError, ValueError) as exc:
        return None, f"{url}: {getattr(exc, 'reason', None) or exc}"
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None, f"{url} gave no list of models"
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), (str, int))], ""
