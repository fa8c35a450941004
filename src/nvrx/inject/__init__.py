"""`nvrx inject-loop`: fault-injection campaigns (pure core: pool, session replay; IO: run)."""
