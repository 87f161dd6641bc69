"""The task files shipped with agentloop (installed as the package ``agentloop_tasks``).

Only data lives here: task YAML files and their workspaces, one group per folder
(``incident/``, ``webfix/`` ...). ``agentloop.config.shipped`` finds them by name.
"""
