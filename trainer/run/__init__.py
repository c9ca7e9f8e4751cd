"""The run directory and every record in it: its file names (rundir), files written whole or not at all
(atomic), its folder, name and run-root rules (prepare), the first failure of its ranks (failures), where it
came from (provenance), where start-up time went (startup), the goodput ledger (ledger), this machine's
processes (procfs), and checkpoint file names (checkpoint_names).

Torch-free, every module, and of trainer/ it imports errors alone: the one format the submitter's commands
and the job's processes both read and write.
"""
