"""The campaign model that `inject` runs and `score` reads: fault types, experiments, pools,
and the session on disk (its journal is the truth)."""
