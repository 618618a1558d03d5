"""Settings of a run, as pydantic models.

A run's whole configuration is one `RunConfig`; it is stored in `state/run.json` so that `cairn resume`
uses the same model, endpoint, limits and sandbox as the run had, unless told otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Settings(BaseModel):
    """Base for every settings block: unknown keys are an error, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid")


class SandboxConfig(Settings):
    """The Docker sandbox. Defaults are the hardened ones; loosen them on purpose only."""

    image: str | None = Field(None, description="Image to run; None means the image built from sandbox_image/.")
    network: Literal["none", "bridge"] = "none"
    memory: str = Field("2g", description="Memory limit; swap is set equal to it, so there is no swap.")
    cpus: float = Field(2.0, gt=0)
    pids_limit: int = Field(256, ge=16)
    tmp_size: str = Field("512m", description="Size of the writable tmpfs at /tmp.")
    home_size: str = Field("512m", description="Size of the writable tmpfs home of the sandbox user.")
    env: dict[str, str] = Field(default_factory=dict, description="Variables set in the container.")
    pass_env: list[str] = Field(
        default_factory=list, description="Names of host variables passed into the container. None by default."
    )
    command_timeout: float = Field(120.0, gt=0, description="Default timeout of one shell command, in seconds.")
    max_command_timeout: float = Field(3600.0, gt=0)
    inline_output_bytes: int = Field(
        256 * 1024, ge=1024, description="Output above this stays in a file under .cairn/obs/, not in memory."
    )
    max_output_file_bytes: int = Field(
        200 * 1024 * 1024, ge=1024, description="Output past this is counted but not kept (the source cap)."
    )
    start_timeout: float = Field(30.0, gt=0)


class ModelConfig(Settings):
    model: str = Field("scripted:demo", description="A litellm model string, or scripted:PATH.")
    api_base: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    context_window: int | None = Field(None, ge=1024, description="Override of litellm's input window.")
    max_retries: int = Field(6, ge=0)
    request_timeout: float = Field(600.0, gt=0)
    retry_base_seconds: float = Field(1.0, ge=0, description="First back-off wait; it doubles on each retry.")


class LimitsConfig(Settings):
    max_steps: int | None = Field(100, ge=1)
    max_cost: float | None = Field(None, ge=0, description="USD.")
    max_tokens: int | None = Field(None, ge=1, description="Prompt plus completion tokens over the run.")
    max_wall_seconds: float | None = Field(None, gt=0)


class ContextConfig(Settings):
    offload_tokens: int = Field(2000, ge=64, description="A tool result above this goes to .cairn/obs/.")
    preview_lines: int = Field(20, ge=1, description="Lines of head and of tail kept in an offload preview.")
    high_water: float = Field(0.75, gt=0, lt=1)
    low_water: float = Field(0.40, gt=0, lt=1)
    keep_recent_results: int = Field(6, ge=0, description="Tool results never turned into pointers.")
    preview_chars: int = Field(
        3000, ge=200, description="Characters of head and of tail kept in a preview: one huge line cannot blow it up."
    )
    keep_recent_turns: int = Field(4, ge=1, description="Most recent turns a written summary never replaces.")
    summary_tokens: int = Field(2000, ge=100, description="Room kept for a written summary when choosing its span.")
    loop_window: int = Field(12, ge=4)

    @field_validator("low_water")
    @classmethod
    def _low_below_high(cls, low: float, info) -> float:  # noqa: ANN001 - pydantic's ValidationInfo
        high = info.data.get("high_water", 0.75)
        if low >= high:
            raise ValueError(f"low_water ({low}) must be below high_water ({high})")
        return low


class RunConfig(Settings):
    model: ModelConfig = Field(default_factory=ModelConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    template: str = "default"
    system_prompt_extra: str = ""


def default_runs_dir() -> Path:
    """`$CAIRN_RUNS_DIR`, else `~/.cairn/runs` (CONTRACTS.md)."""
    return Path(os.environ.get("CAIRN_RUNS_DIR") or Path.home() / ".cairn" / "runs")
