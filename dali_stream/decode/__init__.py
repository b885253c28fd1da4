"""Stage 5, decode: what this node can decode and who decodes each camera. NVDEC capabilities (`gpus`), the
node's probes and the per-camera routes (`routes`), the CUDA device of a loader (`device`), the CPU decoder
(`cpu`, torchcodec) and DALI's decoder messages explained (`errors`)."""
