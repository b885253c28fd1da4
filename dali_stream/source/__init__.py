"""Stage 1, source: where the dataset's bytes are. A local folder or any fsspec URL (hf://, s3://, http://),
revisions, credentials, and the retry policy of remote reads. Imports nothing of the later stages."""
