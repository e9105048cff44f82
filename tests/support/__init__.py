"""Helpers the tests share: MPI jobs in a subprocess, model folders, the plug-ins that the
tests' role maps name, run records. Nothing here is a test."""
