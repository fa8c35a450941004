"""`nvrx submit-chain`: singleton job-array chains (pure core: shape, script; IO: submit)."""
