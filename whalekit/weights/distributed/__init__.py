"""Training across ranks: data parallel, sharded (FSDP2) training and checkpoints, trainer ranks."""
