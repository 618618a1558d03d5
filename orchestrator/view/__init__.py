"""The run's view: the one read model of a run that every face reads (status, step, what it waits for,
result, parent, the command running now and its output so far), folded from the event log (`fold`) and
the run's lock (`read`)."""
