"""Stage 6, graph: a batch plan turned into DALI inputs (`batches`, `clips`) and the DALI pipeline that decodes,
augments, resizes and normalises them (`pipeline`, `imageops`)."""
