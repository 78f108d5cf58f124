"""GEMM benchmark: TFLOP/s of large products and host time of small ones, vram vs peers.

Throughput (TFLOP/s, 2·M·N·K per call, ``out=`` preallocated for every peer):
- squares 1024, 4096, 8192 in bf16, fp16 and fp32 (TF32 off for every library: fp32 is
  compared like with like), and LLM projections [M, 2048] x [2048, N] in bf16 for M in 1,
  16, 128, 1024, 4096 and N in 2048, 8192;
- peers: vram (default: cuBLASLt with cached plans), vram with TunableOp, PyTorch
  (torch.mm, its default cuBLAS route), PyTorch with its TunableOp, CuPy (cupy.matmul;
  no bf16 in CuPy). TunableOp tunes each problem at its first call, outside the timing.
Each peer's call runs, after warm-up, between two CUDA events on the library's current
stream, as many times as fit in about 25 ms; the peers take turns, run by run (so that
clock and temperature drift is shared), and the cell is the median of 5 runs. The ratio
columns divide by PyTorch's default.

Host time per call (us) of a 64x64 product in fp32 and bf16, the GPU kept busy only by the
calls themselves: vram.mm (a new result, and ``out=``), torch.mm (both ways), cupy.matmul
(both ways), and as floors a raw ``cublasGemmEx`` and a raw ``cublasLtMatmul`` (vram's
cached descriptors and algorithm) through nvmath's bindings, and an empty kernel launch
(vram's driver). 7 interleaved rounds of 2,000 calls each, timed with perf_counter_ns, the
GPU synchronized between rounds; the cell is the median round.

Inputs are random normal values (never zeros). ``--device sim:0`` runs vram alone on small
sizes, to check the script anywhere. torch.cuda.tunable is used only through the functions
the installed PyTorch has (``write_file_on_exit`` is gone from recent versions, which
append each result to the file as it is found).

    python bench/gemm.py [--device cuda:0] [--out FILE.json|DIR] [--save]
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

import vram
from _common import add_output_arguments, description_of, device_name, write_results

SQUARES = (1024, 4096, 8192)
LLM_M = (1, 16, 128, 1024, 4096)
LLM_N = (2048, 8192)
LLM_K = 2048
SIM_SQUARES = (64, 128)
SIM_LLM = ((1, 256, 256), (16, 256, 256))
REPEATS = 5  # timed runs per throughput cell
TARGET_MS = 25.0  # GPU time of one timed run
HOST_CALLS = 2000
HOST_ROUNDS = 7
HOST_N = 64
DTYPES = ("bfloat16", "float16", "float32")

Call = Callable[[], object]


class _Skip(Exception):
    pass


# ---- timing --------------------------------------------------------------------------------


def _iterations(call: Call, events: Callable[[], tuple], sync: Callable[[], None]) -> int:
    """Warm ``call`` up and return how many calls fill about TARGET_MS of GPU time."""
    for _ in range(3):
        call()
    sync()
    start, end = events()
    start.record()
    call()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)
    return max(1, min(1000, int(TARGET_MS / one)))


def _timed_ms(call: Call, iterations: int, events: Callable[[], tuple]) -> float:
    """Milliseconds per call over one event-timed run of ``iterations`` calls (one untimed
    call first: entering a peer's settings may make it choose its plan again)."""
    call()
    start, end = events()
    start.record()
    for _ in range(iterations):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iterations


def _host_us(calls: dict[str, Call], sync: Callable[[], None]) -> dict[str, float]:
    """Median microseconds per call of each entry, over interleaved rounds."""
    for call in calls.values():
        for _ in range(200):
            call()
    sync()
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(HOST_ROUNDS):
            for name, call in calls.items():
                begin = time.perf_counter_ns()
                for _ in range(HOST_CALLS):
                    call()
                rounds[name].append((time.perf_counter_ns() - begin) / HOST_CALLS / 1e3)
                sync()
    finally:
        if enabled:
            gc.enable()
    return {name: statistics.median(values) for name, values in rounds.items()}


# ---- the peers -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random normal fp32 values, made once for every peer of a cell (never written to)."""
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


class _Vram:
    def __init__(self, device: vram.Device, tuned: bool) -> None:
        self.device, self.tuned = device, tuned

    def prepare(self, dtype: str, m: int, k: int, n: int) -> Call:
        dt = getattr(vram, dtype)
        a = vram.tensor(_rand((m, k), 1), device=self.device).to(dt)
        b = vram.tensor(_rand((k, n), 2), device=self.device).to(dt)
        c = vram.empty((m, n), dtype=dt, device=self.device)
        return lambda: vram.mm(a, b, out=c)

    def events(self) -> tuple:
        return vram.Event(enable_timing=True), vram.Event(enable_timing=True)

    def sync(self) -> None:
        vram.synchronize(self.device)

    def __enter__(self) -> _Vram:
        vram.cuda.tunable.enable(self.tuned)
        return self

    def __exit__(self, *exc: object) -> None:
        vram.cuda.tunable.enable(False)


class _Torch:
    def __init__(self, device: vram.Device, tuned: bool, tmp: str) -> None:
        if device.type != "cuda":
            raise _Skip("PyTorch runs on a GPU only")
        try:
            import torch
        except ImportError as exc:
            raise _Skip(f"torch is not installed: {exc}") from None
        self.torch, self.tuned = torch, tuned
        _torch_ieee_fp32(torch)
        if tuned:
            tunable = torch.cuda.tunable
            missing = [f for f in ("enable", "set_filename") if not hasattr(tunable, f)]
            if missing:
                raise _Skip(f"torch.cuda.tunable has no {', '.join(missing)}")
            if hasattr(tunable, "write_file_on_exit"):  # gone in recent PyTorch
                tunable.write_file_on_exit(False)
            tunable.set_filename(f"{tmp}/torch_tunableop.csv")

    def prepare(self, dtype: str, m: int, k: int, n: int) -> Call:
        torch = self.torch
        dt = getattr(torch, dtype)
        a = torch.from_numpy(_rand((m, k), 1)).to("cuda", dt)
        b = torch.from_numpy(_rand((k, n), 2)).to("cuda", dt)
        c = torch.empty((m, n), dtype=dt, device="cuda")
        return lambda: torch.mm(a, b, out=c)

    def events(self) -> tuple:
        event = self.torch.cuda.Event
        return event(enable_timing=True), event(enable_timing=True)

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def __enter__(self) -> _Torch:
        if self.tuned:
            self.torch.cuda.tunable.enable(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tuned:
            self.torch.cuda.tunable.enable(False)


def _torch_ieee_fp32(torch) -> None:
    """fp32 products in full fp32 (no TF32), whichever switch this PyTorch reads."""
    torch.backends.cuda.matmul.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")


def _torch_setup() -> dict[str, object]:
    try:
        import torch
    except ImportError:
        return {}
    found: dict[str, object] = {
        "torch": torch.__version__,
        "torch BLAS library": str(torch.backends.cuda.preferred_blas_library())
        if hasattr(torch.backends.cuda, "preferred_blas_library")
        else None,
        "torch allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    return found


class _Cupy:
    def __init__(self, device: vram.Device) -> None:
        if device.type != "cuda":
            raise _Skip("CuPy runs on a GPU only")
        try:
            import cupy
        except ImportError as exc:
            raise _Skip(f"cupy is not installed: {exc}") from None
        self.cupy = cupy

    def prepare(self, dtype: str, m: int, k: int, n: int) -> Call:
        if dtype == "bfloat16":
            raise _Skip("CuPy has no bfloat16")
        cp = self.cupy
        a = cp.asarray(_rand((m, k), 1)).astype(dtype)
        b = cp.asarray(_rand((k, n), 2)).astype(dtype)
        c = cp.empty((m, n), dtype=dtype)
        return lambda: cp.matmul(a, b, out=c)

    def events(self) -> tuple:
        event = self.cupy.cuda.Event
        return _CupyEvent(event()), _CupyEvent(event())

    def sync(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def __enter__(self) -> _Cupy:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _CupyEvent:
    """CuPy's event with the interface the timing uses."""

    def __init__(self, event) -> None:
        self.event = event

    def record(self) -> None:
        self.event.record()

    def synchronize(self) -> None:
        self.event.synchronize()

    def elapsed_time(self, end: _CupyEvent) -> float:
        import cupy

        return cupy.cuda.get_elapsed_time(self.event, end.event)


# ---- throughput ----------------------------------------------------------------------------


def _cases(device: vram.Device) -> list[tuple[str, str, int, int, int]]:
    """(label, dtype, M, K, N) for every throughput cell."""
    if device.type == "sim":
        squares = [(d, s, s, s) for d in ("bfloat16", "float32") for s in SIM_SQUARES]
        llm = [("bfloat16", m, k, n) for m, k, n in SIM_LLM]
    else:
        squares = [(d, s, s, s) for d in DTYPES for s in SQUARES]
        llm = [("bfloat16", m, LLM_K, n) for n in LLM_N for m in LLM_M]
    cases = [("square", *c) for c in squares]
    return cases + [("llm", *c) for c in llm]


def throughput(device: vram.Device, tmp: str) -> tuple[list[dict], list[str]]:
    peers: dict[str, Callable[[], object]] = {
        "vram": lambda: _Vram(device, False),
        "vram tuned": lambda: _Vram(device, True),
        "torch": lambda: _Torch(device, False, tmp),
        "torch tunableop": lambda: _Torch(device, True, tmp),
        "cupy": lambda: _Cupy(device),
    }
    made, skipped = {}, []
    for name, make in peers.items():
        try:
            made[name] = make()
        except _Skip as exc:
            skipped.append(f"{name}: {exc}")
    rows = []
    for kind, dtype, m, k, n in _cases(device):
        row: dict[str, object] = {"case": kind, "dtype": dtype, "M x K x N": f"{m}x{k}x{n}"}
        ready = {}
        for name, peer in made.items():
            try:
                call = peer.prepare(dtype, m, k, n)
                with peer:
                    call()  # TunableOp tunes the problem here
                    ready[name] = (peer, call, _iterations(call, peer.events, peer.sync))
            except _Skip:
                continue
            except Exception as exc:  # one peer's failure is reported, not the end of the run
                skipped.append(f"{name} ({dtype} {m}x{k}x{n}): failed: {exc!r}")
        runs: dict[str, list[float]] = {name: [] for name in ready}
        for _ in range(REPEATS):  # the peers take turns, run by run
            for name, (peer, call, iterations) in list(ready.items()):
                try:
                    with peer:
                        runs[name].append(_timed_ms(call, iterations, peer.events))
                except Exception as exc:
                    skipped.append(f"{name} ({dtype} {m}x{k}x{n}): failed: {exc!r}")
                    del ready[name]
                    runs[name] = []
        flops = 2.0 * m * n * k
        for name in made:
            ms = statistics.median(runs[name]) if runs.get(name) else None
            row[f"{name} TFLOP/s"] = None if ms is None else float(f"{flops / ms / 1e9:.4g}")
        torch_tflops = row.get("torch TFLOP/s")
        for name in ("vram", "vram tuned"):
            if torch_tflops and row.get(f"{name} TFLOP/s"):
                row[f"{name} / torch"] = round(row[f"{name} TFLOP/s"] / torch_tflops, 3)
        rows.append(row)
        print(_line(row), flush=True)
        del ready, runs
    return rows, skipped


def _line(row: dict) -> str:
    return "  ".join(f"{k}={v}" for k, v in row.items())


# ---- host time -------------------------------------------------------------------------------


def _raw_gemm_ex(device: vram.Device, dtype: str) -> Call:
    """cublasGemmEx through nvmath's bindings, nothing else per call (the floor of a cuBLAS
    call from Python): handle, stream and workspace are set once."""
    try:
        from nvmath.bindings import cublas
    except ImportError as exc:
        raise _Skip(f"nvmath is not installed: {exc}") from None
    dt = getattr(vram, dtype)
    n = HOST_N
    a = vram.tensor(_rand((n, n), 3), device=device).to(dt)
    b = vram.tensor(_rand((n, n), 4), device=device).to(dt)
    c = vram.empty((n, n), dtype=dt, device=device)
    scalars = np.array([1.0, 0.0], dtype=np.float32)
    handle = cublas.create()
    cublas.set_stream(handle, vram.current_stream(device).cuda_stream)
    data = {"float32": 0, "bfloat16": 14}[dtype]  # cudaDataType_t
    compute, algo = 68, 99  # CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP
    alpha = scalars.ctypes.data
    beta = alpha + 4
    pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
    keep = (a, b, c, scalars)

    def call() -> None:
        cublas.gemm_ex(
            handle, 0, 0, n, n, n, alpha, pb, data, n, pa, data, n, beta, pc, data, n,
            compute, algo,
        )  # fmt: skip

    call.keep = keep  # type: ignore[attr-defined]
    return call


def _raw_lt_matmul(device: vram.Device, dtype: str) -> Call:
    """cublasLtMatmul through nvmath's bindings with the descriptors, layouts and algorithm
    of vram's cached plan for the problem: the floor of any cuBLASLt call from Python."""
    try:
        from nvmath.bindings import cublasLt
    except ImportError as exc:
        raise _Skip(f"nvmath is not installed: {exc}") from None
    from vram.blas import _ops

    dt = getattr(vram, dtype)
    n = HOST_N
    a = vram.tensor(_rand((n, n), 3), device=device).to(dt)
    b = vram.tensor(_rand((n, n), 4), device=device).to(dt)
    c = vram.empty((n, n), dtype=dt, device=device)
    vram.mm(a, b, out=c)  # makes the plan and sets its alpha to 1
    stream = vram.current_stream(device)
    pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
    plan = getattr(_ops.product_plan(c, a, b, pa | pb | pc), "library", None)
    if not hasattr(plan, "desc"):
        raise _Skip("vram's plan for this problem is not a cuBLASLt one")
    size = plan.ws_bytes
    workspace = 0
    if plan.workspace is not None:
        request, library = plan.workspace
        workspace = vram.memory.get_workspace(request, library=library, stream=stream)
    p, q = (pb, pa) if plan.swap else (pa, pb)
    args = (
        plan.lt, plan.desc, plan.alpha_ptr, p, plan.la, q, plan.lb, plan.beta_ptr, pc,
        plan.lc, pc, plan.lc, plan.algo_ptr, workspace, size, stream.cuda_stream,
    )  # fmt: skip
    matmul = cublasLt.matmul

    def call() -> None:
        matmul(*args)

    call.keep = (a, b, c, plan)  # type: ignore[attr-defined]
    return call


def _empty_launch(device: vram.Device) -> Call:
    driver = device.driver
    kernel = driver.compile(device.index, 'extern "C" __global__ void empty() {}', "empty")
    stream = vram.current_stream(device).cuda_stream
    return lambda: driver.launch(kernel, (1, 1, 1), (1, 1, 1), (), stream)


def host_time(device: vram.Device) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    for dtype in ("float32", "bfloat16"):
        calls: dict[str, Call] = {}
        dt = getattr(vram, dtype)
        n = HOST_N
        a = vram.tensor(_rand((n, n), 5), device=device).to(dt)
        b = vram.tensor(_rand((n, n), 6), device=device).to(dt)
        c = vram.empty((n, n), dtype=dt, device=device)
        calls["vram.mm"] = lambda a=a, b=b: vram.mm(a, b)
        calls["vram.mm out="] = lambda a=a, b=b, c=c: vram.mm(a, b, out=c)
        peers: list[tuple[str, Callable[[], dict[str, Call]]]] = [
            ("torch", lambda dtype=dtype: _torch_host(device, dtype)),
            ("cupy", lambda dtype=dtype: _cupy_host(device, dtype)),
            (
                "raw cublasGemmEx",
                lambda dtype=dtype: {"raw cublasGemmEx": _raw_gemm_ex(device, dtype)},
            ),
            (
                "raw cublasLtMatmul",
                lambda dtype=dtype: {"raw cublasLtMatmul": _raw_lt_matmul(device, dtype)},
            ),
            ("empty kernel launch", lambda: {"empty kernel launch": _empty_launch(device)}),
        ]
        for name, make in peers:
            if device.type != "cuda":
                skipped.append(f"{name}: needs a GPU")
                continue
            try:
                calls.update(make())
            except _Skip as exc:
                skipped.append(f"{name} ({dtype}): {exc}")
            except Exception as exc:  # reported, and the other entries still measured
                skipped.append(f"{name} ({dtype}): failed: {exc!r}")

        def sync() -> None:
            vram.synchronize(device)

        found = _host_us(calls, sync)
        row: dict[str, object] = {"dtype": dtype, "M x K x N": f"{n}x{n}x{n}"}
        row.update({f"{name} us": round(us, 3) for name, us in found.items()})
        for mine, theirs in (
            ("vram.mm", "torch.mm"),
            ("vram.mm out=", "torch.mm out="),
            ("vram.mm out=", "torch.mm"),
        ):
            if theirs in found:
                row[f"{mine} / {theirs}"] = round(found[mine] / found[theirs], 3)
        rows.append(row)
        print(_line(row), flush=True)
    return rows, skipped


def _torch_host(device: vram.Device, dtype: str) -> dict[str, Call]:
    try:
        import torch
    except ImportError as exc:
        raise _Skip(f"torch is not installed: {exc}") from None
    _torch_ieee_fp32(torch)
    dt = getattr(torch, dtype)
    a = torch.from_numpy(_rand((HOST_N, HOST_N), 5)).to("cuda", dt)
    b = torch.from_numpy(_rand((HOST_N, HOST_N), 6)).to("cuda", dt)
    c = torch.empty((HOST_N, HOST_N), dtype=dt, device="cuda")
    return {"torch.mm": lambda: torch.mm(a, b), "torch.mm out=": lambda: torch.mm(a, b, out=c)}


def _cupy_host(device: vram.Device, dtype: str) -> dict[str, Call]:
    if dtype == "bfloat16":
        raise _Skip("CuPy has no bfloat16")
    try:
        import cupy as cp
    except ImportError as exc:
        raise _Skip(f"cupy is not installed: {exc}") from None
    a = cp.asarray(_rand((HOST_N, HOST_N), 5))
    b = cp.asarray(_rand((HOST_N, HOST_N), 6))
    c = cp.empty((HOST_N, HOST_N), dtype=cp.float32)
    return {
        "cupy.matmul": lambda: cp.matmul(a, b),
        "cupy.matmul out=": lambda: cp.matmul(a, b, out=c),
    }


# ---- main ------------------------------------------------------------------------------------


def _setup(device: vram.Device) -> dict[str, object]:
    """Versions and the settings that decide the kernels, recorded beside the numbers."""
    found: dict[str, object] = {
        "vram allow_tf32": vram.backends.cuda.matmul.allow_tf32,
        "vram BLAS library": vram.backends.cuda.preferred_blas_library(),
    }
    if device.type == "cuda":
        from vram.driver import _cublas

        if _cublas.available():
            found.update(_cublas.versions())
        found.update(_torch_setup())
        try:
            import cupy

            found["cupy"] = cupy.__version__
        except ImportError:
            pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description_of(__doc__))
    parser.add_argument("--device", default=None, help="cuda:N or sim:N (default: the default)")
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    device = vram.default_device() if options.device is None else vram.device(options.device)
    vram.set_device(device)
    vram.backends.cuda.matmul.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        vram.cuda.tunable.write_file_on_exit(False)
        vram.cuda.tunable.set_filename(f"{tmp}/vram_tunableop.csv")
        print(f"gemm benchmark on {device} ({device_name(device)})")
        setup = _setup(device)
        print(_line(setup), flush=True)
        begin = time.perf_counter()
        rows, skipped = throughput(device, tmp)
        print(f"throughput: {time.perf_counter() - begin:.0f} s", flush=True)
        begin = time.perf_counter()
        host_rows, host_skipped = host_time(device)
        print(f"host time: {time.perf_counter() - begin:.0f} s", flush=True)
    for table in (rows, host_rows):
        if table:
            table[0]["_setup"] = setup  # left out of the README's tables
    paths = write_results("gemm", device, rows, options.out, options.save)
    paths += write_results("gemm_host", device, host_rows, options.out, options.save)
    for skip in dict.fromkeys(skipped + host_skipped):
        print(f"skipped: {skip}")
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
