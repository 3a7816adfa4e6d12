"""The enqueue path: envelopes to the enqueue script, one call per chunk and node,
durable when asked (rank 4: above the job model, below the app)."""
