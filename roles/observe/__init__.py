"""Seeing a run: the controller's record of it, its dashboards and its progress display.

- ``run_log``: metrics.jsonl, eval.jsonl and samples.jsonl, fanned out to the rest;
- ``step_record``: a step's line from the notices about it, and summary.json's figures;
- ``metric_names``: the grouped names (``reward/mean``, ``train/loss``, ...) dashboards use;
- ``backends``: TensorBoard and W&B (``logging:`` in the role map);
- ``samples``: which generations of a step are shown;
- ``progress``: the bar on a terminal, plain lines in a log file.

Only the controller writes; the reward ranks pick and decode the shown generations. It knows
nothing of how metrics are computed or messages sent: it is handed values and records them.
"""
