"""Random numbers: Philox4x32-10 generators as PyTorch's CUDA generator, the random ops with
torch's names, and their kernels (kernels/random.cu) with NumPy references (_philox.py).

- _philox.py: the arithmetic, in NumPy (what sim and cpu devices run);
- _generator.py: Generator, the default generators, seeding, graph-safe state;
- _draw.py: the plans that launch the kernels;
- _functions.py: rand, randn, randint, randperm, normal, bernoulli and the in-place forms.
"""

from ...graphs._graph import register_default_generator
from ._functions import (
    FUNCTIONS,
    bernoulli,
    bernoulli_,
    fused_dropout,
    normal,
    normal_,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    random_,
    randperm,
    uniform_,
)
from ._generator import (
    DEFAULT_SEED,
    Generator,
    default_generator,
    default_generators,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    seed_device_kind,
    set_rng_state,
)

register_default_generator(default_generator)

__all__ = [
    "DEFAULT_SEED",
    "FUNCTIONS",
    "Generator",
    "bernoulli",
    "bernoulli_",
    "default_generator",
    "default_generators",
    "get_rng_state",
    "initial_seed",
    "manual_seed",
    "fused_dropout",
    "normal",
    "normal_",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "random_",
    "randperm",
    "seed",
    "seed_device_kind",
    "set_rng_state",
    "uniform_",
]
