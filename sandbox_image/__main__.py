"""The toolbox's entry when the folder that holds it (or a zipapp of it) is run: `python3 /opt/cairn ...`."""

from toolbox.server import main

main()
