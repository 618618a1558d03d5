"""cairn: a long-running agent whose memory is a filesystem, acting only inside a Docker sandbox."""

__version__ = "0.1.0"
