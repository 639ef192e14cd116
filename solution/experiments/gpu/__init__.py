"""The GPU check's code: `scripts/gpu_check.py` (and `scripts/gpu_speed.py`, its `speed` part) are its commands.

    options          the defaults that --dry-run shrinks, the checks made before anything runs
    versions         the versions here against the supported ranges (--check-versions)
    commands         the commands a part launches: the trainer under its memory probe, predict
    recipe           the nq-profile recipe's commands, its projection and the pages fitted to the budget
    recipe_figures   the recipe's micro-F1 with intervals beside word matching's (--recipe-figures)
    speed            the speed part's runs, figures and goals; speed_infer its inference run
    plan             the parts of --parts as (name, kind, command, needs), in the order they run
    running          each command in its process group within the budget, the JSON rewritten as each ends
    figures          a finished run's figures: throughput, MFU, memory, windows/s against the kernel's projection
    report           the table printed at the end

The module docstring of `scripts/gpu_check.py` says what each part measures and how the budget is spent.
"""
