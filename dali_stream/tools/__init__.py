"""The tools around the loader: the `dali-stream` CLI (`cli`), `diagnose`, `bench`, `verify` and the sample
writer. The runtime (every other subpackage and module) never imports from here."""
