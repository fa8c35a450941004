"""`nvrx score`: judge attribution against ground truth (pure core: model, evidence, rules,
prompt, vote, report; IO: load, cache, llm, run)."""
