"""cairn's version, the one place it is written: pyproject.toml reads it (setuptools' dynamic version),
`cairn --version` prints it and the sandbox image carries it (its `org.cairn.version` label)."""

__version__ = "0.1.0"
