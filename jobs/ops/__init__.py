"""The operations the commands (jobs/*.py, one module per command) call: preparing a run (`prepare`; a --resume's
checks and code: `resume`), putting it on its target (`launch`: Slurm or local processes; `remote_submit` and
`follow`: a cluster over SSH), a run's state (`state`, `listing`), the live view and its actions (`live`, `act`),
the preflight check (`preflight`) and the picture (`drawing`). No module here imports a command."""
