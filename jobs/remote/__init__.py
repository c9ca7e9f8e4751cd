"""Submitting from another machine (a laptop) to a cluster's login node over SSH: `ssh` (the connection),
`agent` (what runs on the login node), `sync` (the code snapshot, sent incrementally), `runs` (the laptop's record
of a remote run). Submitting and following over SSH are operations: jobs.ops.remote_submit, jobs.ops.follow."""
