"""Minimal safetensors reader/writer (no dependency on the `safetensors` package).

Format (FACTS.md §5): 8-byte little-endian header length N, then N bytes of UTF-8 JSON
mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
relative to the first byte after the header), an optional "__metadata__" of string pairs,
then the raw little-endian tensor data.  Supported dtypes: F32, F64, I32, I64.
"""

import json
import struct
import sys

import torch

# safetensors dtype tag <-> torch dtype
_TAG_TO_DTYPE = {
    "F32": torch.float32,
    "F64": torch.float64,
    "I32": torch.int32,
    "I64": torch.int64,
}
_DTYPE_TO_TAG = {v: k for k, v in _TAG_TO_DTYPE.items()}


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw little-endian bytes of a contiguous CPU tensor."""
    if sys.byteorder != "little":
        raise RuntimeError("safetensors_io only supports little-endian hosts")
    t = t.detach().to("cpu").contiguous()
    # numpy is the simplest zero-fuss path from a torch tensor to bytes
    return t.numpy().tobytes()


def save_file(tensors: dict, path: str, metadata: dict = None) -> None:
    """Write `tensors` (name -> torch.Tensor of a supported dtype) to `path`.

    Tensors are written in the order of the dict; offsets are contiguous.
    """
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: not a tensor")
        if t.dtype not in _DTYPE_TO_TAG:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        data = _tensor_bytes(t)
        header[name] = {
            "dtype": _DTYPE_TO_TAG[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # pad the header with spaces so the data starts 8-byte aligned (allowed by the format)
    hjson += b" " * ((8 - (8 + len(hjson)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def load_file(path: str) -> dict:
    """Read a safetensors file into an ordered dict name -> torch.Tensor (CPU)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds file size")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tag = info["dtype"]
        if tag not in _TAG_TO_DTYPE:
            raise ValueError(f"{path}: {name}: unsupported dtype {tag}")
        begin, end = info["data_offsets"]
        dtype = _TAG_TO_DTYPE[tag]
        shape = info["shape"]
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.tensor([], dtype=dtype).element_size()
        if end - begin != numel * itemsize or end > len(data):
            raise ValueError(f"{path}: {name}: bad data_offsets {begin}..{end}")
        buf = bytearray(data[begin:end])  # copy: the tensor owns its memory
        t = torch.frombuffer(buf, dtype=dtype) if numel else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(shape).clone()
    return out


def load_metadata(path: str) -> dict:
    """The optional "__metadata__" dict of a safetensors file ({} if absent)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header.get("__metadata__", {})
