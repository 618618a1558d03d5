# cairn itself, in a container: the agent loop, talking to the host's Docker engine.
#
# Build:
#   docker build -t cairn .
#
# Run (the host's engine does the sandboxing, so give cairn its socket):
#   docker run --rm -it \
#     -v /var/run/docker.sock:/var/run/docker.sock \
#     -v "$HOME/.cairn/runs:$HOME/.cairn/runs" -e CAIRN_RUNS_DIR="$HOME/.cairn/runs" \
#     -e ANTHROPIC_API_KEY \
#     cairn run "your task" --model anthropic/claude-sonnet-4-5
#
# Why the runs directory is mounted AT THE SAME PATH: cairn bind-mounts a run's workspace into the
# sandbox, and the path it names is resolved by the host's engine, on the host, not in this container.
# Only when the directory has the same path on both sides does the sandbox see the files cairn sees.
#
# Notes:
# - Pass each provider key with -e NAME (no value: it is taken from your shell); keys stay on the host
#   side of the sandbox either way.
# - A model server on the host's loopback (vLLM, llama.cpp, Ollama at localhost) needs --network host.
# - The sandbox image is built on first use through the same socket. That needs Docker Hub
#   (python:3.12-slim); without it, build it once on the host instead (`cairn image build`, where the
#   host can fall back to debootstrap). Behind a TLS-inspecting proxy, also mount its CA certificates:
#   -v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro
# - Files in the runs directory are written as root unless you add
#   --user "$(id -u):$(id -g)" --group-add "$(stat -c %g /var/run/docker.sock)" -e HOME=/tmp
FROM python:3.12-slim

# git: GitPython runs it for the per-step checkpoints of the workspace.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

# Only what the package needs, so a local .venv or run output never lands in the image.
WORKDIR /opt/cairn
COPY pyproject.toml README.md ./
COPY orchestrator/ orchestrator/

# A plain install: the toolbox, the sandbox's Dockerfile and the templates are package data.
RUN pip install --no-cache-dir .

# litellm would otherwise fetch its model price list from the internet every time it is imported.
ENV LITELLM_LOCAL_MODEL_COST_MAP=True

ENTRYPOINT ["cairn"]
CMD ["--help"]
