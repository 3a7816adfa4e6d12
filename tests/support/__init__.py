"""What the tests share that is not a fixture (the fixtures live in ``conftest.py``
files), one module a topic:

- ``processes``: the repository root, ``fastq`` run as a user runs it (a subprocess
  with the test server's URL);
- ``workers``: in-process burst workers that drain queues;
- ``keys``: what a test's namespace holds in Redis;
- ``cluster``: where a queue lives on a real Redis Cluster;
- ``pool``: ``fastq pool`` subprocesses for the fault tests, killing their children,
  waiting, the record of runs;
- ``serve``: ``fastq serve`` subprocesses on free ports, and clients with their token;
- ``http``: ``fastq serve``'s app in a thread of the test (uvicorn), over the test's
  own App (the HTTP workers' tests);
- ``dashboard``: the dashboard's browser tests: a pool of ``tests.apps.dash_jobs``,
  the system Chromium's settings, logging in, screenshots, a path-prefix proxy;
- ``bench``: running a benchmark of ``bench/`` for its smoke test.
"""
