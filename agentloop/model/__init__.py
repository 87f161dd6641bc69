"""The facts of a model call: its speed model, timing formulas, token counts, prices, local servers."""
