"""How a child runs what it claimed: sync (the native loop), asyncio, threads;
settling what did not succeed (rank 6: above the app)."""
