"""What Redis holds and the only ways to change or read it: keys, shards, the Lua
scripts (``lua/``) and their declared contracts, queue settings, the read side
(rank 2: above the connection)."""
