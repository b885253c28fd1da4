"""Stage 3, plan: which episode, frame and window every sample of every batch is, per rank and epoch.

Pure Python (numpy for arrays): no IO, no torch, no DALI, so plans are a function of (seed, epoch, world,
position) alone and resume is exact. `world` (rank and world size), `selection` (the episodes used),
`epoch` (pool sampler, partition, resume), `state` (the saved resume point)."""
