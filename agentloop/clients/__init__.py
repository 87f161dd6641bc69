"""Model clients behind the ``ModelClient`` seam: the OpenAI SDK adapter, scripted, replay.

Nothing is imported here so that importing one client never pulls in another's dependencies
(the scripted client must not import ``openai``): import from the submodule you need.
"""
