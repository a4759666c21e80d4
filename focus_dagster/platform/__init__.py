"""The wiring that knows Dagster: the `focus` command, the demo and its job runner, the UI, the instance under
FOCUS_HOME, pool reports, recovery from killed runs, `focus trace` and `focus export`, and the one door to
Dagster's private modules. The science stays in the core packages beside this one, which never import it.
"""
