"""From settings to a driven run: the composition root (`compose.LiveRun`), the one drive sequence every
entry point uses (`drive`), a run's settings, a new run's directory and workspace, agent folders."""
