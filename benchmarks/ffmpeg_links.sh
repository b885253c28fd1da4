#!/usr/bin/env bash
# Lets torchcodec load the FFmpeg that PyAV's wheel bundles, on a node with no FFmpeg of its own (the GPU node).
# torchcodec's libraries ask for FFmpeg by soname (libavcodec.so.62, libavutil.so.60, ...); PyAV's wheel ships the
# same libraries renamed (av.libs/libavcodec-5e6b81c2.so.62.28.102). This makes, in DEST, a link per FFmpeg library named
# as the soname asks (name + major version) and prints the LD_LIBRARY_PATH to export: DEST, then av.libs (the
# libraries' own dependencies, under their hashed names), then what was already there.
#   export LD_LIBRARY_PATH=$(bash benchmarks/ffmpeg_links.sh /tmp/site/av.libs /tmp/ffmpeg-libs)
set -euo pipefail
libs=${1:?the av.libs folder of an installed PyAV wheel}
dest=${2:?a folder for the links}
mkdir -p "$dest"
for lib in "$libs"/lib{av,sw}*.so*; do  # FFmpeg's own: its other libraries would shadow the system's
    # libavcodec-5e6b81c2.so.62.28.102 -> libavcodec.so.62 (torchcodec's NEEDED entry)
    name=$(basename "$lib" | sed -E 's/^(lib[a-z0-9_]+)-[0-9a-f]+(\.so\.[0-9]+).*$/\1\2/')
    [ "$name" != "$(basename "$lib")" ] && ln -sf "$lib" "$dest/$name"
done
echo "$dest:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
