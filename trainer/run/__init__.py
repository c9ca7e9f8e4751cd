"""The run directory and every record in it: its file names (rundir), files written whole or not at all
(atomic), the run's set-up at submit (prepare), the first failure of its ranks (failures), where it came from (provenance), where start-up time went (startup), and
checkpoint file names (checkpoint_names).

Torch-free, every module: jobs.submit, jobs.status and the other commands read run directories with it.
"""
