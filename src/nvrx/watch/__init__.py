"""`nvrx watch`: the out-of-job chain watcher (pure core: model, cycles, detectors; IO: observe,
run, sinks, state, output)."""
