"""What the tool's own processes run in-process: each task of a training job (task.run), each task of
`python -m jobs.check` (preflight.run), and `python -m trainer` (command.main).

Torch-free, every module, when imported: torch is imported inside the functions that train or check.
"""
