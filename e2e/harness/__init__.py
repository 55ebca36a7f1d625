"""Helpers for the end-to-end tests: a small apiserver client, MPIJob manifests, waits, the operator."""
