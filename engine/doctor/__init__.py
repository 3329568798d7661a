"""Preflight a host for the engine: `python -m engine.doctor [--profile FILE] [--model-dir DIR]`.

Prints a table (GPU, compute capability, driver and CUDA, CPU ISA, physical cores, NUMA, RAM,
/dev/shm, disk, the model directory, the prefix-cache pool, whether the profile fits); every
failure says what to do. Exits 1 when anything failed, including when there is no GPU.
"""
