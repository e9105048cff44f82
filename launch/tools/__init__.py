"""Offline tools over finished or running run folders: ``mpirl report`` (figures and a Markdown
page), ``mpirl trace`` (a Perfetto timeline of the ranks' spans), ``mpirl advise`` (a split of
the ranks that shortens the step) and the restart log of ``mpirl run --restarts``.

They read what a job wrote (metrics, evals, spans, the saved role map); they start no job and
know nothing of MPI.
"""
