"""Submitting from another machine (a laptop) to a cluster's login node over SSH, and following the runs there:
`ssh` (the connection), `agent` (what runs on the login node), `sync` (the code snapshot, sent incrementally),
`submit`, `runs` (the laptop's record of a remote run), `follow` (status, logs, wait, fetch over SSH)."""
