"""What Redis holds and the calls that change or read it: key names (``keys``, the
only module that builds one), shards, the Lua scripts (``lua/``) and their declared
contracts, queue settings, outcomes, batches, chains, cancels and revivals, the
worker registry (``workers``), the markers of lost data, and the read side that the
operator's methods, the CLI and the dashboard read through (``introspect``,
``listing``, ``history``, ``records``, ``results``). Functions over a client, and no
thread: what polls or announces runs in the process that needs it (``monitor/``,
``worker/``, ``pool/``). Rank 2: above the connection."""
