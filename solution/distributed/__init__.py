"""How ranks run together: the strategy plan (from --deepspeed, accelerate's YAML or --strategy), the
Strategy that builds the engine and checks it is the one asked for, process start-up and shutdown,
the hang watchdog and free ports.

Separate because it is the only stage that imports accelerate or deepspeed.
"""
