"""The agent loop: the runner, how a run ends, a model call's span, the context-window budget."""
