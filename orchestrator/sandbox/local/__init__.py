"""The sandbox backend over a folder of this machine (`sandbox.LocalSandbox`): the toolbox's own code run in
this process, for tests and models one trusts. No wall: read its module's docstring."""
