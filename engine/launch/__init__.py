"""Start the SGLang + KTransformers engine from an engine profile, sized to the host.

`python -m engine.launch --profile FILE [--dry-run]` reads a profile (config/engine/*.yaml),
probes the host (GPUs, CPU ISA, physical cores, NUMA nodes, RAM), builds the SGLang command line
and environment, checks the flag names against the installed SGLang, and execs it.
"""
