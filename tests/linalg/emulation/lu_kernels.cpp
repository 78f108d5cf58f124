// vram.linalg's LU kernels (src/vram/linalg/kernels/lu.cu) compiled for the CPU with
// cuda_on_cpu.h, behind a C interface that tests call through ctypes. Each entry point runs
// one kernel launch: the instance named by (dtype, configuration), or returns -1 when it is
// not built here. Dtype 0 is float, 1 double.
#include "cuda_on_cpu.h"

#include "../../../src/vram/linalg/kernels/lu.cu"

using namespace vram_lu;
using cuda_on_cpu::launch;

#define PANEL(T, THREADS, R, NB)                                                             \
    if (threads == THREADS && rows == R && width == NB) {                                    \
        launch(dim3{(unsigned)batch, 1, 1}, dim3{THREADS, 1, 1},                             \
               [&] { panel<T, 1, THREADS, R, NB>(*args); });                                    \
        return 0;                                                                            \
    }

// the configurations the tests use (tests/linalg/test_lu_kernels_on_cpu.py): one and two
// warps, one to four rows per thread, panels 8 to 32 wide; the GPU's own ones differ only
// in these constants (and all compile with NVRTC: test_linalg_kernels.py)
#define PANELS(T)                                                                  \
    if (threads == 32 && rows == 1 && width == 32) { /* as on the GPU: one warp */    \
        launch(dim3{(unsigned)batch, 1, 1}, dim3{32, 1, 1}, [&] { panel_warp<T>(*args); }); \
        return 0;                                                                      \
    }                                                                                  \
    PANEL(T, 64, 1, 32) \
    PANEL(T, 64, 2, 16) \
    PANEL(T, 32, 4, 8)  \
    PANEL(T, 64, 2, 8)

// tall panels (32 columns, ``sub`` of them in registers at a time)
#define TALL(T, THREADS, R, W)                                                              \
    if (threads == THREADS && rows == R && width == 32 && sub == W) {                       \
        launch(dim3{(unsigned)batch, 1, 1}, dim3{THREADS, 1, 1},                            \
               [&] { panel_tall<T, THREADS, R, W>(*args); });                                  \
        return 0;                                                                           \
    }
#define TALLS(T)     \
    TALL(T, 64, 2, 8) \
    TALL(T, 32, 4, 4) \
    TALL(T, 64, 1, 2)

extern "C" int emu_panel(int dtype, int threads, int rows, int width, int sub, long long batch,
                         const PanelArgs* args) {
    if (dtype == 0) {
        if (sub) {
            TALLS(float)
        } else {
            PANELS(float)
        }
    } else {
        if (sub) {
            TALLS(double)
        } else {
            PANELS(double)
        }
    }
    return -1;
}

extern "C" int emu_swap_trsm(int dtype, int width, int warps, int cols, long long batch,
                             long long tiles, const SwapArgs* args) {
    dim3 grid{(unsigned)batch, (unsigned)tiles, 1}, block{(unsigned)(32 * warps), 1, 1};
    if (width != 32) return -1;
    if (warps == 4 && cols == 32) {
        if (dtype == 0)
            launch(grid, block, [&] { swap_trsm<float, 32, 4, 32>(*args); });
        else
            launch(grid, block, [&] { swap_trsm<double, 32, 4, 32>(*args); });
    } else if (warps == 8 && cols == 8) {
        if (dtype == 0)
            launch(grid, block, [&] { swap_trsm<float, 32, 8, 8>(*args); });
        else
            launch(grid, block, [&] { swap_trsm<double, 32, 8, 8>(*args); });
    } else {
        return -1;
    }
    return 0;
}

extern "C" int emu_getrs(int dtype, int rhs, int threads, long long batch, long long tiles,
                         const SolveArgs* args) {
    dim3 grid{(unsigned)(batch * tiles), 1, 1}, block{(unsigned)threads, 1, 1};
    if (dtype == 0 && rhs == 1) launch(grid, block, [&] { getrs<float, 1>(*args); });
    else if (dtype == 0 && rhs == 8) launch(grid, block, [&] { getrs<float, 8>(*args); });
    else if (dtype == 1 && rhs == 1) launch(grid, block, [&] { getrs<double, 1>(*args); });
    else if (dtype == 1 && rhs == 8) launch(grid, block, [&] { getrs<double, 8>(*args); });
    else return -1;
    return 0;
}

extern "C" int emu_getrs_warp(int dtype, int rhs, long long batch, long long tiles,
                              const SolveArgs* args) {
    dim3 grid{(unsigned)(batch * tiles), 1, 1}, block{32, 1, 1};
    if (dtype == 0 && rhs == 1) launch(grid, block, [&] { getrs_warp<float, 1>(*args); });
    else if (dtype == 0 && rhs == 8) launch(grid, block, [&] { getrs_warp<float, 8>(*args); });
    else if (dtype == 1 && rhs == 1) launch(grid, block, [&] { getrs_warp<double, 1>(*args); });
    else if (dtype == 1 && rhs == 8) launch(grid, block, [&] { getrs_warp<double, 8>(*args); });
    else return -1;
    return 0;
}

extern "C" int emu_getrs_columns(int dtype, int threads, long long batch, long long tiles,
                                 const SolveArgs* args) {
    dim3 grid{(unsigned)(batch * tiles), 1, 1}, block{(unsigned)threads, 1, 1};
    if (dtype == 0) launch(grid, block, [&] { getrs_columns<float>(*args); });
    else launch(grid, block, [&] { getrs_columns<double>(*args); });
    return 0;
}
