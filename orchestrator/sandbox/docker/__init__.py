"""cairn's own sandbox backend, on Docker: a hardened container per run (`sandbox.DockerSandbox`).

By job: the container's profile (`profile`) and its life, kept and started again (`container`); the
toolbox in it (`toolbox_client`) and exec streams for MCP servers (`exec_stream`); the engine
(`engine`); the image and images derived from it (`image`, `derived`, `image_tar`); the copy-out of
`--workdir` (`workdir`); the volume that carries a Python (`python_volume`); files given back to their
owner (`ownership`); a run's machine carried between hosts (`machine`); `cairn shell` (`shell`).
"""
