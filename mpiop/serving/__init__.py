"""The status endpoint's HTTPS servers and what they answer, apart from the reconcile machinery.

`status_endpoint` (the jobs' progress posts, with `token_reviews` saying whose a token is), `layout_webhook` (the
GPU layout at a job's admission) and `status_ca` (the CA and serving certificate of that server's port). They write
nothing of a job's life but its trainerStatus: the reconciler decides the rest. `mpiop.status_serving` serves them
for `mpiop run`; `mpiop.server` runs the HTTP servers themselves (limits, probes, /metrics).
"""
