"""Deciding before the first token: thinking-policy rules and presets, adaptive thinking
budgets, and the runaway memory of prompt fingerprints (all pure)."""
