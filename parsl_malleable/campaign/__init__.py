"""Config-driven training campaigns: YAML models, runner, persisted state."""
