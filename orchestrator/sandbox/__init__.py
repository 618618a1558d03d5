"""The sandbox: the agent's computer, behind the `Sandbox` port (orchestrator/ports.py).

Each backend has a folder of its own, and none imports another:

- `docker/`: cairn's own, a hardened container per run (the only package that imports docker);
- `harbor/`: the task's container of a Harbor trial, reached through Harbor's environment interface;
- `local/`: a folder of this machine, for tests and trusted models (no wall).

What they share is here, free of any backend: one toolbox op's defaults, timeout and result (`calls`),
the toolbox's code and the command that starts it (`toolbox_files`), the Python carried into an image
that has none (`carried`), and the backends by name (`backends`). A new backend (a cloud sandbox, a
remote machine) is one new folder with a class that has the port's methods, and one line in `backends`.
"""
