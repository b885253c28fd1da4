"""A stand-in for PyNvVideoCodec at its Python boundary, for the CPU: records everything the open-decoder engine
hands it (decoder arguments, each packet's bytes and time, ends of stream) and decodes the packets with FFmpeg's
own decoders (PyAV), handing frames back as NVDEC does with `OutputColorType.NATIVE`: NV12 by DLPack, known by
their PTS, in surfaces the decoder reuses (a frame's pixels hold until the decoder's next `Decode` call, then the
surface is overwritten: a caller that keeps a frame without copying it gets another picture). Not a test module (tests/decode/test_nvdec_contract.py uses it)."""

from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace

CODECS = {"H264": "h264", "HEVC": "hevc", "AV1": "libdav1d", "VP9": "vp9", "VP8": "vp8"}
cudaVideoCodec = SimpleNamespace(**{name: name for name in CODECS})
OutputColorType = SimpleNamespace(NATIVE="NATIVE", RGB="RGB", RGBP="RGBP")
_lock = threading.Lock()
decoders: list["Decoder"] = []  # every decoder created, in order


class PacketData:
    def __init__(self) -> None:
        self.bsl_data, self.bsl, self.pts = 0, 0, 0


class Frame:
    def __init__(self, pts: int, nv12) -> None:
        self.pts, self.nv12 = pts, nv12

    def getPTS(self) -> int:  # noqa: N802 - PyNvVideoCodec's name
        return self.pts

    def __dlpack__(self, *args, **kwargs):
        return self.nv12.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.nv12.__dlpack_device__()


class Decoder:
    def __init__(self, **kwargs) -> None:
        import av

        self.kwargs = kwargs
        self.thread = threading.current_thread().name
        self.calls: list[tuple] = []  # ("packet", bytes, pts) or ("eos",)
        self.ctx = av.CodecContext.create(CODECS[kwargs["codec"]], "r")
        self.surfaces: list = []  # NV12 tensors, overwritten by each Decode call

    def Decode(self, packet: PacketData) -> list[Frame]:  # noqa: N802 - PyNvVideoCodec's name
        import av

        from dali_stream.decode.nv12 import nv12_of_frame

        if packet.bsl == 0:
            self.calls.append(("eos",))
            frames = self.ctx.decode(None)
            self.ctx.flush_buffers()
        else:
            data = ctypes.string_at(packet.bsl_data, packet.bsl)
            self.calls.append(("packet", data, int(packet.pts)))
            pkt = av.Packet(data)
            pkt.pts = int(packet.pts)
            frames = self.ctx.decode(pkt)
        out = []
        for n, f in enumerate(frames):  # the n-th frame of a call goes into the n-th surface, reused call after call
            nv12 = nv12_of_frame(f)
            if n == len(self.surfaces) or self.surfaces[n].shape != nv12.shape:
                self.surfaces[n:n + 1] = [nv12.clone()]
            self.surfaces[n].copy_(nv12)
            out.append(Frame(int(f.pts), self.surfaces[n]))
        return out


def CreateDecoder(**kwargs) -> Decoder:  # noqa: N802 - PyNvVideoCodec's name
    dec = Decoder(**kwargs)
    with _lock:
        decoders.append(dec)
    return dec
