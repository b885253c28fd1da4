"""`dali-stream verify`: which files of a dataset are damaged, and which episodes they hold.

Decoders conceal errors: a few bytes changed inside an MP4's frames decode as other pixels without an
error (measured: four 16-byte writes in `mdat` gave wrong images through torchcodec and DALI alike). The
loader catches what a file's structure shows (truncation, a damaged index, unreadable parquet); the rest
needs a reference, which this tool compares every file against:
- the Hub's published hashes, for an `hf://datasets/...` source or `--against hf://datasets/...`: the LFS
  SHA-256 of LFS files, the git blob SHA-1 of the others (huggingface_hub's tree listing; no download of
  the reference);
- `--against DIR` (any path or fsspec URL): a mirror whose files are hashed too.
`--decode` decodes every frame of every video file (PyAV, FFmpeg's error detection on: H.264/HEVC report
many damaged slices) and reads every parquet file whole, decoding every image of the cameras stored in its rows (at
the size info.json declares); on the project's sample data it also checks every frame's painted ids, which catches
what codecs without checksums (VP9, AV1) conceal. It then reads every
episode of every camera the way the loader does (`episode_problems`): the loader's segment cut, torchcodec, and
the frame-time check on every frame (`decode.cpu.check_frame_times`), the whole episode in one call and its
first and last frames alone (each a seek in a fresh decoder, where a cut's end went wrong before), so a frame
the loader would get wrong is reported with its episode.

The report lists each damaged file with why (missing, size, hash, decode) and the episodes it holds, each
problem under the file it is about (an episode's files are read together: one damaged file fails every camera's
read of its episodes, and is named alone), and apart from them what is wrong with the dataset as a whole
(`dataset_problems`: info.json's fps against the videos' own frame rate, which is then not blamed on the videos;
its episode and frame totals against the episodes table's).
"""

from __future__ import annotations

import hashlib
import posixpath
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError, RemoteError
from .sample_defaults import painted_offset

TOP_FOLDERS = ("meta", "data", "videos")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Published:
    """What a reference says of one file: its size and one hash (algorithm, hex digest), or None."""

    size: int
    hash: tuple[str, str] | None


def _found(fs, root: str):
    """(path relative to root, fsspec info) of every file under root's meta/, data/ and videos/."""
    for top in TOP_FOLDERS:
        base = posixpath.join(root, top)
        if fs.exists(base):
            for path, info in fs.find(base, detail=True).items():
                if info.get("type", "file") == "file":
                    yield posixpath.relpath(path, root), info


def _files(fs, root: str) -> dict[str, int]:
    """Relative path -> size of every file of the dataset."""
    return {rel: int(info.get("size") or 0) for rel, info in _found(fs, root)}


def _hub_published(fs, root: str) -> dict[str, Published]:
    """The Hub's own record of each file: LFS SHA-256, else the git blob SHA-1 (buckets: size only)."""
    return {rel: Published(int(info["size"]), ("sha256", info["lfs"]["sha256"]) if info.get("lfs") else
                           (("git-sha1", info["blob_id"]) if info.get("blob_id") else None))
            for rel, info in _found(fs, root)}


def _hash(fs, path: str, algorithm: str, size: int, progress: Callable[[int], None] | None) -> str:
    h = hashlib.sha1(f"blob {size}\0".encode()) if algorithm == "git-sha1" else hashlib.new(algorithm)
    with fs.open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()


def _raw(fs):
    """The fsspec filesystem under dali_stream's RemoteFS wrapper (find/ls with details come from it)."""
    return getattr(fs, "fs", fs)


def _is_hub(fs) -> bool:
    return type(_raw(fs)).__name__ == "HfFileSystem"


def reference_of(against: str | None, source: str, fs, root: str, storage_options: dict | None):
    """(what the reference is, relative path -> Published, filesystem and root to hash, or None)."""
    from ..source.storage import RemoteOptions, open_fs

    if against is None:
        if _is_hub(fs):
            return f"published hashes of {source}", _hub_published(_raw(fs), root), None
        raise ConfigError(f"{source!r} has no published hashes to compare with: pass --against DIR (a mirror) or "
                          "--against hf://datasets/<org>/<name>, or --decode to decode every file")
    ref_fs, ref_root = open_fs(against, RemoteOptions(dict(storage_options or {})))
    if not ref_fs.exists(ref_root):
        raise ConfigError(f"--against {against!r} does not exist; pass the root of the reference copy")
    if type(ref_fs) is type(fs) and ref_root.rstrip("/") == root.rstrip("/"):
        raise ConfigError(f"--against {against!r} is {source!r} itself: pass another copy (a mirror, or hf://...)")
    if _is_hub(ref_fs):
        return f"published hashes of {against}", _hub_published(_raw(ref_fs), ref_root), None
    sizes = _files(_raw(ref_fs), ref_root)
    return f"the copy at {against}", {p: Published(s, None) for p, s in sizes.items()}, (ref_fs, ref_root)


def episodes_of(meta) -> dict[str, list[int]]:
    """Relative file path -> episode indices whose rows or frames it holds."""
    out: dict[str, list[int]] = {}
    for pos in range(meta.num_episodes):
        ep = meta.episode_index(pos)
        paths = [meta.data_file(pos)] + [meta.video_file(pos, key) for key in meta.video_keys]
        for path in paths:
            out.setdefault(posixpath.relpath(path, meta.data_root), []).append(ep)
    return out


def _decode_problems(meta, rel: str, fs, root: str) -> str | None:
    """Why `rel` does not decode cleanly (video: FFmpeg errors, painted ids on sample data; parquet: unreadable, or
    images in its rows that do not decode)."""
    import av

    path = posixpath.join(root, rel)
    if rel.endswith(".parquet"):
        from ..errors import DatasetError
        from ..source.storage import read_parquet

        try:
            table = read_parquet(fs, path)
        except DatasetError as exc:
            return str(exc)
        return _image_problems(meta, table) if meta is not None else None
    if not rel.endswith(".mp4"):
        return None
    expect = _painted_ids(meta, path) if meta is not None else None
    depth = meta is not None and any(cam.depth is not None and f"/videos/{key}/" in f"/{rel}"
                                     for key, cam in meta.cameras.items())
    errors, wrong, frames = 0, 0, 0
    try:
        with fs.open(path, "rb") as raw, av.open(raw) as container:
            if not container.streams.video:
                return "no readable video track (damaged index)"
            stream = container.streams.video[0]
            stream.codec_context.options = {"err_detect": "crccheck+bitstream+buffer+explode"}
            fps = meta.fps if meta is not None else None
            for packet in container.demux(stream):
                try:
                    decoded = packet.decode()
                except av.error.FFmpegError:
                    errors += 1
                    continue
                for frame in decoded:
                    frames += 1
                    if expect is not None and fps is not None and not _ids_ok(frame, expect, fps, depth):
                        wrong += 1
    except av.error.FFmpegError as exc:
        return f"not a readable MP4: {exc}"
    parts = ([f"{errors} packets fail to decode"] if errors else []) + \
        ([f"{wrong} of {frames} frames show other painted ids"] if wrong else []) + \
        ([f"{frames} frames decode, the episodes table places {len(expect)} in this file"]
         if expect is not None and frames != len(expect) else [])
    return "; ".join(parts) or None


def _image_problems(meta, table) -> str | None:
    """Why the images of a data file's cameras stored in the tables (`meta.image_keys`) do not all decode at the size
    info.json declares: per camera, how many fail and the first one's episode and frame."""
    from ..decode.images import decode_image
    from ..errors import DecodeError
    from ..fetch.tables import image_bytes

    keys = [k for k in meta.image_keys if k in table.column_names]
    if not keys:
        return None
    where = list(zip(table.column("episode_index").to_pylist(), table.column("frame_index").to_pylist()))
    parts = []
    for key in keys:
        blobs = image_bytes(table.column(key)).tolist()
        want = meta.image_size(key)
        bad = []
        for (episode, frame), blob in zip(where, blobs):
            try:
                ok = blob is not None and decode_image(blob, "").shape[:2] == want
            except DecodeError:
                ok = False
            if not ok:
                bad.append((episode, frame))
        if bad:
            parts.append(f"{len(bad)} of {len(blobs)} images of {key} do not decode at {want[1]}x{want[0]} (first: "
                         f"episode {bad[0][0]}, frame {bad[0][1]})")
    return "; ".join(parts) or None


VERIFY_CHUNK = 256  # frames `episode_problems` decodes at once (~240 MB of 480p RGB)


def episode_problems(meta, tolerance_s: float, progress: Callable[[int, int], None] | None = None
                     ) -> dict[str, list[str]]:
    """Relative file -> what goes wrong reading its episodes as the loader does (see the module doc)."""

    from ..decode.cpu import DecoderCache, torchcodec_frames
    from ..decode.depth import depth_codes
    from ..errors import DaliStreamError, RemoteError
    from ..fetch.store import EpisodeStore
    from ..fetch.tables import FRAME_TIME_S
    from ..meta.catalog import Catalog
    from .paint import depth_shows, shows

    painted = meta.info.get("robot_type") == "dali_stream_sample"
    offset = painted_offset(meta.info)  # a mixture member's sample paints its episodes shifted
    store = EpisodeStore(Catalog.whole(meta), tolerance_s, 1 << 28, DecoderCache(1), fetch_workers=0)
    found: dict[str, list[str]] = {}
    try:
        for pos in range(meta.num_episodes):
            episode = meta.episode_index(pos)
            for key in meta.video_keys:
                rel = posixpath.relpath(meta.video_file(pos, key), meta.data_root)
                try:
                    rows = store.rows(pos)
                    seg = store.segment(pos, key)
                    query = float(meta.cameras[key].from_timestamp[pos]) + rows[FRAME_TIME_S]
                    idx = seg.frame_indices(query, tolerance_s, "every frame")
                    misread: list[int] = []
                    reader = DecoderCache(1)  # one decoder, forward through the episode
                    depth = meta.cameras[key].depth is not None  # its codes, through the loader's depth route

                    def decode(part, reader=reader, depth=depth, seg=seg):
                        return depth_codes(seg, part) if depth else torchcodec_frames(seg, part, reader)
                    for start in range(0, len(idx), VERIFY_CHUNK):  # an hour at 480p whole would be ~100 GB
                        frames = decode(idx[start:start + VERIFY_CHUNK])
                        if painted:
                            misread += [start + f for f, image in enumerate(frames)
                                        if not (depth_shows if depth else shows)(image, (episode + offset, start + f))]
                    reader.clear()
                    for part in (idx[:1], idx[-1:]):
                        decode(part, None)
                    if misread:
                        raise DaliStreamError(f"{len(misread)} of {len(idx)} frames of episode {episode}, "
                                              f"camera {key!r} show other painted ids (first: frame "
                                              f"{misread[0]})")
                except RemoteError:
                    raise  # the remote read failed, not the file: no finding about its bytes
                except DaliStreamError as exc:
                    held = [posixpath.relpath(meta.data_file(pos), meta.data_root)] + \
                        [posixpath.relpath(meta.video_file(pos, k), meta.data_root) for k in meta.video_keys]
                    why = f"loader: {type(exc).__name__}: {exc}"
                    problems = found.setdefault(_blamed(exc, held, rel, meta.data_root), [])
                    if why.split(" (episode ")[0] not in (p.split(" (episode ")[0] for p in problems):
                        problems.append(why)
            if progress:
                progress(pos + 1, meta.num_episodes)
    finally:
        store.close()
    return found


def _total_problems(meta) -> list[str]:
    """info.json's episode and frame totals against the episodes table's: a row lost from meta/episodes drops its
    episode from training without a word (the table is what the loader reads), a table holding more is a stale
    info.json. Not a file's fault, and no reason to skip reading the files."""
    found = []
    for key, what, have in (("total_episodes", "episodes", meta.num_episodes), ("total_frames", "frames", meta.total_frames)):
        said = meta.info.get(key)
        if isinstance(said, int) and said != have:
            why = ("rows are missing from the episodes table (their episodes are never trained on), or info.json is "
                   "stale" if have < said else "info.json is stale (written before episodes were added)")
            found.append(f"meta/info.json says {said} {what} ({key}), but meta/episodes holds {have}: {why}; re-download meta/")
    return found


def _dataset_problems(meta) -> list[str]:
    """What is wrong with the dataset as a whole rather than with a file: each camera's videos against info.json's
    fps (its first file that indexes, `fetch.indexes.check_rate`: a wrong fps shifts every window and frame time,
    and would otherwise show as other painted ids in every video). A damaged file is the file's finding."""
    from ..errors import DaliStreamError, DamagedFileError, DatasetError
    from ..fetch.indexes import IndexCache
    from ..source.storage import LocalRanges, is_local

    if meta.num_episodes == 0:
        return []
    cache = IndexCache(LocalRanges(meta.data_fs) if is_local(meta.data_fs) else meta.data_fs, fps=meta.fps)
    found = []
    for key in meta.video_keys:
        for path in dict.fromkeys(meta.video_file(pos, key) for pos in range(meta.num_episodes)):
            try:
                cache.get(path)
            except DamagedFileError:
                continue  # the file's own finding: the camera's next file tells its rate
            except DatasetError as exc:
                found.append(f"camera {key!r}: {exc}")
            except DaliStreamError:
                continue
            break
    return found


def _size_problems(meta) -> dict[str, list[str]]:
    """Relative video file -> its pictures' size where it is not the size info.json gives its camera, read from each
    file's MP4 index (its sample entry, as the loader checks it: `fetch.indexes.check_size`), in the loader's words."""
    from ..errors import DaliStreamError, DatasetError
    from ..fetch.indexes import IndexCache
    from ..source.storage import LocalRanges, is_local

    cache = IndexCache(LocalRanges(meta.data_fs) if is_local(meta.data_fs) else meta.data_fs, meta=meta)
    found: dict[str, list[str]] = {}
    for key in meta.video_keys:
        for path in dict.fromkeys(meta.video_file(pos, key) for pos in range(meta.num_episodes)):
            try:
                cache.get(path, key)
            except DatasetError as exc:
                found[posixpath.relpath(path, meta.data_root)] = [f"loader: {type(exc).__name__}: {exc}"]
            except DaliStreamError:
                continue  # a damaged or unreadable file: the other checks name it
    return found


def _blamed(exc: Exception, held: list[str], reading: str, root: str) -> str:
    """Which of an episode's files (`held`: relative paths, its data file first) an error reading camera file
    `reading` is about: the file a `DamagedFileError` names, else the one file of `held` its message names, else
    `reading`. The loader fetches an episode's files together, so one damaged file fails every camera's read of
    that episode: the healthy ones are not blamed for it."""
    path = getattr(exc, "path", "")
    if path and path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    text = str(exc)
    named = [rel for rel in held if posixpath.join(root, rel) in text or f" {rel}" in text]
    return named[0] if len(set(named)) == 1 else reading


def _painted_ids(meta, path: str) -> dict[int, tuple[int, int]] | None:
    """Frame tick (round(t * fps)) -> (episode, frame) for a sample-data file; None for other datasets."""
    if meta.info.get("robot_type") != "dali_stream_sample":
        return None
    out = {}
    offset = painted_offset(meta.info)
    for key, cam in meta.cameras.items():
        for pos in range(meta.num_episodes):
            if meta.video_file(pos, key) != path:
                continue
            for f in range(int(meta.lengths[pos])):
                out[round((float(cam.from_timestamp[pos]) + f / meta.fps) * meta.fps)] = (meta.episode_index(pos) + offset,
                                                                                         f)
    return out


def _ids_ok(frame, expect: dict, fps: float, depth: bool = False) -> bool:
    """Whether a decoded frame shows the ids planned at its time (a depth camera's: its codes' ids)."""
    from .paint import frame_shows

    return frame_shows(frame, expect.get(round(frame.time * fps)), depth)


def verify(source: str, against: str | None = None, revision: str | None = None, decode: bool = False,
           storage_options: dict | None = None, progress: Callable[[str, int, int], None] | None = None,
           tolerance_s: float = 1e-4) -> dict:
    """Compare every file of `source` with the reference (and decode it with `decode`); see the module doc.

    `progress(stage, done, total)` is called as files are hashed (bytes), decoded (files) and read as the loader
    reads them (episodes, stage "episodes"); `tolerance_s` as the loader's."""
    from ..meta.dataset import DatasetMeta
    from ..source.storage import RemoteOptions, open_fs

    fs, root = open_fs(source, RemoteOptions(dict(storage_options or {})), revision)
    if not fs.exists(root):  # the loader's own error, which names what a Hub id shaped path was read as
        DatasetMeta.open(source, remote=RemoteOptions(dict(storage_options or {})), revision=revision)
    mine = _files(_raw(fs), root)
    decoded_why = "asked (--decode)" if decode else None
    if against is None and not decode and not _is_hub(fs):  # no hashes to compare with: decoding needs none
        decode, decoded_why = True, "no published hashes to compare with (--against DIR or hf://... compares)"
    what, published, mirror = (reference_of(against, source, fs, root, storage_options)
                               if against is not None or _is_hub(fs) else ("", {}, None))
    try:
        meta = DatasetMeta.open(source, remote=RemoteOptions(dict(storage_options or {})), revision=revision)
        holders, meta_error = episodes_of(meta), None
    except RemoteError:
        raise  # a remote read that failed says nothing of the files' bytes: not a finding
    except Exception as exc:  # a damaged meta file is itself a finding; keep going without the episode map
        meta, holders, meta_error = None, {}, f"{type(exc).__name__}: {exc}"
    rate_problems = _dataset_problems(meta) if meta is not None else []  # every video's ids would be off: not read
    total_problems = _total_problems(meta) if meta is not None else []  # a file's ids against the table: not read
    dataset_problems = rate_problems + total_problems
    damaged: dict[str, list[str]] = _size_problems(meta) if meta is not None else {}
    checked = 0
    if what:
        todo = sorted(set(mine) | set(published))
        total = sum(mine.get(p, 0) for p in todo)
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if progress:
                progress("hash", done, total)

        for rel in todo:
            ref = published.get(rel)
            if rel not in mine:
                damaged.setdefault(rel, []).append(f"missing here ({what} has {ref.size} bytes)")
                continue
            if ref is None:
                continue  # a file the reference does not have: not ours to judge
            checked += 1
            if mine[rel] != ref.size:
                damaged.setdefault(rel, []).append(f"size {mine[rel]} bytes, {what} says {ref.size}")
                advance(mine[rel])
                continue
            algorithm, want = ref.hash if ref.hash else ("sha256", None)
            if want is None and mirror is not None:
                want = _hash(_raw(mirror[0]), posixpath.join(mirror[1], rel), algorithm, ref.size, None)
            if want is None:
                advance(mine[rel])
                continue
            got = _hash(_raw(fs), posixpath.join(root, rel), algorithm, mine[rel], advance)
            if got != want:
                damaged.setdefault(rel, []).append(f"{algorithm} {got[:12]}…, {what} says {want[:12]}…")
    if decode:
        todo = sorted(p for p in mine if p.endswith((".mp4", ".parquet")))
        for n, rel in enumerate(todo):
            # a dataset-level cause (the fps; rows missing from the episodes table) would show in the videos'
            # painted ids: not the files' fault
            why = _decode_problems(None if dataset_problems and rel.endswith(".mp4") else meta, rel, fs, root)
            if why:
                damaged.setdefault(rel, []).append(f"decode: {why}")
            if progress:
                progress("decode", n + 1, len(todo))
        if meta is not None and not rate_problems:
            # episodes are read in file order, so a row group holding many episodes is decoded once here whatever
            # the layout: the loader's warning about such files (a training run's random order) does not apply
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*row group \d+ holds \d+ rows, many episodes' worth")
                found = episode_problems(meta, tolerance_s,
                                         lambda done, total: progress and progress("episodes", done, total))
            for rel, problems in found.items():
                damaged.setdefault(rel, []).extend(p for p in problems if p not in damaged[rel])
    files: list[dict[str, Any]] = [{"file": rel, "problems": problems, "episodes": holders.get(rel, [])}
             for rel, problems in sorted(damaged.items())]
    episodes = sorted({e for f in files for e in f["episodes"]})
    return {"source": source, "reference": what or None, "decoded": decode, "decoded_why": decoded_why,
            "files_here": len(mine),
            "files_compared": checked, "damaged": files, "damaged_episodes": episodes, "meta_error": meta_error,
            "dataset_problems": dataset_problems, "exit_code": 1 if files or meta_error or dataset_problems else 0}
