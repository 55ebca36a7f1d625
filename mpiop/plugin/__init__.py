"""`kubectl mpijob`: a kubectl plugin (the `kubectl-mpijob` executable) that answers from the user's kubeconfig and
RBAC, with no operator endpoint: a job's status, its attempts, any rank's log (a past attempt's from its
ConfigMap), and exec into a rank's pod. The pure parts (hostfile, tables, views) are tested on their own."""
