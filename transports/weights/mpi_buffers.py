"""Weight channel over MPI buffers (mpi4py): numpy views on CPU, CUDA tensors on CUDA-aware MPI.

Ranks are ranks of the communicator given, which should carry weights only (``make_weight_
transport`` duplicates the one it is given). CUDA buffers are handed to MPI through the CUDA
array interface / DLPack, which only works when the MPI library is CUDA-aware; when it is not,
``check_device`` raises a message that says so instead of letting MPI read device pointers as
host memory.

MPI moves a large message only while the processes call into MPI: the receiver's ``ready()``
polls with ``Test`` and the sender's ``progress()`` does the same.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch
from mpi4py import MPI

_CUDA_ENV = "MPIRL_MPI_CUDA_AWARE"  # "1"/"0" overrides detection (MPIs that cannot be asked)


def mpi_cuda_aware() -> bool | None:
    """Whether this MPI takes CUDA device buffers: True, False, or None when it cannot tell.

    Asks Open MPI's ``MPIX_Query_cuda_support()`` or MPICH's ``MPIX_GPU_query_support`` (both
    are C extensions that mpi4py does not wrap) through the symbols of the loaded MPI library.
    """
    env = os.environ.get(_CUDA_ENV)
    if env is not None:
        return env.strip().lower() in ("1", "true", "yes")
    try:
        lib = ctypes.CDLL(MPI.__file__)  # resolves symbols of libmpi, which mpi4py links
    except OSError:
        return None
    query = getattr(lib, "MPIX_Query_cuda_support", None)  # Open MPI
    if query is not None:
        query.restype = ctypes.c_int
        return bool(query())
    query = getattr(lib, "MPIX_GPU_query_support", None)  # MPICH: (gpu_type, *is_supported)
    if query is not None:
        flag = ctypes.c_int(0)
        query.restype = ctypes.c_int
        if query(ctypes.c_int(0), ctypes.byref(flag)) == 0:  # 0 = MPIX_GPU_SUPPORT_CUDA
            return bool(flag.value)
    return None


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def single_copy_shared_memory() -> bool:
    """Whether MPI's shared memory between ranks of this host can copy a large message in one
    go, read by the receiver from the sender's memory (Linux cross-memory attach, Open MPI's
    smsc/cma, MPICH's CMA): then the receiver moves the bytes whatever the sender is doing.
    Without it a large message travels in fragments that the sender's own MPI calls push.

    Needs ``process_vm_readv`` (a container's seccomp profile may forbid it: tried here on this
    process's own memory) and a Yama ptrace scope of 0 or 1 (MPIs handle 1 themselves).
    """
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        scope = 0  # no Yama: ordinary ptrace rules, which same-user ranks pass
    if scope >= 2:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        readv = libc.process_vm_readv
    except (OSError, AttributeError):
        return False
    src, dst = ctypes.create_string_buffer(b"cma-test"), ctypes.create_string_buffer(8)
    local = _IoVec(ctypes.cast(dst, ctypes.c_void_p), 8)
    remote = _IoVec(ctypes.cast(src, ctypes.c_void_p), 8)
    readv.restype = ctypes.c_ssize_t
    done = readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return done == 8 and dst.raw == src.raw[:8]


class MPIChannel:
    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self._tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767

    def isend(self, buf: torch.Tensor, dst: int, tag: int) -> MPI.Request:
        if buf.is_cuda:  # MPI does not follow CUDA streams: the bytes must be written first
            torch.cuda.current_stream(buf.device).synchronize()
        return self.comm.Isend([self._mem(buf), MPI.BYTE], dst, self._tag(tag))

    def irecv(self, buf: torch.Tensor, src: int, tag: int) -> MPI.Request:
        return self.comm.Irecv([self._mem(buf), MPI.BYTE], src, self._tag(tag))

    def wait(self, handle: MPI.Request) -> None:
        handle.Wait()

    def test(self, handle: MPI.Request) -> bool:
        return handle.Test()

    def pollable(self, device: torch.device) -> bool:
        return True

    def posts_block(self, device: torch.device) -> bool:
        return False  # Isend returns at once; the bytes move as the requests are progressed

    def check_device(self, device: torch.device) -> None:
        if device.type == "cpu":
            return
        if device.type != "cuda":
            raise RuntimeError(f"the MPI weight transport moves CPU or CUDA buffers, not {device}")
        aware = mpi_cuda_aware()
        if not aware:
            why = (
                "says it is not (MPIX_Query_cuda_support() = 0)" if aware is False else "cannot be asked whether it is"
            )
            raise RuntimeError(
                f"weight transport 'mpi' was asked for with CUDA tensors, but this MPI "
                f"({MPI.Get_library_version().split(',')[0].strip()}) is not CUDA-aware: it "
                f"{why}. Use the 'torch' transport (NCCL), run with a CUDA-aware MPI (e.g. Open "
                f"MPI built --with-cuda or with UCX/CUDA), or set {_CUDA_ENV}=1 if you know "
                f"it is."
            )

    @staticmethod
    def _mem(buf: torch.Tensor):
        # CPU: a numpy view shares the tensor's memory. CUDA: mpi4py reads the tensor's
        # __cuda_array_interface__ / __dlpack__ and passes the device pointer to MPI.
        return buf.numpy() if buf.device.type == "cpu" else buf

    def _tag(self, tag: int) -> int:
        if tag > self._tag_ub:
            raise ValueError(f"message tag {tag} exceeds MPI_TAG_UB {self._tag_ub}: raise bucket_bytes")
        return tag
