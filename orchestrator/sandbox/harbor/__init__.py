"""The sandbox backend over a Harbor environment (`sandbox.HarborSandbox`): the task's own container,
reached only through Harbor's environment interface, with the toolbox kept alive by a relay (`relay`,
uploaded into the container, never imported here). Nothing here imports Harbor or docker."""
