// LayerNorm over rows (float): y = (x - mean) / sqrt(var + eps) * gamma + beta, hidden size a
// multiple of 8 floats. Tiles of rows move with the DataCopyParams (burst) form of DataCopy;
// gamma/beta are loaded once into a TBuf and synchronised with SetFlag/WaitFlag<MTE2_V>.
//
// usage: layernorm <rows> <hidden> <block_dim> <rows_per_tile> <dir>
//   reads <dir>/x.bin, gamma.bin, beta.bin; writes <dir>/y.bin; prints "STATS <json>".
#include "kernel_operator.h"  // first, so builds can use a precompiled header
#include "tikicpulib.h"
#include "sample_host.h"  // ReadFile, WriteFile, PrintStats

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace AscendC;

struct LayerNormTilingData {
    uint32_t rows;
    uint32_t hidden;
    uint32_t rowsPerTile;
    float eps;
};

class KernelLayerNorm {
 public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR y, const LayerNormTilingData& t) {
        hidden = t.hidden;
        tileRows = t.rowsPerTile;
        eps = t.eps;
        const uint32_t blocks = static_cast<uint32_t>(GetBlockNum());
        const uint32_t per = (t.rows + blocks - 1) / blocks;
        const uint32_t first = per * static_cast<uint32_t>(GetBlockIdx());
        myRows = first >= t.rows ? 0 : (t.rows - first < per ? t.rows - first : per);
        xGm.SetGlobalBuffer((__gm__ float*)x + first * hidden, myRows * hidden);
        yGm.SetGlobalBuffer((__gm__ float*)y + first * hidden, myRows * hidden);
        gammaGm.SetGlobalBuffer((__gm__ float*)gamma, hidden);
        betaGm.SetGlobalBuffer((__gm__ float*)beta, hidden);
        pipe.InitBuffer(inQueue, 2, tileRows * hidden * sizeof(float));
        pipe.InitBuffer(outQueue, 2, tileRows * hidden * sizeof(float));
        pipe.InitBuffer(paramBuf, 2 * hidden * sizeof(float));
        pipe.InitBuffer(tmpBuf, hidden * sizeof(float));
        pipe.InitBuffer(workBuf, 64 * sizeof(float));
        pipe.InitBuffer(redBuf, 8 * sizeof(float));
    }
    __aicore__ inline void Process() {
        if (myRows == 0) return;
        LocalTensor<float> params = paramBuf.Get<float>();
        DataCopy(params, gammaGm, hidden);
        DataCopy(params[hidden], betaGm, hidden);
        SetFlag<HardEvent::MTE2_V>(0);
        WaitFlag<HardEvent::MTE2_V>(0);
        for (uint32_t r = 0; r < myRows; r += tileRows) {
            const uint32_t n = myRows - r < tileRows ? myRows - r : tileRows;
            CopyIn(r, n);
            Compute(n, params);
            CopyOut(r, n);
        }
    }

 private:
    __aicore__ inline void CopyIn(uint32_t r, uint32_t n) {
        LocalTensor<float> x = inQueue.AllocTensor<float>();
        DataCopyParams p(static_cast<uint16_t>(n), static_cast<uint16_t>(hidden * sizeof(float) / 32), 0, 0);
        DataCopy(x, xGm[r * hidden], p);
        inQueue.EnQue(x);
    }
    __aicore__ inline void Compute(uint32_t n, const LocalTensor<float>& params) {
        LocalTensor<float> x = inQueue.DeQue<float>();
        LocalTensor<float> y = outQueue.AllocTensor<float>();
        LocalTensor<float> sq = tmpBuf.Get<float>();
        LocalTensor<float> work = workBuf.Get<float>();
        LocalTensor<float> red = redBuf.Get<float>();
        const int32_t h = static_cast<int32_t>(hidden);
        for (uint32_t i = 0; i < n; ++i) {
            LocalTensor<float> xr = x[i * hidden], yr = y[i * hidden];
            ReduceSum(red, xr, work, h);
            SetFlag<HardEvent::V_S>(0);
            WaitFlag<HardEvent::V_S>(0);
            const float mean = red.GetValue(0) / static_cast<float>(hidden);
            Adds(yr, xr, -mean, h);
            Mul(sq, yr, yr, h);
            ReduceSum(red, sq, work, h);
            SetFlag<HardEvent::V_S>(0);
            WaitFlag<HardEvent::V_S>(0);
            const float var = red.GetValue(0) / static_cast<float>(hidden);
            Muls(yr, yr, 1.0f / std::sqrt(var + eps), h);
            Mul(yr, yr, params, h);
            Add(yr, yr, params[hidden], h);
        }
        outQueue.EnQue(y);
        inQueue.FreeTensor(x);
    }
    __aicore__ inline void CopyOut(uint32_t r, uint32_t n) {
        LocalTensor<float> y = outQueue.DeQue<float>();
        DataCopyParams p(static_cast<uint16_t>(n), static_cast<uint16_t>(hidden * sizeof(float) / 32), 0, 0);
        DataCopy(yGm[r * hidden], y, p);
        outQueue.FreeTensor(y);
    }

    TPipe pipe;
    TQue<QuePosition::VECIN, 1> inQueue;
    TQue<QuePosition::VECOUT, 1> outQueue;
    TBuf<TPosition::VECCALC> paramBuf, tmpBuf, workBuf, redBuf;
    GlobalTensor<float> xGm, yGm, gammaGm, betaGm;
    uint32_t hidden = 0, tileRows = 0, myRows = 0;
    float eps = 1e-5f;
};

extern "C" __global__ __aicore__ void layernorm_custom(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR y,
                                                       GM_ADDR workspace, GM_ADDR tiling) {
    (void)workspace;
    LayerNormTilingData t = *reinterpret_cast<__gm__ LayerNormTilingData*>(tiling);
    KernelLayerNorm op;
    op.Init(x, gamma, beta, y, t);
    op.Process();
}

// ------------------------------------------------------------------ host

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s <rows> <hidden> <block_dim> <rows_per_tile> <dir>\n", argv[0]);
        return 2;
    }
    LayerNormTilingData t{static_cast<uint32_t>(std::atoi(argv[1])), static_cast<uint32_t>(std::atoi(argv[2])),
                          static_cast<uint32_t>(std::atoi(argv[4])), 1e-5f};
    const int64_t blockDim = std::atoll(argv[3]);
    const std::string dir = argv[5];
    const size_t bytes = size_t(t.rows) * t.hidden * sizeof(float), pbytes = t.hidden * sizeof(float);
    uint8_t* x = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* gamma = (uint8_t*)AscendC::GmAlloc(pbytes);
    uint8_t* beta = (uint8_t*)AscendC::GmAlloc(pbytes);
    uint8_t* y = (uint8_t*)AscendC::GmAlloc(bytes);
    uint8_t* workspace = (uint8_t*)AscendC::GmAlloc(32);
    uint8_t* tiling = (uint8_t*)AscendC::GmAlloc(sizeof t);
    std::memcpy(tiling, &t, sizeof t);
    if (!ReadFile(dir + "/x.bin", x, bytes) || !ReadFile(dir + "/gamma.bin", gamma, pbytes) ||
        !ReadFile(dir + "/beta.bin", beta, pbytes)) {
        return 2;
    }
    AscendC::SetKernelMode(KernelMode::AIV_MODE);
    try {
        ICPU_RUN_KF(layernorm_custom, blockDim, x, gamma, beta, y, workspace, tiling);
    } catch (const AscendC::emu::DeviceRuleError& e) {
        std::printf("DEVICE_RULE_ERROR %s\n", e.what());
        return 3;
    }
    std::printf("STATS %s\n", AscendC::emu::ToJson(AscendC::emu::LastLaunch()).c_str());
    WriteFile(dir + "/y.bin", y, bytes);
    for (uint8_t* p : {x, gamma, beta, y, workspace, tiling}) AscendC::GmFree(p);
    return 0;
}
