"""Rolling out episodes: the batched multi-turn engine, the rollout budget and the backends that run it."""
