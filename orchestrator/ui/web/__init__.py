"""`cairn serve`: a local web page to watch and steer runs.

- server.py   binds the socket, makes the access token, prints the URL, runs uvicorn until Ctrl-C;
- app.py      the Starlette app: its routes, each a thin layer over cairn's own operations;
- guard.py    what keeps it safe: the token (then an HttpOnly cookie), the origin check of every
              state-changing request, the Content-Security-Policy and the other headers;
- feed.py     the event log as the page reads it: items, streamed as server-sent events, and beside
              them the running call's output as it comes;
- views.py    the runs list, a run's summary, files (never outside the run), diffs and charts;
- actions.py  say, stop, approve/deny, resume and a new run, the last three in a background process,
              and what Send does on a run (say, or resume it with the message);
- static/     the pages, their script and style (plain files: nothing is built).

Importing this package imports nothing heavy: the command (cli/serving.py) imports server.py only when
it runs, and no module here imports litellm or docker.
"""
