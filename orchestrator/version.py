"""cairn's version, in one place: the package's metadata (pyproject.toml), `cairn --version`, the image's
label and the trajectories' agent version all read it from here."""

__version__ = "0.1.0"
