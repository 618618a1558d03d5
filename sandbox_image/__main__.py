"""The toolbox's entry when the folder that holds it (or a zipapp of it) is run: `python3 /opt/cairn ...`."""

from toolbox.channel import not_dumpable

not_dumpable()  # first of all, before the rest is even imported: see toolbox/channel.py

from toolbox.server import main  # noqa: E402

main()
