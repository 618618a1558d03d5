"""Before a run exists or a sandbox starts: can this model be asked at all?

Three checks, in `cairn run`, `cairn resume` and for each line of a batch:
- litellm knows the model string (it can tell the provider), or it is a script that loads;
- the provider's key is in the environment (litellm says which variables a provider needs);
- the endpoint (`api_base`, or the provider's host) accepts a connection: TCP, and TLS for https.
None of them sends a chat request: a provider would bill it, and the scripted model would take it as
a turn. A failure is a UsageError, so the run is never made. The connection is opened while litellm
imports (when the endpoint is given), so the checks add little to a start that imports it anyway. For
`openai/NAME` with an endpoint given (a server of one's own), and for a model asked without litellm
whose facts an earlier start kept (llm/direct.py), the connection is the only check, and litellm is
not imported here at all: the run's start loads it while its container starts, if the model needs
it at all (client.LLM._direct).
"""

from __future__ import annotations

import socket
import ssl
import threading
import urllib.request
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from orchestrator.config import ModelConfig
from orchestrator.errors import UsageError
from orchestrator.llm.endpoint import is_openai_named
from orchestrator.llm.types import connect_hint
from orchestrator.llm.scripted import check_model, script_spec

if TYPE_CHECKING:
    from orchestrator.llm.openai_compat import Endpoint

# Providers whose credentials come from a chain (profiles, metadata servers, tokens), not one
# variable: their keys cannot be checked in the environment alone.
CREDENTIAL_CHAINS = {"bedrock", "bedrock_converse", "sagemaker", "sagemaker_chat", "vertex_ai", "vertex_ai_beta",
                     "azure", "azure_ai", "azure_text", "watsonx", "watsonx_text", "oci"}


def preflight(cfg: ModelConfig, key_elsewhere: bool = False) -> None:
    """Raise a UsageError that says what to fix, when `cfg`'s model cannot be asked. `key_elsewhere`:
    the key is an agent.json's apiKey, read again when the run starts (a resume)."""
    if script_spec(cfg.model) is not None:
        check_model(cfg.model)  # served on loopback by cairn itself: nothing to connect to yet
        return
    if cfg.api_base and is_openai_named(cfg.model):
        # A server of one's own (vLLM, llama.cpp, Ollama...): the provider is in the name and no key is
        # needed (_check_key), so the connection is all there is to check. litellm then loads later, while
        # the container starts, instead of before the run exists (bench/startup_bench.py).
        _Connection(cfg.api_base, cfg.connect_timeout, given=True).start().result()
        return
    direct = _direct_endpoint(cfg)
    if direct is not None:
        # A model asked without litellm (llm/direct.py), whose facts an earlier start kept: litellm knew
        # it then, and the key is there (direct.py asks for one), so the connection is what is left.
        _Connection(direct.base, cfg.connect_timeout, given=bool(cfg.api_base)).start().result()
        return
    early = _Connection(cfg.api_base, cfg.connect_timeout, given=True).start() if cfg.api_base else None
    from orchestrator.llm.client import litellm_module  # quiet (no banners), with its local price list
    from orchestrator.llm.endpoint import endpoint_of, provider_of

    litellm = litellm_module()

    try:
        provider = provider_of(cfg.model, cfg.api_base)
    except litellm.exceptions.BadRequestError:
        raise UsageError(
            f"litellm does not know the model {cfg.model!r}: it cannot tell the provider",
            hint=f"name the provider first: openai/{cfg.model} for an OpenAI-compatible server (with --api-base), "
                 "anthropic/…, gemini/…, ollama/… (https://docs.litellm.ai/docs/providers)") from None
    if cfg.api_key is None and not key_elsewhere:
        _check_key(cfg, provider)
    connection = early or _Connection(endpoint_of(cfg.model, cfg.api_base), cfg.connect_timeout,
                                       given=bool(cfg.api_base)).start()
    connection.result()


def _direct_endpoint(cfg: ModelConfig) -> "Endpoint | None":
    from orchestrator.llm.direct import direct_endpoint
    from orchestrator.llm.facts import cached_facts

    facts = cached_facts(cfg.model)
    return direct_endpoint(cfg, facts) if facts is not None else None


def _check_key(cfg: ModelConfig, provider: str) -> None:
    import litellm

    if provider in CREDENTIAL_CHAINS or (provider == "openai" and cfg.api_base):
        return  # a server of one's own may need no key: the client sends a placeholder (see client._request)
    found = litellm.validate_environment(model=cfg.model, api_base=cfg.api_base)
    # Some providers list their endpoint variable as "missing" (ollama); the endpoint is checked apart.
    missing = [k for k in found.get("missing_keys") or [] if not k.endswith(("_API_BASE", "_BASE_URL"))]
    if not missing:
        return
    raise UsageError(f"no {' or '.join(missing)} in the environment for {cfg.model}",
                     hint=f"export {missing[0]}=… (cairn reads it on this machine; the sandbox never sees it), "
                          "or give an agent.json with an apiKey")


class _Connection:
    """Opening a connection to an endpoint, in a thread so that it overlaps other start-up work."""

    def __init__(self, url: str | None, timeout: float, given: bool) -> None:
        self.url, self.timeout, self.given = url, timeout, given
        self.problem: str | None = None
        self.thread = threading.Thread(target=self._open, daemon=True, name="cairn-preflight")

    def start(self) -> "_Connection":
        if self.url is not None:  # an endpoint that cannot be told (a cloud region) is not checked
            self.thread.start()
        return self

    def result(self) -> None:
        if self.url is None:
            return
        self.thread.join()
        if self.problem is not None:
            raise UsageError(f"cannot connect to {self.url}: {self.problem}", hint=connect_hint(self.given))

    def _open(self) -> None:
        try:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                self.problem = "not an http:// or https:// URL"
                return
            port = parts.port or (443 if parts.scheme == "https" else 80)
            host, tls = parts.hostname, parts.scheme == "https"
        except ValueError as exc:  # a port that is not a number
            self.problem = str(exc)
            return
        proxy = _proxy_for(parts.scheme, host)
        try:
            if proxy is not None:  # httpx goes through it: then the proxy is what must answer
                with socket.create_connection(proxy, timeout=self.timeout):
                    return
            with socket.create_connection((host, port), timeout=self.timeout) as sock:
                if tls:
                    _handshake(sock, host, self.timeout)
        except ConnectionRefusedError:
            self.problem = "connection refused" + (f" by the proxy {proxy[0]}:{proxy[1]}" if proxy else "")
        except socket.gaierror:
            self.problem = f"unknown host {host}"
        except (socket.timeout, TimeoutError):
            self.problem = f"no connection within {self.timeout:g} s"
        except ssl.SSLError as exc:
            self.problem = f"TLS handshake failed ({exc.reason or exc})"
        except OSError as exc:
            self.problem = exc.strerror or str(exc)


def _handshake(sock: socket.socket, host: str, timeout: float) -> None:
    """A TLS handshake proves a TLS server listens. Certificates are httpx's business (its own CA
    bundle, the user's settings): judging them here could refuse an endpoint the request would reach."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    sock.settimeout(timeout)
    with context.wrap_socket(sock, server_hostname=host):
        pass


def _proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
