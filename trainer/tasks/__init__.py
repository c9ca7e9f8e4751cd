"""The built-in tasks, one module each, defining `TASK`: `task=classify` names trainer.tasks.classify.

What a task is, and how `task=` finds a built-in one or yours, is trainer.config.tasks. The modules import
torch inside their methods only: the submitter imports them (for the settings and the data check) and must
stay quick.
"""
