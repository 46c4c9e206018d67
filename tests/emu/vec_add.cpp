// Vector add sample: z = x + y for float or half, single- or double-buffered, with a tail that
// is not 32-byte aligned handled by DataCopyPad. Written the way AscendC samples are written.
//
// usage: vec_add <f32|f16> <buffer_num 1|2> <n> <block_dim> <tile> <dir>
//   reads <dir>/x.bin, <dir>/y.bin, writes <dir>/z.bin; prints "ELAPSED_MS <ms>" (the launch
//   only) and "STATS <json>".
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace AscendC;

struct AddTiling {
    uint32_t totalLength;  // elements
    uint32_t tileLength;   // elements per tile, 32-byte multiple
};

template <typename T, int32_t BUFFER_NUM>
class KernelAdd {
 public:
    __aicore__ inline KernelAdd() {}
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, const AddTiling& t) {
        // Blocks take 32-byte aligned chunks; the last non-empty block takes the remainder.
        const uint32_t align = 32 / sizeof(T);
        const uint32_t blocks = static_cast<uint32_t>(GetBlockNum());
        const uint32_t per = ((t.totalLength + blocks - 1) / blocks + align - 1) / align * align;
        const uint32_t start = per * static_cast<uint32_t>(GetBlockIdx());
        blockLength = start >= t.totalLength ? 0 : (t.totalLength - start < per ? t.totalLength - start : per);
        tileLength = t.tileLength;
        xGm.SetGlobalBuffer((__gm__ T*)x + start, blockLength);
        yGm.SetGlobalBuffer((__gm__ T*)y + start, blockLength);
        zGm.SetGlobalBuffer((__gm__ T*)z + start, blockLength);
        pipe.InitBuffer(inQueueX, BUFFER_NUM, tileLength * sizeof(T));
        pipe.InitBuffer(inQueueY, BUFFER_NUM, tileLength * sizeof(T));
        pipe.InitBuffer(outQueueZ, BUFFER_NUM, tileLength * sizeof(T));
    }
    __aicore__ inline void Process() {
        const uint32_t loops = (blockLength + tileLength - 1) / tileLength;
        for (uint32_t i = 0; i < loops; i++) {
            const uint32_t len = blockLength - i * tileLength < tileLength ? blockLength - i * tileLength : tileLength;
            CopyIn(i, len);
            Compute(len);
            CopyOut(i, len);
        }
    }

 private:
    __aicore__ inline void CopyIn(uint32_t i, uint32_t len) {
        LocalTensor<T> xLocal = inQueueX.template AllocTensor<T>();
        LocalTensor<T> yLocal = inQueueY.template AllocTensor<T>();
        if ((len * sizeof(T)) % 32 == 0) {
            DataCopy(xLocal, xGm[i * tileLength], len);
            DataCopy(yLocal, yGm[i * tileLength], len);
        } else {
            DataCopyExtParams params{1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0};
            DataCopyPadExtParams<T> pad{false, 0, 0, T(0)};
            DataCopyPad(xLocal, xGm[i * tileLength], params, pad);
            DataCopyPad(yLocal, yGm[i * tileLength], params, pad);
        }
        inQueueX.EnQue(xLocal);
        inQueueY.EnQue(yLocal);
    }
    __aicore__ inline void Compute(uint32_t len) {
        LocalTensor<T> xLocal = inQueueX.template DeQue<T>();
        LocalTensor<T> yLocal = inQueueY.template DeQue<T>();
        LocalTensor<T> zLocal = outQueueZ.template AllocTensor<T>();
        Add(zLocal, xLocal, yLocal, static_cast<int32_t>(len));
        outQueueZ.template EnQue<T>(zLocal);
        inQueueX.FreeTensor(xLocal);
        inQueueY.FreeTensor(yLocal);
    }
    __aicore__ inline void CopyOut(uint32_t i, uint32_t len) {
        LocalTensor<T> zLocal = outQueueZ.template DeQue<T>();
        if ((len * sizeof(T)) % 32 == 0) {
            DataCopy(zGm[i * tileLength], zLocal, len);
        } else {
            DataCopyExtParams params{1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0};
            DataCopyPad(zGm[i * tileLength], zLocal, params);
        }
        outQueueZ.FreeTensor(zLocal);
    }

    TPipe pipe;
    TQue<QuePosition::VECIN, BUFFER_NUM> inQueueX, inQueueY;
    TQue<QuePosition::VECOUT, BUFFER_NUM> outQueueZ;
    GlobalTensor<T> xGm, yGm, zGm;
    uint32_t blockLength = 0;
    uint32_t tileLength = 0;
};

template <typename T, int32_t BUFFER_NUM>
__aicore__ inline void RunAdd(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling) {
    AddTiling t = *reinterpret_cast<__gm__ AddTiling*>(tiling);
    KernelAdd<T, BUFFER_NUM> op;
    op.Init(x, y, z, t);
    op.Process();
}

extern "C" __global__ __aicore__ void add_f32_db(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling) {
    RunAdd<float, 2>(x, y, z, tiling);
}
extern "C" __global__ __aicore__ void add_f32_sb(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling) {
    RunAdd<float, 1>(x, y, z, tiling);
}
extern "C" __global__ __aicore__ void add_f16_db(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling) {
    RunAdd<half, 2>(x, y, z, tiling);
}
extern "C" __global__ __aicore__ void add_f16_sb(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling) {
    RunAdd<half, 1>(x, y, z, tiling);
}

// ------------------------------------------------------------------ host

int main(int argc, char** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: %s <f32|f16> <buffer_num> <n> <block_dim> <tile> <dir>\n", argv[0]);
        return 2;
    }
    const std::string dtype = argv[1], dir = argv[6];
    const int bufferNum = std::atoi(argv[2]);
    const uint32_t n = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10));
    const int64_t blockDim = std::atoll(argv[4]);
    const uint32_t tile = static_cast<uint32_t>(std::strtoul(argv[5], nullptr, 10));
    const size_t elem = dtype == "f16" ? 2 : 4, bytes = n * elem;

    uint8_t* x = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* y = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* z = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* tiling = (uint8_t*)AscendC::GmAlloc(sizeof(AddTiling));
    if (!ReadFile(dir + "/x.bin", x, bytes) || !ReadFile(dir + "/y.bin", y, bytes)) {
        std::fprintf(stderr, "cannot read inputs\n");
        return 2;
    }
    AddTiling t{n, tile};
    std::memcpy(tiling, &t, sizeof t);

    AscendC::SetKernelMode(KernelMode::AIV_MODE);
    auto start = std::chrono::steady_clock::now();
    try {
        if (dtype == "f32" && bufferNum == 2) ICPU_RUN_KF(add_f32_db, blockDim, x, y, z, tiling);
        else if (dtype == "f32") ICPU_RUN_KF(add_f32_sb, blockDim, x, y, z, tiling);
        else if (bufferNum == 2) ICPU_RUN_KF(add_f16_db, blockDim, x, y, z, tiling);
        else ICPU_RUN_KF(add_f16_sb, blockDim, x, y, z, tiling);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    auto stop = std::chrono::steady_clock::now();
    std::printf("ELAPSED_MS %.3f\n", std::chrono::duration<double, std::milli>(stop - start).count());
    std::printf("STATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
    WriteFile(dir + "/z.bin", z, bytes);
    AscendC::GmFree(x);
    AscendC::GmFree(y);
    AscendC::GmFree(z);
    AscendC::GmFree(tiling);
    return 0;
}
