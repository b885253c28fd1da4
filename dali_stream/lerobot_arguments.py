"""lerobot's dataset arguments that StreamLoader has no setting for (LeRobotDataset's and StreamingLeRobotDataset's),
each with what to use instead: `LoaderConfig.make` refuses them with that answer rather than "no such setting"."""

LEROBOT_ARGUMENTS = {
    "video_backend": "the decoder is chosen per camera: `decode=` ('auto', 'cpu', 'gpu', 'cpu-open', 'dali-cpu')",
    "download_videos": "nothing is downloaded: the loader streams only the bytes of the episodes it draws",
    "force_cache_sync": "each run reads the source as it is now: what the loader keeps on a local drive between runs "
                        "(table_cache_dir, frame_cache_dir, disk_cache_dir) is named by each file's size and "
                        "modification time or the store's version tag, never stale",
    "batch_encoding_size": "a recording setting; the loader only reads",
    "rgb_encoder": "a recording setting; the loader only reads",
    "depth_encoder": "a recording setting; the loader only reads",
    "encoder_threads": "a recording setting; the loader only reads",
    "streaming_encoding": "a recording setting; the loader only reads",
    "encoder_queue_maxsize": "a recording setting; the loader only reads",
    "token": "a private Hub dataset reads with storage_options={'token': ...}, or the login of `hf auth login` / "
             "HF_TOKEN",
    # StreamingLeRobotDataset's
    "streaming": "the loader always streams: it reads only the bytes of the episodes it draws, local or remote",
    "buffer_size": "samples are drawn from episode_pool_size whole episodes a rank keeps open ('all': a global "
                   "shuffle), their bytes bounded by cache_bytes",
    "max_num_shards": "ranks shard the episodes themselves (rank and world_size from torchrun or SLURM; "
                      "partition='node' keeps a node's share)",
    "rng": "seed= sets every random choice: a plan is a function of the seed, the epoch and the position",
    "repo_type": "a bucket is a source URL: 'hf://buckets/<org>/<name>'",
    "return_uint8": "image_dtype='uint8' gives the frames as uint8 (image_dtype='float32', the default, as lerobot's "
                    "[0, 1] floats)",
}
