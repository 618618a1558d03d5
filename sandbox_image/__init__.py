"""The half of cairn that runs inside the sandbox: the image's Dockerfile, the toolbox (a standard-library
package, `toolbox/`, run by `__main__.py`) and its protocol (PROTOCOL.md). Shipped in the wheel as
`orchestrator.sandbox_image` (pyproject.toml maps it), read with importlib.resources."""
