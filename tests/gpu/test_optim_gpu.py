"""vram's fused Adam/AdamW/SGD on the GPU against PyTorch's fused ones: the same inputs for 100
steps give the same parameters and state within 1 ulp per element (most bitwise), for
float32, float16 and bfloat16, with and without amsgrad, maximize and weight decay; grad
scaling; a device lr; PyTorch's state_dict loaded into vram goes on the same; launches per
step; foreach ops against PyTorch's. Each test prints every comparison (max ulps, fraction
bitwise equal) and fails naming all that are more than 1 ulp apart (run with -s to see)."""

from __future__ import annotations

import pytest

import vram
from vram.driver import cuda_usable
from vram.ops import _multi_tensor
from vram.optim import SGD, Adam, AdamW

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

torch = pytest.importorskip("torch")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SHAPES = [(1000,), (257, 129), (2 * 65536 + 3,), (5,), (16384 * 3,)]
STEPS = 100


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place between same-dtype float tensors (0 when equal)."""
    int_type = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    bits = [t.contiguous().view(int_type).to(torch.int64) for t in (a, b)]
    top = 1 << (8 * a.element_size() - 1)
    ordered = [torch.where(x < 0, -(x + top), x) for x in bits]  # monotonic in the value
    return (ordered[0] - ordered[1]).abs()


def compare(name: str, mine: vram.Tensor, theirs: torch.Tensor, stats: dict) -> None:
    """Record (max ulps, fraction bitwise equal, worst element's values) under ``name``."""
    got = torch.from_dlpack(mine).clone()
    diff = ulps(got, theirs.detach())
    worst = int(diff.argmax())
    values = (float(got.reshape(-1)[worst]), float(theirs.reshape(-1)[worst]))
    stats[name] = (int(diff.max()), round(float((diff == 0).float().mean()), 4), values)


def within_one_ulp(stats: dict, label: str) -> None:
    """Print every comparison, then fail naming all that differ by more than 1 ulp."""
    print(label, {k: v[:2] for k, v in stats.items()})
    bad = {k: v for k, v in stats.items() if v[0] > 1}
    assert not bad, f"{label}: more than 1 ulp apart (max ulps, equal, vram/torch): {bad}"


def twins(dtype, seed: int, offset: bool = True):
    """The same random parameters as torch tensors and as vram tensors. With ``offset``, the
    first is a view one element into a buffer on both sides: not 16-byte aligned, it takes
    PyTorch's ragged path and vram's scalar one. Element counts not a multiple of 4 take
    PyTorch's ragged path too; the others its vectorized one."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    theirs, mine = [], []
    for k, shape in enumerate(SHAPES):
        base = torch.randn(shape, device="cuda", generator=gen, dtype=torch.float32).to(dtype)
        if offset and k == 0:
            buffer = torch.empty(base.numel() + 1, device="cuda", dtype=dtype)
            buffer[1:].copy_(base.reshape(-1))
            theirs.append(buffer[1:].view(shape).detach().requires_grad_(True))
        else:
            theirs.append(base.clone().requires_grad_(True))
        if offset and k == 0:
            holder = vram.empty(base.numel() + 1, dtype=_vram_dtype(dtype), device="cuda:0")
            view = holder[1:].view(shape)
            view.copy_(vram.from_dlpack(base))
            mine.append(view)
        else:
            mine.append(vram.from_dlpack(base.clone()).clone())
    return theirs, mine


def _vram_dtype(dtype):
    return {
        torch.float32: vram.float32,
        torch.float16: vram.float16,
        torch.bfloat16: vram.bfloat16,
    }[dtype]


def train(theirs, mine, topt, vopt, steps: int, seed: int, scale: float = 1.0) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for _ in range(steps):
        for p, q in zip(theirs, mine, strict=True):
            g = (torch.randn(p.shape, device="cuda", generator=gen) * scale).to(p.dtype)
            p.grad = g
            q.grad = vram.from_dlpack(g.clone()).clone()
        topt.step()
        vopt.step()
    torch.cuda.synchronize()
    vram.synchronize("cuda:0")


ADAM_CONFIGS = {
    "adam": (torch.optim.Adam, Adam, {}),
    "adam-amsgrad-wd": (torch.optim.Adam, Adam, {"amsgrad": True, "weight_decay": 0.01}),
    "adam-wd": (torch.optim.Adam, Adam, {"weight_decay": 0.01}),
    "adam-maximize": (torch.optim.Adam, Adam, {"maximize": True, "weight_decay": 0.1}),
    "adamw": (torch.optim.AdamW, AdamW, {"weight_decay": 0.01}),
    "adamw-maximize": (torch.optim.AdamW, AdamW, {"maximize": True, "weight_decay": 0.1}),
    "adamw-amsgrad-maximize": (torch.optim.AdamW, AdamW, {"amsgrad": True, "maximize": True}),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", ADAM_CONFIGS)
def test_fused_adam_equals_pytorchs_within_one_ulp(dtype, config):
    torch_class, vram_class, options = ADAM_CONFIGS[config]
    theirs, mine = twins(DTYPES[dtype], seed=1)
    topt = torch_class(theirs, lr=1e-3, fused=True, **options)
    vopt = vram_class(mine, lr=1e-3, fused=True, **options)
    train(theirs, mine, topt, vopt, STEPS, seed=2)
    stats: dict = {}
    for i, (p, q) in enumerate(zip(theirs, mine, strict=True)):
        compare(f"param {i}", q, p, stats)
        for key, value in topt.state[p].items():
            compare(f"{key} {i}", vopt.state[q][key], value, stats)
    within_one_ulp(stats, f"{config} {dtype}")


SGD_CONFIGS = {
    "sgd": {},
    "momentum-dampening": {"momentum": 0.9, "dampening": 0.1},
    "nesterov-wd": {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    "maximize-momentum-wd": {"momentum": 0.5, "maximize": True, "weight_decay": 0.1},
    "maximize-momentum-dampening": {"momentum": 0.9, "dampening": 0.1, "maximize": True},
    "maximize-nesterov-wd": {
        "momentum": 0.9,
        "nesterov": True,
        "maximize": True,
        "weight_decay": 0.1,
    },
    "wd": {"weight_decay": 0.01},
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", SGD_CONFIGS)
def test_fused_sgd_equals_pytorchs_within_one_ulp(dtype, config):
    theirs, mine = twins(DTYPES[dtype], seed=3)
    topt = torch.optim.SGD(theirs, lr=1e-2, fused=True, **SGD_CONFIGS[config])
    vopt = SGD(mine, lr=1e-2, fused=True, **SGD_CONFIGS[config])
    train(theirs, mine, topt, vopt, STEPS, seed=4)
    stats: dict = {}
    for i, (p, q) in enumerate(zip(theirs, mine, strict=True)):
        compare(f"param {i}", q, p, stats)
        if SGD_CONFIGS[config]:
            if "momentum" in SGD_CONFIGS[config]:
                buf = topt.state[p]["momentum_buffer"]
                compare(f"buffer {i}", vopt.state[q]["momentum_buffer"], buf, stats)
    within_one_ulp(stats, f"{config} {dtype}")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_grad_scale_found_inf_and_a_device_lr_as_pytorch(optimizer, dtype):
    theirs, mine = twins(DTYPES[dtype], seed=5, offset=False)
    lr_t = torch.tensor(1e-3, device="cuda")
    lr_v = vram.tensor(1e-3, device="cuda:0")
    if optimizer == "adam":
        topt = torch.optim.Adam(theirs, lr=lr_t, fused=True)
        vopt = Adam(mine, lr=lr_v, fused=True)
    else:
        topt = torch.optim.SGD(theirs, lr=lr_t, momentum=0.9, fused=True)
        vopt = SGD(mine, lr=lr_v, momentum=0.9, fused=True)
    for step in range(6):
        scale = 1024.0 * (step + 1)
        found = 1.0 if step == 3 else 0.0
        topt.grad_scale = torch.tensor(scale, device="cuda")
        topt.found_inf = torch.tensor(found, device="cuda")
        vopt.grad_scale = vram.tensor([scale], device="cuda:0")
        vopt.found_inf = vram.tensor([found], device="cuda:0")
        lr_t.fill_(1e-3 / (step + 1))
        lr_v.fill_(1e-3 / (step + 1))
        train(theirs, mine, topt, vopt, 1, seed=10 + step, scale=scale)
    stats: dict = {}
    for i, (p, q) in enumerate(zip(theirs, mine, strict=True)):
        compare(f"param {i}", q, p, stats)
        compare(f"grad {i}", q.grad, p.grad, stats)  # unscaled in place
    within_one_ulp(stats, f"scaled {optimizer} {dtype}")
    if optimizer == "adam":
        assert vopt.state[mine[0]]["step"].item() == topt.state[theirs[0]]["step"].item() == 5.0


def test_pytorchs_state_dict_loads_into_vram_and_training_goes_on_the_same():
    theirs, mine = twins(torch.float32, seed=6, offset=False)
    topt = torch.optim.AdamW(theirs, lr=1e-3, amsgrad=True, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(7)
    for _ in range(10):
        for p in theirs:
            p.grad = torch.randn(p.shape, device="cuda", generator=gen)
        topt.step()
    for p, q in zip(theirs, mine, strict=True):
        q.copy_(vram.from_dlpack(p.detach()))
    vopt = AdamW(mine, lr=1e-3, amsgrad=True, fused=True)
    vopt.load_state_dict(topt.state_dict())
    train(theirs, mine, topt, vopt, 20, seed=8)
    stats: dict = {}
    for i, (p, q) in enumerate(zip(theirs, mine, strict=True)):
        compare(f"param {i}", q, p, stats)
        compare(f"exp_avg_sq {i}", vopt.state[q]["exp_avg_sq"], topt.state[p]["exp_avg_sq"], stats)
    within_one_ulp(stats, "loaded state_dict")
    assert vopt.state[mine[1]]["step"].item() == 30.0


def test_two_hundred_tensors_step_in_two_launches(monkeypatch):
    device = vram.device("cuda:0")
    ps = [vram.zeros(5000 + i, device=device) for i in range(200)]
    for p in ps:
        p.grad = vram.ones(p.shape, device=device)
    launches = []  # every launch: the plans' launchers are prepared by multi_tensor_apply
    real = _multi_tensor.launcher

    def counting(device, launch):
        run = real(device, launch)

        def counted(*args):
            launches.append(launch.entry)
            run(*args)

        return counted

    monkeypatch.setattr(_multi_tensor, "launcher", counting)
    opt = Adam(ps, fused=True)
    opt.step()  # (the state, and the launchers)
    launches.clear()
    opt.step()
    assert len(launches) == 2  # steps += 1, then the update
    vram.synchronize(device)
    assert opt.state[ps[0]]["step"].item() == 2.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_foreach_ops_match_pytorchs(dtype):
    theirs, mine = twins(DTYPES[dtype], seed=9, offset=False)
    others, others_v = twins(DTYPES[dtype], seed=10, offset=False)
    with torch.no_grad():
        t = [p.detach().clone() for p in theirs]
        u = [p.detach().abs() + 0.5 for p in others]
        v = [vram.from_dlpack(x.clone()).clone() for x in t]
        w = [vram.from_dlpack(x.clone()).clone() for x in u]
        torch._foreach_lerp_(t, u, 0.1)
        vram._foreach_lerp_(v, w, 0.1)
        torch._foreach_addcdiv_(t, u, u, [0.5, 1.0, 2.0, 3.0, 4.0])
        vram._foreach_addcdiv_(v, w, w, [0.5, 1.0, 2.0, 3.0, 4.0])
        torch._foreach_mul_(t, 0.9)
        vram._foreach_mul_(v, 0.9)
        roots_t = torch._foreach_sqrt(u)
        roots_v = vram._foreach_sqrt(w)
    vram.synchronize("cuda:0")
    stats: dict = {}
    for i in range(len(t)):
        compare(f"lerp/addcdiv/mul {i}", v[i], t[i], stats)
        compare(f"sqrt {i}", roots_v[i], roots_t[i], stats)
    within_one_ulp(stats, f"foreach {dtype}")
